"""`bin/cluster add-broker` on a real `bin/cluster up` (its own ZooKeeper and brokers, on a
base port whose whole block is free): the new broker registers with its rack, is listed by
`status --json`, and `kill`, `start` and `down` treat it like the others."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys

from kafkalite.testing.cluster import LocalCluster, pid_alive, wait_pid_exit
from kafkalite.testing.probes import wait_until

CLUSTER_TIMEOUT_S = 180


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_base_port(brokers: int) -> tuple[int, int]:
    """A base port P whose client, inter-broker and admin blocks for `brokers` brokers are
    free, and a free ZooKeeper port beside them."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 29000)
        ports = [base + block + i for block in (0, 100, 200) for i in range(brokers)] + [base + 300]
        if all(_bindable(p) for p in ports):
            return base, base + 300
    raise AssertionError("no free block of ports for a local cluster")


def bin_cluster(*args: str, directory) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kafkalite.cli.local_cluster", *args, "--dir", str(directory)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=CLUSTER_TIMEOUT_S)


def ok(*args: str, directory) -> str:
    r = bin_cluster(*args, directory=directory)
    assert r.returncode == 0, f"{args}: rc {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r.stdout


def test_add_broker_joins_a_running_cluster_and_is_managed_like_the_others(tmp_path):
    directory = tmp_path / "cluster"
    base, zk_port = _free_base_port(4)
    try:
        ok("up", "--brokers", "3", "--base-port", str(base), "--zk-port", str(zk_port),
           "--override", "zookeeper.session.timeout.ms=4000", directory=directory)
        out = ok("add-broker", "--rack", "x", directory=directory)
        assert "broker 4 started" in out

        status = json.loads(ok("status", "--json", directory=directory))
        brokers = {b["id"]: b for b in status["brokers"]}
        assert sorted(brokers) == [1, 2, 3, 4]
        assert all(b["registered"] and b["alive"] for b in brokers.values())
        new = brokers[4]
        assert (new["port"], new["inter_broker_port"], new["admin_port"]) == (base + 3, base + 103, base + 203)
        assert new["rack"] == "x"
        assert f"127.0.0.1:{base + 3}" in status["bootstrap"].split(",")
        # the cluster's overrides reach the new broker too
        config = (directory / "broker-4" / "server.properties").read_text()
        assert "zookeeper.session.timeout.ms=4000" in config
        assert "broker.rack=x" in config

        # the controller's view lists it: it gets Metadata like any broker
        from kafkalite.testing.probes import broker_state

        assert 4 in {b["id"] for b in broker_state(new["admin_port"])["metadata"]["brokers"]}

        # kill / start know it
        ok("kill", "4", "--signal", "TERM", directory=directory)
        assert wait_pid_exit(new["pid"], 30)
        ok("start", "4", directory=directory)
        restarted = {b["id"]: b for b in json.loads(ok("status", "--json", directory=directory))["brokers"]}[4]
        assert restarted["alive"] and restarted["registered"] and restarted["pid"] != new["pid"]

        # down stops every process, the added broker's too; adding to a stopped cluster is refused
        pids = [b["pid"] for b in json.loads(ok("status", "--json", directory=directory))["brokers"]]
        zk_pid = status["zookeeper"]["pid"]
        ok("down", directory=directory)
        assert not any(pid_alive(p) for p in pids)
        wait_until(lambda: not pid_alive(zk_pid), 30, "ZooKeeper to stop")
        r = bin_cluster("add-broker", directory=directory)
        assert r.returncode == 1
        assert "is not reachable" in r.stderr and "Traceback" not in r.stderr
        assert len(LocalCluster.load(directory).state["brokers"]) == 4
    finally:
        if (directory / "cluster.json").exists():
            LocalCluster.load(directory).down()
