"""What one RF 3 acks=all write costs the brokers' Python, without sockets (issue 13, item 2).

    .venv/bin/python bench/replication_round.py [--writes 2000] [--repeat 5] [--in-flight 1] [--profile 30]

One process, one event loop, the brokers' own code: a leader's replica manager over real
logs and two followers' replica managers whose fetchers reach the leader through the
inter-broker RPC's framing (each request and answer encoded and decoded as on the wire)
and the leader's inter-broker handler, but no socket, no other process and no scheduler in
between. A producer appends 1-record batches with acks=all, `--in-flight` at a time, each
waiting for its answer. It prints the process's CPU per write (all three brokers' work:
the append, the followers' fetches and appends, the HW advance, the answer) and, with
`--profile N`, the N functions with the most own time under cProfile.

On the real cluster the same work costs more (the sockets' system calls, three processes
waking each other on two cores, cold caches): this is the Python part of a replication
round, measured to the microsecond run after run, where the cluster's figures spread by a
factor of two (bench/README.md, "Tenth pass"). With `--in-flight 1` every round carries
one write, as at a low rate; a larger value lets rounds carry several, as at 5,000/s.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafkalite.broker.fetcher import FetcherManager
from kafkalite.broker.inter_broker import InterBrokerHandlers
from kafkalite.broker.metadata_cache import MetadataCache
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.core.messages import LeaderAndIsr
from kafkalite.log.config import LogConfig
from kafkalite.log.records import encode_batch
from kafkalite.testing.replica_managers import FramedLoopback, leader_and_isr, replica_manager

TOPIC = "round"
LEADER = 1
FOLLOWERS = (2, 3)
EPOCH = 3
CONFIG = LogConfig(segment_bytes=1 << 30)
SETTINGS = {"purgatory.max.size": 100_000, "min.insync.replicas": 2, "replica.fetch.backoff.ms": 100,
            "replica.fetch.wait.max.ms": 500, "request.timeout.ms": 30000, "replica.fetch.min.bytes": 1,
            "replica.fetch.response.max.bytes": 10 << 20, "replica.fetch.max.bytes": 1 << 20}
VALUE = b"v" * 100


def _leader_and_isr(partitions: int) -> LeaderAndIsr:
    return leader_and_isr([(TOPIC, p) for p in range(partitions)], leader=LEADER, epoch=EPOCH, replicas=[LEADER, *FOLLOWERS])


def _replica_manager(root: str, broker_id: int) -> ReplicaManager:
    return replica_manager(root, broker_id, CONFIG, SETTINGS)


async def _setup(root: str, partitions: int) -> tuple[ReplicaManager, list[FetcherManager]]:
    leader = _replica_manager(root, LEADER)
    leader.handle_leader_and_isr(_leader_and_isr(partitions))
    handlers = InterBrokerHandlers(SimpleNamespace(replica_manager=leader, metadata_cache=MetadataCache()))
    fetchers = []
    for broker_id in FOLLOWERS:
        rm = _replica_manager(root, broker_id)
        client = FramedLoopback(handlers, broker_id)
        mgr = FetcherManager(rm.settings, lambda _leader, c=client: c, lambda: -1, rm.metrics, _fatal)
        mgr.broker_id = broker_id
        mgr.quotas = rm.core.quotas
        rm.fetchers = mgr
        rm.handle_leader_and_isr(_leader_and_isr(partitions))
        fetchers.append(mgr)
    return leader, fetchers


def _fatal(e: BaseException) -> None:
    raise SystemExit(f"a fetcher failed: {e!r}")


async def _writes(leader: ReplicaManager, count: int, in_flight: int, partitions: int) -> None:
    batch = encode_batch([(None, VALUE, ())], base_timestamp=int(time.time() * 1000))
    next_write = iter(range(count))

    async def writer() -> None:
        for i in next_write:
            result = await leader.append_records(-1, 30000, [(TOPIC, i % partitions, batch)])
            ((_tp, r),) = result.items()
            assert r["error"] == 0, r

    await asyncio.gather(*(writer() for _ in range(in_flight)))


async def _run(args: argparse.Namespace, root: str) -> None:
    leader, fetchers = await _setup(root, args.partitions)
    try:
        await _writes(leader, args.warmup, args.in_flight, args.partitions)  # sessions open, code warm
        profiler = cProfile.Profile() if args.profile else None
        per_write = []
        for _ in range(args.repeat):
            cpu0 = time.process_time()
            if profiler is not None:
                profiler.enable()
            await _writes(leader, args.writes, args.in_flight, args.partitions)
            if profiler is not None:
                profiler.disable()
            per_write.append((time.process_time() - cpu0) / args.writes * 1e6)
        hws = [leader.partitions[(TOPIC, p)].hw for p in range(args.partitions)]
        assert sum(hws) == args.warmup + args.writes * args.repeat, hws
        print(f"{args.writes} writes x {args.repeat}, {args.in_flight} in flight, {args.partitions} partition(s): "
              f"CPU per write min {min(per_write):.1f} us, median {statistics.median(per_write):.1f} us"
              + (" under cProfile" if profiler else "") + f" (runs: {', '.join(f'{x:.0f}' for x in per_write)})")
        if profiler is not None:
            stats = pstats.Stats(profiler)
            calls = sum(nc for (_cc, nc, _tt, _ct, _callers) in stats.stats.values())
            print(f"{calls / args.writes / args.repeat:.0f} Python calls per write")
            stats.sort_stats("tottime").print_stats(args.profile)
    finally:
        for mgr in fetchers:
            await mgr.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--in-flight", type=int, default=1, help="writes waiting for their answer at once")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of --writes each; the min and median are printed")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print the N functions with the most own time")
    args = ap.parse_args()
    if (not 1 <= args.writes <= 1_000_000 or not 0 <= args.warmup <= 100_000 or not 1 <= args.in_flight <= 1000
            or not 1 <= args.repeat <= 100 or not 1 <= args.partitions <= 1000):
        ap.error("--writes 1..1000000, --warmup 0..100000, --in-flight 1..1000, --repeat 1..100, --partitions 1..1000")
    root = tempfile.mkdtemp(prefix="kafkalite-round-")
    try:
        asyncio.run(_run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
