"""Reassignment benchmark (issue 9): move one big partition onto a new broker and measure
how long it takes, and what it does to produce latency on the other partitions, without a
throttle and with one.

A fresh 4-broker local cluster; topic `big` (1 partition, replicas 1,2,3) filled with
`--size-mb` MiB; topic `other` (3 partitions, RF 3, acks=all) gets a steady probe load
(`--probe-rate` records/s) whose delivery latency is recorded. Then:
  1. move big-0 from [1,2,3] to [2,3,4] without a throttle;
  2. move it back to [1,2,3] with `--throttle-mb` MiB/s.
For each: the move's time (admin znode written -> the topic znode shows the target with
nothing adding) and the probe's p50/p99/max latency during the move and before it.

    .venv/bin/python bench/reassign_move.py --size-mb 1024 --throttle-mb 40

Bounded: the fill, the probe and every wait have deadlines; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from latency_probe import Probe, percentiles

from kafkalite.cli.zk_session import zookeeper
from kafkalite.testing.cluster import LocalCluster
from kafkalite.testing.ports import free_ports
from kafkalite.zk.codec import Reassignment, reassignment_throttle

RECORD = 64 * 1024
DEADLINE_S = 3600


def _fill(boot: str, size_mb: int) -> float:
    p = Producer({"bootstrap.servers": boot, "acks": "1", "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.kbytes": 262144})
    block = os.urandom(RECORD)
    n = size_mb * 1024 * 1024 // RECORD
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce("big", value=block, key=str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
        if i % 64 == 0:
            p.poll(0)
        if time.monotonic() - t0 > DEADLINE_S:
            raise SystemExit("fill took too long")
    assert p.flush(600) == 0
    return time.monotonic() - t0


def _move(zk_connect: str, target: tuple[int, ...], throttle_mb: float | None) -> float:
    throttle = reassignment_throttle(int(throttle_mb * 1024 * 1024)) if throttle_mb else {}
    with zookeeper(zk_connect) as zk:
        t0 = time.monotonic()
        zk.create_reassignment(Reassignment({("big", 0): target}, throttle))
        while time.monotonic() - t0 < DEADLINE_S:
            a, _ = zk.get_topic_assignment("big")
            if list(a.partitions[0]) == list(target) and not a.adding_replicas and zk.get_reassignment() is None:
                return time.monotonic() - t0
            time.sleep(0.2)
    raise SystemExit("the move did not finish")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--throttle-mb", type=float, default=40.0)
    ap.add_argument("--probe-rate", type=float, default=200.0)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="kafkalite-reassign-bench-")
    ports = free_ports(13)
    cluster = LocalCluster(os.path.join(workdir, "c"), brokers=4, zk_port=ports[12],
                           ports=[tuple(ports[i * 3: i * 3 + 3]) for i in range(4)],
                           overrides={"log.level": "INFO", "auto.leader.rebalance.enable": "false"})
    try:
        status = cluster.up()
        boot, zk_connect = status["bootstrap"], status["zookeeper"]["connect"]
        admin = AdminClient({"bootstrap.servers": boot})
        for f in admin.create_topics([NewTopic("big", num_partitions=1, replica_assignment=[[1, 2, 3]]),
                                      NewTopic("other", num_partitions=3, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]],
                                               config={"min.insync.replicas": "2"})]).values():
            f.result(timeout=60)
        fill_s = _fill(boot, args.size_mb)
        print(f"filled big-0 with {args.size_mb} MiB in {fill_s:.1f} s ({args.size_mb / fill_s:.1f} MiB/s, acks=1)")
        time.sleep(5)  # followers catch up before the baseline
        probe = Probe(boot, args.probe_rate, "other")
        probe.start()
        time.sleep(10)
        base_end = time.monotonic()
        moves = [((2, 3, 4), None), ((1, 2, 3), args.throttle_mb)]
        windows = []
        for target, throttle in moves:
            start = time.monotonic()
            took = _move(zk_connect, target, throttle)
            windows.append((target, throttle, took, start, time.monotonic()))
            time.sleep(5)
        probe.halt.set()
        probe.join(60)
        baseline = [lat for t, lat in probe.samples if t < base_end]
        print(f"probe (acks=all, {args.probe_rate:.0f}/s to `other`) before any move: {percentiles(baseline)}")
        for target, throttle, took, start, end in windows:
            during = [lat for t, lat in probe.samples if start <= t <= end]
            how = f"throttled at {throttle:g} MiB/s" if throttle else "no throttle"
            print(f"move big-0 ({args.size_mb} MiB) -> {list(target)}, {how}: {took:.1f} s "
                  f"({args.size_mb / took:.1f} MiB/s); probe during the move: {percentiles(during)}")
        return 0
    finally:
        cluster.down()


if __name__ == "__main__":
    sys.exit(main())
