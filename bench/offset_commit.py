"""OffsetCommit rate and latency: confluent-kafka clients committing offsets in a loop.

    .venv/bin/python bench/offset_commit.py                          # 4 clients x 10 partitions, 20 s
    .venv/bin/python bench/offset_commit.py --clients 8 --partitions 50 --seconds 30
    .venv/bin/python bench/offset_commit.py --async-window 16        # asynchronous commits, 16 in flight

Starts its own cluster (ZooKeeper and `--brokers` brokers, default 3, on free loopback ports
in a temporary directory, stopped at the end, also on SIGTERM), or uses `--bootstrap`. It
creates a topic of `--partitions` partitions (no records are needed: a commit names offsets,
the broker does not check them against the log) and `__consumer_offsets` (RF 3,
min.insync.replicas 2, compacted, created by the first FindCoordinator); then `--clients`
consumers, each in its own group (so the groups land on different `__consumer_offsets`
partitions, and so on different coordinators), each commit offsets for every partition of
the topic, offset n+1 at its n-th commit, until `--commits` each or `--seconds`, whichever
first. A commit is acknowledged once the offsets record is on min.insync.replicas replicas
(the coordinator appends with acks=all semantics, bounded by `offsets.commit.timeout.ms`).

Synchronous (default): commit(asynchronous=False) in a loop, one commit in flight per
client; latency is the call's duration. `--async-window W`: commit(asynchronous=True) with up
to W commits in flight per client, latency from the call to its on_commit callback; acks
must arrive in commit order (counted if not).

Figures: commits/s and partition-offsets/s overall and per client, latency p50/p99/max per
commit, failed commits (with the first error). At the end each client reads its offsets back
with committed() (an OffsetFetch to the coordinator) and compares them with the last
acknowledged commit: OK or FAIL.

The clients are threads of this process: commit() and poll() release the GIL while librdkafka
waits for the broker, and a commit's Python work (building `--partitions` TopicPartitions) is
microseconds against a round trip of milliseconds, so threads behave as separate clients here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from local_cluster import local_cluster, settings_line
from produce_perf import ensure_topic, percentile

from kafkalite.testing.probes import wait_fully_replicated

TOPIC = "offset-commit"
OFFSETS_TOPIC = "__consumer_offsets"
WARMUP_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 30.0  # after the loop, how long in-flight asynchronous commits may still take
JOIN_GRACE_S = 60.0
READ_BACK_TIMEOUT_S = 30.0
ERRORS_KEPT = 5


@dataclass
class ClientResult:
    client: int
    group: str
    commits: int = 0  # acknowledged
    failed: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    last_acked: int | None = None  # the offset of the last acknowledged commit
    out_of_order_acks: int = 0
    errors: list[str] = field(default_factory=list)
    read_back: str = "not checked"
    coordinator: int | None = None


def partitions_at(partitions: int, offset: int) -> list[TopicPartition]:
    return [TopicPartition(TOPIC, p, offset) for p in range(partitions)]


def commit_errors(partitions: list[TopicPartition] | None) -> list[str]:
    return [f"{tp.partition}: {tp.error}" for tp in partitions or [] if tp.error is not None]


def warm_up(consumer: Consumer, partitions: int) -> None:
    """Commit offset 0 until it is acknowledged: the coordinator is found (and on the first
    call __consumer_offsets created) before the clock starts."""
    deadline = time.monotonic() + WARMUP_TIMEOUT_S
    while True:
        try:
            errors = commit_errors(consumer.commit(offsets=partitions_at(partitions, 0), asynchronous=False))
            if not errors:
                return
            problem = ", ".join(errors)
        except KafkaException as e:
            problem = str(e)
        if time.monotonic() > deadline:
            raise SystemExit(f"warm-up: offsets not committed after {WARMUP_TIMEOUT_S:.0f} s: {problem}")
        time.sleep(0.2)


def run_sync(consumer: Consumer, r: ClientResult, args: argparse.Namespace, start: float) -> None:
    deadline = start + args.seconds
    n = 0
    while n < args.commits and time.perf_counter() < deadline:
        n += 1
        offsets = partitions_at(args.partitions, n)
        sent = time.perf_counter()
        try:
            errors = commit_errors(consumer.commit(offsets=offsets, asynchronous=False))
        except KafkaException as e:
            errors = [str(e)]
        if errors:
            r.failed += 1
            if len(r.errors) < ERRORS_KEPT:
                r.errors.append(f"commit {n}: {', '.join(errors)}")
            continue
        r.latencies_s.append(time.perf_counter() - sent)
        r.commits += 1
        r.last_acked = n


def run_async(consumer: Consumer, r: ClientResult, args: argparse.Namespace, start: float,
              acks: list[tuple[float, object, list[TopicPartition] | None]]) -> None:
    """Up to `--async-window` commits in flight; `acks` is filled by the on_commit callback,
    served by poll() in this thread."""
    deadline = start + args.seconds
    sent_at: dict[int, float] = {}
    n = 0

    def collect() -> None:
        while acks:
            stamp, err, partitions = acks.pop(0)
            offsets = {tp.offset for tp in partitions or []}
            offset = max(offsets) if offsets else None
            sent = sent_at.pop(offset, None) if offset is not None else None
            errors = ([str(err)] if err is not None else []) + commit_errors(partitions)
            if errors or sent is None:
                r.failed += 1
                if len(r.errors) < ERRORS_KEPT:
                    r.errors.append(f"commit {offset}: {', '.join(errors) or 'unknown offset in the callback'}")
                continue
            if r.last_acked is not None and offset < r.last_acked:
                r.out_of_order_acks += 1
            r.latencies_s.append(stamp - sent)
            r.commits += 1
            r.last_acked = offset if r.last_acked is None else max(r.last_acked, offset)

    while n < args.commits and time.perf_counter() < deadline:
        if len(sent_at) >= args.async_window:
            consumer.poll(0.01)
            collect()
            continue
        n += 1
        sent_at[n] = time.perf_counter()
        consumer.commit(offsets=partitions_at(args.partitions, n), asynchronous=True)
        consumer.poll(0)
        collect()
    drain_deadline = time.perf_counter() + DRAIN_TIMEOUT_S
    while sent_at and time.perf_counter() < drain_deadline:
        consumer.poll(0.01)
        collect()
    if sent_at:
        r.failed += len(sent_at)
        r.errors.append(f"{len(sent_at)} commits unanswered {DRAIN_TIMEOUT_S:.0f} s after the loop")


def client(index: int, boot: str, args: argparse.Namespace, barrier: threading.Barrier, r: ClientResult) -> None:
    acks: list = []
    config = {"bootstrap.servers": boot, "group.id": r.group, "client.id": f"committer-{index}", "enable.auto.commit": False}
    if args.async_window:
        config["on_commit"] = lambda err, partitions: acks.append((time.perf_counter(), err, partitions))
    consumer = Consumer(config)
    try:
        warm_up(consumer, args.partitions)
        consumer.poll(0)
        acks.clear()  # the warm-up's callbacks
        barrier.wait(WARMUP_TIMEOUT_S)
        start = time.perf_counter()
        if args.async_window:
            run_async(consumer, r, args, start, acks)
        else:
            run_sync(consumer, r, args, start)
        r.seconds = time.perf_counter() - start
        r.read_back = read_back(consumer, r, args.partitions)
    finally:
        consumer.close()


def read_back(consumer: Consumer, r: ClientResult, partitions: int) -> str:
    """committed() for every partition equals the last acknowledged commit's offset."""
    if r.last_acked is None:
        return "FAIL: nothing acknowledged"
    try:
        got = consumer.committed(partitions_at(partitions, 0), timeout=READ_BACK_TIMEOUT_S)
    except KafkaException as e:
        return f"FAIL: committed(): {e}"
    wrong = [f"{tp.partition}: {tp.offset}" for tp in got if tp.error is not None or tp.offset != r.last_acked]
    if wrong:
        return f"FAIL: expected {r.last_acked}, read {', '.join(wrong)}"
    return "OK"


def measure(boot: str, args: argparse.Namespace, cluster=None) -> list[ClientResult]:
    admin = AdminClient({"bootstrap.servers": boot})
    rf = min(3, len(admin.list_topics(timeout=30).brokers))
    ensure_topic(boot, TOPIC, args.partitions, rf, None)
    results = [ClientResult(i, f"offset-commit-{os.getpid()}-{i}") for i in range(args.clients)]
    if cluster is not None:  # __consumer_offsets fully replicated before the clock starts
        first = Consumer({"bootstrap.servers": boot, "group.id": results[0].group, "enable.auto.commit": False})
        try:
            warm_up(first, args.partitions)
        finally:
            first.close()
        wait_fully_replicated(cluster, OFFSETS_TOPIC, args.offsets_partitions, timeout_s=120)
    barrier = threading.Barrier(args.clients)
    threads = [threading.Thread(target=client, args=(i, boot, args, barrier, results[i]), name=f"committer-{i}", daemon=True)
               for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WARMUP_TIMEOUT_S + args.seconds + DRAIN_TIMEOUT_S + JOIN_GRACE_S)
        if t.is_alive():
            raise SystemExit(f"{t.name} did not finish")
    for r in results:
        try:
            r.coordinator = admin.describe_consumer_groups([r.group])[r.group].result(timeout=10).coordinator.id
        except (KafkaException, TimeoutError):
            pass
    return results


def report(results: list[ClientResult], args: argparse.Namespace, broker_settings: str) -> bool:
    mode = f"asynchronous, up to {args.async_window} in flight per client" if args.async_window else "synchronous"
    print(f"\noffset commit: {args.clients} clients (one group each), {args.partitions} partitions per commit, {mode}, "
          f"bounded by {args.commits} commits per client and {args.seconds:g} s")
    print(f"broker settings: {broker_settings}")
    print(f"{'client':>6} {'coordinator':>11} {'commits':>8} {'failed':>6} {'commits/s':>10} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>8} {'read-back':>9}")
    ok = True
    for r in results:
        lat = sorted(r.latencies_s)
        rate = r.commits / r.seconds if r.seconds > 0 else 0.0
        print(f"{r.client:>6} {r.coordinator if r.coordinator is not None else '?':>11} {r.commits:>8} {r.failed:>6} "
              f"{rate:>10.0f} {percentile(lat, 0.50) * 1000:>7.2f} {percentile(lat, 0.99) * 1000:>7.2f} "
              f"{(lat[-1] if lat else float('nan')) * 1000:>8.2f} {r.read_back.split(':')[0]:>9}")
        for e in r.errors + ([r.read_back] if r.read_back != "OK" else []):
            print(f"       {e}")
        if r.out_of_order_acks:
            print(f"       {r.out_of_order_acks} acknowledgements arrived out of commit order")
        ok = ok and r.read_back == "OK" and r.failed == 0 and r.out_of_order_acks == 0
    everything = sorted(x for r in results for x in r.latencies_s)
    commits = sum(r.commits for r in results)
    seconds = max((r.seconds for r in results), default=0.0)
    rate = commits / seconds if seconds > 0 else 0.0
    print(f"overall: {commits} commits in {seconds:.1f} s: {rate:.0f} commits/s, "
          f"{rate * args.partitions:.0f} partition-offsets/s; latency p50 {percentile(everything, 0.50) * 1000:.2f} ms, "
          f"p99 {percentile(everything, 0.99) * 1000:.2f} ms, max {(everything[-1] if everything else float('nan')) * 1000:.2f} ms")
    print(f"committed() equals the last acknowledged offset for every partition: {'OK' if ok else 'FAIL'}")
    if args.json:
        print(json.dumps({"clients": args.clients, "partitions": args.partitions, "async_window": args.async_window,
                          "broker_settings": broker_settings, "commits_per_s": rate,
                          "partition_offsets_per_s": rate * args.partitions,
                          "p50_ms": percentile(everything, 0.50) * 1000, "p99_ms": percentile(everything, 0.99) * 1000,
                          "max_ms": (everything[-1] if everything else float("nan")) * 1000, "ok": ok,
                          "per_client": [{k: v for k, v in asdict(r).items() if k != "latencies_s"} for r in results]}))
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="HOST:PORT,... of a running cluster (default: start 3 brokers)")
    parser.add_argument("--brokers", type=int, default=3, help="brokers of the cluster started")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=10, help="partitions of the topic; every commit names all")
    parser.add_argument("--seconds", type=float, default=20.0, help="bound of each client's loop")
    parser.add_argument("--commits", type=int, default=1_000_000, help="bound of each client's commits")
    parser.add_argument("--async-window", type=int, default=0, help="asynchronous commits, this many in flight (0: synchronous)")
    parser.add_argument("--offsets-partitions", type=int, default=50, help="the broker's offsets.topic.num.partitions")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = parser.parse_args(argv)
    if min(args.clients, args.partitions, args.commits, args.brokers, args.offsets_partitions) < 1 or args.seconds <= 0 \
            or args.async_window < 0:
        parser.error("--clients, --partitions, --commits, --brokers, --offsets-partitions and --seconds must be positive")
    if args.bootstrap:
        return 0 if report(measure(args.bootstrap, args), args, f"those of the cluster at {args.bootstrap}") else 1
    overrides = {"offsets.topic.num.partitions": args.offsets_partitions}
    with local_cluster(args.brokers, overrides, "kafkalite-offset-commit-") as cluster:
        results = measure(cluster.status()["bootstrap"], args, cluster)
    rf = min(3, args.brokers)
    settings = (f"{settings_line(overrides)}, offsets.topic.replication.factor={rf}, __consumer_offsets "
                f"min.insync.replicas={min(2, rf)}, offsets.commit.timeout.ms=5000 (default); {args.brokers} brokers")
    return 0 if report(results, args, settings) else 1


if __name__ == "__main__":
    sys.exit(main())
