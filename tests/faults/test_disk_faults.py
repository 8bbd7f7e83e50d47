"""Disk faults (issue 14): a log dir that fills up while the broker serves (KIP-112's JBOD
handling), under a verifying acks=all producer and a consumer whose history is checked."""

from __future__ import annotations

import os
import subprocess

import pytest

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


def fill(directory, name: str = "filler") -> None:
    """Write until the filesystem is full."""
    with open(directory / name, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError:
            pass


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
