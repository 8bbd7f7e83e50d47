"""Fuzz soak (issue 14): at least 100,000 malformed and mutated frames at a live 3-broker
cluster while a well-behaved client produces and reads.

Frames come from kafkalite.testing.fuzz_frames (seeded): random bytes, lying, truncated,
oversized and negative lengths, headers and bodies of random or real APIs, and real
clients' frames (kafka-python's encoders) with fields mutated; a share goes to the
inter-broker RPC ports. Each frame is sent on its own connection, which is then half-closed
and read until the broker answers and closes or 3 s pass; `--concurrency` connections are
open at a time, spread over the brokers.

Meanwhile a verifying producer (acks=all, idempotent, RF 3, min.insync.replicas 2) writes
`--rate` records/s and a consumer group member reads them, both recording a history
(kafkalite.testing.history). The run passes when no broker died, every broker answers
Metadata at the end, the producer was never without an acknowledgement for `--stall-seconds`,
and the history checker finds nothing lost, duplicated or misread. Memory: each broker's RSS
after warming up (the first 5% of the frames) and at the end.

    .venv/bin/python bench/fuzz_soak.py --frames 100000
    .venv/bin/python bench/fuzz_soak.py --frames 2000 --seed 3     # a quick look

Bounded by `--frames` and `--max-seconds`; starts its own cluster on free loopback ports
unless `--dir` names a running `bin/cluster` directory.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from local_cluster import local_cluster

from kafkalite.testing.cluster import LocalCluster, pid_alive
from kafkalite.testing.fuzz_frames import KINDS, FrameFuzzer
from kafkalite.testing.group_watch import GroupWatch
from kafkalite.testing.history import History, check
from kafkalite.testing.verify import VerifyingProducer, read_final_log, resend_check

TOPIC = "soak"
PARTITIONS = 3
READ_TIMEOUT_S = 3.0


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Tally:
    def __init__(self) -> None:
        self.sent: collections.Counter[str] = collections.Counter()
        self.outcome: collections.Counter[str] = collections.Counter()


async def throw(host: str, port: int, data: bytes, kind: str, tally: Tally) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), READ_TIMEOUT_S)
    except (TimeoutError, OSError) as e:
        tally.outcome[f"connect failed ({type(e).__name__})"] += 1
        return
    try:
        writer.write(data)
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        got = 0
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                tally.outcome["still open after 3 s"] += 1
                break
            chunk = await asyncio.wait_for(reader.read(65536), left)
            if not chunk:
                tally.outcome["answered, then closed" if got else "closed without an answer"] += 1
                break
            got += len(chunk)
    except TimeoutError:
        tally.outcome["still open after 3 s"] += 1
    except OSError as e:
        tally.outcome[f"reset ({type(e).__name__})"] += 1
    finally:
        tally.sent[kind] += 1
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


async def fuzz(targets: list[tuple[str, int]], rpc_targets: list[tuple[str, int]], frames: int, seed: int,
               concurrency: int, max_seconds: float, tally: Tally, on_progress) -> float:
    fuzzer = FrameFuzzer(seed)
    queue: asyncio.Queue = asyncio.Queue(maxsize=concurrency * 2)
    began = time.monotonic()

    async def worker() -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            await throw(*item, tally)

    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    for i in range(frames):
        if time.monotonic() - began > max_seconds:
            print(f"# stopped after {max_seconds:.0f} s at frame {i}", file=sys.stderr)
            break
        kind, data = fuzzer.next()
        host, port = (rpc_targets if kind == "rpc" else targets)[i % len(targets)]
        await queue.put((host, port, data, kind))
        on_progress(i + 1)
    for _ in workers:
        await queue.put(None)
    await asyncio.gather(*workers)
    return time.monotonic() - began


def run(cluster: LocalCluster, args: argparse.Namespace) -> int:
    status = cluster.status()
    boot = status["bootstrap"]
    brokers = status["brokers"]
    pids = {b["id"]: b["pid"] for b in brokers}
    targets = [(b["host"], b["port"]) for b in brokers]
    rpc_targets = [(b["host"], b["inter_broker_port"]) for b in brokers]
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": boot})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=min(3, len(brokers)),
                                               config={"min.insync.replicas": "2" if len(brokers) >= 3 else "1"})]).values():
            f.result(timeout=30)
    history = History()
    prefix = f"soak{args.seed}"
    producer = VerifyingProducer(boot, TOPIC, rate_per_s=args.rate, seconds_max=args.max_seconds + 120, prefix=prefix,
                                 history=history)
    group = GroupWatch(boot, TOPIC, f"{prefix}-group", members=1, seconds_max=args.max_seconds + 300, history=history)
    producer.start()
    group.start()
    time.sleep(3)
    rss_start = {b: rss_mib(pid) for b, pid in pids.items()}
    rss_warm: dict[int, float] = {}
    max_silence = 0.0
    warm_at = max(1, args.frames // 20)
    tally = Tally()
    last_report = [time.monotonic()]

    def on_progress(n: int) -> None:
        nonlocal max_silence
        max_silence = max(max_silence, producer.seconds_since_last_ack())
        if n == warm_at:
            rss_warm.update({b: rss_mib(pid) for b, pid in pids.items()})
        if time.monotonic() - last_report[0] >= 10:
            last_report[0] = time.monotonic()
            acked, failed = producer.snapshot()
            dead = [b for b, pid in pids.items() if not pid_alive(pid)]
            print(f"# {n} frames; producer acked {acked}, failed {failed}; RSS MiB "
                  + " ".join(f"{rss_mib(pid):.0f}" for pid in pids.values()) + (f"; DEAD {dead}" if dead else ""),
                  file=sys.stderr)

    elapsed = asyncio.run(fuzz(targets, rpc_targets, args.frames, args.seed, args.concurrency, args.max_seconds, tally,
                               on_progress))
    rss_end = {b: rss_mib(pid) for b, pid in pids.items()}
    time.sleep(2)
    max_silence = max(max_silence, producer.seconds_since_last_ack())
    producer.stop()
    producer.join(120)
    dead = [b for b, pid in pids.items() if not pid_alive(pid)]
    final = read_final_log(boot, TOPIC, PARTITIONS)
    deadline = time.monotonic() + 60
    acked_max: dict[int, int] = {}
    for a in list(producer.acked.values()):
        acked_max[a.partition] = max(acked_max.get(a.partition, -1), a.offset)
    while not group.caught_up(acked_max) and time.monotonic() < deadline:
        time.sleep(0.5)
    group.stop()
    explain = resend_check(cluster.status(), TOPIC, PARTITIONS, final, producer.client_account).explain  # librdkafka #4953
    verdict = check(history.events(), final, ours=lambda v: v.startswith(prefix.encode() + b"-"), explain=explain)
    answering = []
    for b in brokers:
        probe = AdminClient({"bootstrap.servers": f"{b['host']}:{b['port']}"})
        try:
            probe.list_topics(timeout=10)
            answering.append(b["id"])
        except Exception as e:  # noqa: BLE001 - reported below
            print(f"# broker {b['id']} does not answer Metadata: {e}", file=sys.stderr)

    sent = sum(tally.sent.values())
    print(f"fuzz soak: seed {args.seed}, {sent:,} frames in {elapsed:.1f} s ({sent / max(elapsed, 1e-9):,.0f}/s), "
          f"concurrency {args.concurrency}, {len(brokers)} brokers; load average {os.getloadavg()[0]:.1f}")
    print("frames by kind: " + ", ".join(f"{k} {tally.sent[k]:,}" for k in KINDS if tally.sent[k]))
    print("outcomes: " + ", ".join(f"{k} {v:,}" for k, v in tally.outcome.most_common()))
    print("| broker | RSS at start MiB | after warm-up MiB | at the end MiB | growth since warm-up |")
    print("|---:|---:|---:|---:|---:|")
    for b in sorted(pids):
        warm = rss_warm.get(b, rss_start[b])
        print(f"| {b} | {rss_start[b]:.1f} | {warm:.1f} | {rss_end[b]:.1f} | {rss_end[b] - warm:+.1f} |")
    acked, failed = producer.snapshot()
    print(f"well-behaved client: {producer.sent:,} sent, {acked:,} acknowledged, {failed} failed; longest time without "
          f"an acknowledgement {max_silence:.1f} s; consumer read {group.ledger.consumed:,}")
    print(verdict.report())
    problems = []
    if dead:
        problems.append(f"brokers died: {dead}")
    if len(answering) != len(brokers):
        problems.append(f"only brokers {answering} answer Metadata")
    if max_silence > args.stall_seconds:
        problems.append(f"the producer went {max_silence:.1f} s without an acknowledgement")
    if not verdict.ok:
        problems.append("the history check failed")
    if sent < args.frames:
        problems.append(f"only {sent:,} of {args.frames:,} frames were sent")
    print("FUZZ SOAK " + ("OK" if not problems else "FAILED: " + "; ".join(problems)))
    return 0 if not problems else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=16, help="connections open at a time")
    ap.add_argument("--rate", type=float, default=200, help="the well-behaved producer's records/s")
    ap.add_argument("--max-seconds", type=float, default=1800)
    ap.add_argument("--stall-seconds", type=float, default=10,
                    help="fail if the well-behaved producer goes this long without an acknowledgement")
    ap.add_argument("--dir", default=None, help="a running bin/cluster directory (default: start a cluster)")
    args = ap.parse_args()
    if args.dir:
        return run(LocalCluster.load(args.dir), args)
    with local_cluster(3, {}, "fuzz-soak-") as cluster:
        return run(cluster, args)


if __name__ == "__main__":
    sys.exit(main())
