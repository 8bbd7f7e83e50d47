"""Disk faults (issue 14): a log dir that fills up while the broker serves (KIP-112's JBOD
handling), under a verifying acks=all producer and a consumer whose history is checked."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from kafkalite.testing.disk_faults import fill, flip_bit
from kafkalite.testing.fault_workload import Workload
from kafkalite.testing.probes import broker_state, fully_replicated, partition_view, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")

PARTITIONS = 6


@pytest.fixture
def small_dir(tmp_path):
    """A 16 MiB tmpfs, lazily unmounted at the end (a broker may still hold files in it)."""
    d = tmp_path / "small"
    d.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(d)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_a_full_log_dir_goes_offline_its_leaderships_move_nothing_is_lost_and_it_recovers_after_a_restart(
        cluster_factory, small_dir):
    cluster = cluster_factory(3)
    b2 = cluster.broker(2)
    cluster.stop_broker(2)
    cluster.set_log_dirs(2, [b2["log_dirs"][0], str(small_dir)])
    cluster.start(2)
    w = Workload(cluster, "fulldisk", partitions=PARTITIONS)
    try:
        on_small = [p for p in range(PARTITIONS) if (small_dir / f"{w.topic}-{p}").is_dir()]
        assert on_small, "no partition of broker 2 landed in the small dir"
        fill(small_dir)
        admin_port = b2["admin_port"]
        wait_until(lambda: broker_state(admin_port)["log_dirs"]["offline"] == [str(small_dir)], 60,
                   "broker 2 to take its full log dir offline")
        state = broker_state(admin_port)
        ours = sorted(x for x in state["offline_partitions"] if x.startswith(w.topic + "-"))
        assert ours == sorted(f"{w.topic}-{p}" for p in on_small)  # (and __consumer_offsets ones there)
        for p in on_small:
            wait_until(lambda p=p: (v := partition_view(cluster, w.topic, p)) is not None and v["leader"] not in (2, -1)
                       and 2 not in v["isr"], 60, f"{w.topic}-{p} led without broker 2 and its offline replica")
        w.acked_again(60, "acknowledgements in every partition with broker 2's full dir offline")
        assert any(p not in on_small and 2 in partition_view(cluster, w.topic, p)["isr"] for p in range(PARTITIONS)), \
            "broker 2's healthy dir should still serve its other partitions"
        # Space is freed and the broker restarted: the dir is recovered and catches up.
        (small_dir / "filler").unlink()
        cluster.stop_broker(2)
        cluster.start(2)
        wait_until(lambda: fully_replicated(cluster, w.topic, PARTITIONS), 90, "every ISR full again after the restart")
        assert broker_state(admin_port)["log_dirs"]["offline"] == []
        w.finish()
    finally:
        w.stop()


def test_a_flipped_bit_below_the_hw_is_caught_when_read_and_the_replica_truncates_and_refetches(cluster_factory):
    """Issue 14: a bit flipped on the leader's disk in a batch below the HW. The leader finds
    it by the batch's CRC when it reads it to serve a consumer, serves nothing of it,
    gives up the replica (the controller moves the leadership and drops it from the ISR),
    truncates its log to the bad batch and refetches from the new leader. The consumer
    reads every record intact from the new leader, and the replicas end identical."""
    from confluent_kafka import Consumer, TopicPartition

    cluster = cluster_factory(3)
    w = Workload(cluster, "flip", partitions=1)
    try:
        wait_until(lambda: w.producer.snapshot()[0] >= 600, 60, "600 acknowledged records")
        leader = partition_view(cluster, w.topic, 0)["leader"]
        segment = next((Path(cluster.broker(leader)["log_dirs"][0]) / f"{w.topic}-0").glob("*.log"))
        bad_offset = flip_bit(segment)
        # A fresh consumer reads from the start, through the bad batch.
        consumer = Consumer({"bootstrap.servers": w.boot, "group.id": "flip-reader", "enable.auto.commit": False,
                             "topic.metadata.refresh.interval.ms": 1000})
        consumer.assign([TopicPartition(w.topic, 0, 0)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 90
        try:
            while time.monotonic() < deadline and (not got or max(got) < bad_offset + 50):
                for m in consumer.consume(500, timeout=0.5):
                    if m.error() is None:
                        got[m.offset()] = m.value()
                        w.history.read("flip-reader", m.value(), m.partition(), m.offset())
        finally:
            consumer.close()
        assert max(got) >= bad_offset + 50, f"the consumer stopped at {max(got) if got else None} (bad batch at {bad_offset})"
        assert sorted(got) == list(range(len(got))), "the consumer skipped offsets"
        view = partition_view(cluster, w.topic, 0)
        assert view["leader"] != leader, "the leader with the corrupt copy still leads"
        wait_until(lambda: fully_replicated(cluster, w.topic, 1), 90, f"broker {leader} repaired and back in the ISR")
        w.finish()  # history (the fresh consumer's reads included) and byte-identical replicas
    finally:
        w.stop()


def test_a_flipped_bit_in_a_follower_is_caught_at_recovery_after_a_crash_and_refetched(cluster_factory):
    """The same flip on a follower's disk, then the follower is killed and restarted: its
    recovery (the active segment is scanned, CRCs checked) drops the log from the bad batch
    on, and the follower refetches it from the leader and rejoins the ISR."""
    cluster = cluster_factory(3)
    w = Workload(cluster, "flipf", partitions=1)
    try:
        wait_until(lambda: w.producer.snapshot()[0] >= 600, 60, "600 acknowledged records")
        view = partition_view(cluster, w.topic, 0)
        follower = next(b for b in view["replicas"] if b != view["leader"])
        cluster.kill(follower, "KILL")
        segment = next((Path(cluster.broker(follower)["log_dirs"][0]) / f"{w.topic}-0").glob("*.log"))
        flip_bit(segment)
        cluster.start(follower)
        wait_until(lambda: fully_replicated(cluster, w.topic, 1), 90, f"broker {follower} recovered and back in the ISR")
        assert "dropped" in Path(cluster.broker(follower)["log"]).read_text()  # recovery found the bad batch
        w.finish()
    finally:
        w.stop()
