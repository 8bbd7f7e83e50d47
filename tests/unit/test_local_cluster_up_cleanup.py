"""`bin/cluster up` that fails after starting ZooKeeper and before the brokers stops what it
started (ZooKeeper, the --small-log-dir mounts) and leaves a cluster.json, so neither
ZooKeeper's port nor a tmpfs is left behind unrecorded. A `sleep` stands in for the
ZooKeeper JVM and `mount`/`umount` are faked; the test ends every process it started."""

from __future__ import annotations

import json
import subprocess

import pytest

import kafkalite.testing.cluster as cluster_mod
from kafkalite.testing.cluster import ClusterError, LocalCluster
from kafkalite.testing.zookeeper import ZooKeeperServer


@pytest.fixture
def zookeepers(monkeypatch):
    """`up` starts a `sleep` where it would start the ZooKeeper JVM; the list holds them."""
    started: list[subprocess.Popen] = []

    class StandInZooKeeper(ZooKeeperServer):
        def start(self, timeout_s: float = 0) -> StandInZooKeeper:
            self._process = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, start_new_session=True)
            started.append(self._process)
            return self

    monkeypatch.setattr(cluster_mod, "ZooKeeperServer", StandInZooKeeper)
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def test_a_failed_zk_acl_setup_stops_the_zookeeper_up_started(tmp_path, zookeepers, monkeypatch):
    def fail(self):
        raise ClusterError("injected: securing ZooKeeper's root failed")

    monkeypatch.setattr(LocalCluster, "_make_zk_digest", fail)
    c = LocalCluster(tmp_path, brokers=2, base_port=29092, zk_port=29181, zk_acl=True)
    with pytest.raises(ClusterError, match="injected"):
        c.up(timeout_s=5)
    [zk] = zookeepers
    assert zk.poll() is not None  # (stopped, and reaped by `down`: poll() then says 0)
    state = json.loads((tmp_path / "cluster.json").read_text())
    assert state["zookeeper"]["pid"] is None  # recorded, and stopped: the next `up` may start
    LocalCluster.load(tmp_path).down()  # and `down` finds a cluster, not "no cluster"


def test_a_failed_small_log_dir_mount_unmounts_the_ones_made_and_stops_zookeeper(tmp_path, zookeepers, monkeypatch):
    calls: list[list[str]] = []

    def run(argv, **kwargs):
        calls.append(list(argv))
        failed = argv[0] == "mount" and argv[-1].endswith("broker-2/small")
        return subprocess.CompletedProcess(argv, 32 if failed else 0, "", "mount: injected failure" if failed else "")

    monkeypatch.setattr(cluster_mod.subprocess, "run", run)
    c = LocalCluster(tmp_path, brokers=3, base_port=29092, zk_port=29181, small_log_dir="256m")
    with pytest.raises(ClusterError, match="cannot mount a 256m tmpfs"):
        c.up(timeout_s=5)
    [zk] = zookeepers
    assert zk.poll() is not None
    assert ["umount", "-l", str(tmp_path / "broker-1" / "small")] in calls
    assert [a for a in calls if a[0] == "mount"][-1][-1] == str(tmp_path / "broker-2" / "small")
    state = json.loads((tmp_path / "cluster.json").read_text())
    assert state["zookeeper"]["pid"] is None and state["mounts"] == []
