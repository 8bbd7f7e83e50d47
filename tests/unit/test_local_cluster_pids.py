"""`bin/cluster` signals a PID from cluster.json only while it names the process started
then (kafkalite.testing.process_identity): a PID reused by another process after a broker
died or a reboot is taken as exited and left alone. Stand-in processes (`sleep`, a Python
that sleeps) play the brokers and ZooKeeper; each test ends the ones it started."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalite.cli import local_cluster
from kafkalite.testing import process_identity as ident
from kafkalite.testing.cluster import ClusterError, LocalCluster
from kafkalite.testing.probes import process_state
from kafkalite.testing.zookeeper import MAIN_CLASS


@pytest.fixture
def spawned():
    """Starts stand-in processes; kills and reaps every one at the end, even on failure."""
    procs: list[subprocess.Popen] = []

    def spawn(*argv: str) -> subprocess.Popen:
        p = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        procs.append(p)
        # Until the child has exec'd, /proc/PID/cmdline is this Python's (the notes name it):
        # wait for the stand-in's own command line (bounded).
        cmdline = Path(f"/proc/{p.pid}/cmdline")
        deadline = time.monotonic() + 10
        wanted = b"\0".join(a.encode() for a in argv) + b"\0"
        while time.monotonic() < deadline and cmdline.read_bytes() != wanted:
            time.sleep(0.005)
        return p

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def _write_state(directory: Path, broker_pid: int | None, zk_pid: int | None, *, broker_identity=None, zk_identity=None) -> None:
    b = {"id": 1, "pid": broker_pid, "host": "127.0.0.1", "port": 29092, "inter_broker_port": 29192, "admin_port": 29292,
         "rack": None, "log_dirs": [str(directory / "broker-1" / "data")], "config": str(directory / "broker-1" / "server.properties"),
         "log": str(directory / "broker-1" / "broker.log")}
    zk = {"connect": "127.0.0.1:1", "pid": zk_pid, "port": 1}
    if broker_identity is not None:
        b["identity"] = broker_identity
    if zk_identity is not None:
        zk["identity"] = zk_identity
    (directory / "cluster.json").write_text(json.dumps({"base_port": 29092, "zookeeper": zk, "overrides": {}, "brokers": [b]}))


def test_down_leaves_alone_unrelated_processes_under_the_pids_of_an_old_cluster_json(tmp_path, spawned, capsys):
    """A cluster.json from before identities were recorded, whose PIDs are two `sleep`s
    now: neither is a kafkalite broker nor this cluster's ZooKeeper, so neither is signalled."""
    s1, s2 = spawned("sleep", "60"), spawned("sleep", "60")
    _write_state(tmp_path, s1.pid, s2.pid)
    assert local_cluster.main(["down", "--dir", str(tmp_path)]) == 0
    assert s1.poll() is None and s2.poll() is None
    err = capsys.readouterr().err
    assert f"broker 1: pid {s1.pid} is another process now (sleep 60); taken as exited, not signalled" in err
    assert f"ZooKeeper: pid {s2.pid} is another process now (sleep 60)" in err
    state = json.loads((tmp_path / "cluster.json").read_text())
    assert state["brokers"][0]["pid"] is None and state["zookeeper"]["pid"] is None


def test_a_pid_whose_start_time_differs_from_the_recorded_one_is_not_signalled(tmp_path, spawned):
    s1, s2 = spawned("sleep", "60"), spawned("sleep", "60")
    stale = {"start_ticks": ident.start_ticks(s1.pid) - 1, "boot_id": ident.boot_id()}
    _write_state(tmp_path, s1.pid, s2.pid, broker_identity=stale,
                 zk_identity={**ident.identity_of(s2.pid), "boot_id": "an-earlier-boot"})
    c = LocalCluster.load(tmp_path)
    for sig in ("KILL", "TERM", "STOP"):
        with pytest.raises(ClusterError, match=f"broker 1 is not running \\(pid {s1.pid} is another process now"):
            c.kill(1, sig)
    c.stop_broker(1, timeout_s=1)
    c.down(graceful=False)
    assert s1.poll() is None and s2.poll() is None
    assert process_state(s1.pid) not in ("T", "t", "Z", None)  # not even stopped (SIGSTOP)


def test_down_still_stops_the_processes_it_recorded(tmp_path, spawned):
    """With a matching identity, and for an old record whose command line is ours."""
    config = str(tmp_path / "broker-1" / "server.properties")
    # An old record (no identity) of a process that looks like our broker: the entry point and this broker's config.
    broker = spawned(sys.executable, "-c", "import time; time.sleep(60)", "-m", "kafkalite.cli.main", "broker", "--config", config)
    zk = spawned("sleep", "60")
    zk_identity = ident.identity_of(zk.pid)
    _write_state(tmp_path, broker.pid, zk.pid, zk_identity=zk_identity)
    LocalCluster.load(tmp_path).down()
    assert broker.wait(timeout=10) == -signal.SIGTERM
    assert ident.whose(zk.pid, zk_identity, lambda argv: True) == ident.GONE  # (down reaped it: its child here)


def test_an_old_record_of_zookeeper_is_ours_only_for_java_quorum_peer_main_of_this_cluster(tmp_path):
    c = LocalCluster(tmp_path)
    ours = ["/usr/bin/java", "-Xmx512m", "-cp", "x.jar", MAIN_CLASS, str(c.dir / "zookeeper" / "zoo.cfg")]
    assert c._looks_like_zookeeper(ours)
    assert not c._looks_like_zookeeper([*ours[:-1], "/elsewhere/zookeeper/zoo.cfg"])
    assert not c._looks_like_zookeeper(["sleep", "60"])
