"""The real-ZooKeeper harness: servers start, versions are enforced, sessions expire, and an
ensemble survives the loss of one member."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError

from kafkalite.testing.fixtures import start_client, stop_client
from kafkalite.testing.ports import free_ports
from kafkalite.testing.zookeeper import (
    ZooKeeperServer,
    ZooKeeperStartError,
    ZooKeeperUnavailableError,
    resolve_classpath,
)


class _CuttableProxy:
    """A loopback TCP proxy whose link can be cut: every connection through it is closed
    and new ones are refused until restored, while the server stays up. This is how a
    client loses ZooKeeper without the server seeing a clean close of its session."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            _close_quietly(s)

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close_quietly(self._listener)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                _close_quietly(downstream)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                _close_quietly(downstream)
                continue
            with self._lock:
                self._sockets += [downstream, upstream]
            for src, dst in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        _close_quietly(src)
        _close_quietly(dst)


def _close_quietly(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def _wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def test_server_starts_serving_and_answers_four_letter_words(zk_server, zk_client):
    assert zk_server.is_running()
    assert zk_server.mode() == "standalone"
    assert zk_server.connect_string == f"127.0.0.1:{zk_server.port}"
    zk_client.create("/hello", b"world")
    assert zk_client.get("/hello")[0] == b"world"


def test_conditional_write_on_stale_version_is_rejected(zk_client):
    zk_client.create("/cond", b"v0")
    _, stat = zk_client.get("/cond")
    zk_client.set("/cond", b"v1", version=stat.version)
    with pytest.raises(BadVersionError):
        zk_client.set("/cond", b"stale", version=stat.version)
    assert zk_client.get("/cond")[0] == b"v1"


def test_ephemeral_znode_disappears_when_its_session_expires(zk_server, zk_connect, zk_client):
    chroot = zk_connect[len(zk_server.connect_string) :]
    proxy = _CuttableProxy(zk_server.port)
    owner = start_client(f"127.0.0.1:{proxy.port}{chroot}", session_timeout_s=1.0)
    states: list[str] = []
    owner.add_listener(states.append)
    try:
        owner.create("/owned", b"", ephemeral=True)
        assert zk_client.exists("/owned") is not None

        proxy.cut()
        # The server expires the session after its timeout (1 s) without hearing from it.
        _wait_until(lambda: zk_client.exists("/owned") is None, 10.0, "the ephemeral znode to go")

        proxy.restore()
        _wait_until(lambda: KazooState.LOST in states, 10.0, "the owner to learn its session expired")
    finally:
        stop_client(owner)
        proxy.close()


def test_ensemble_keeps_serving_after_losing_one_member(zk_ensemble):
    client = start_client(zk_ensemble.connect_string)
    try:
        client.create("/before", b"1")
        leader = zk_ensemble.leader()
        assert leader is not None
        zk_ensemble.kill(leader)
        assert not zk_ensemble.member(leader).is_running()

        # The two survivors elect a new leader; the client fails over to one of them.
        client.retry(client.create, "/after", b"2")
        assert client.retry(client.get, "/before")[0] == b"1"
        assert client.retry(client.get, "/after")[0] == b"2"
        new_leader = zk_ensemble.leader()
        assert new_leader not in (None, leader)

        zk_ensemble.restart(leader)
        assert zk_ensemble.member(leader).mode() == "follower"
    finally:
        stop_client(client)


def test_stop_terminates_the_jvm_and_is_idempotent(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=500).start()
    pid = server.pid
    assert pid is not None
    server.stop()
    server.stop()
    assert not server.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_missing_jars_raise_a_typed_error_saying_what_to_install(tmp_path):
    with pytest.raises(ZooKeeperUnavailableError, match="apt-get install zookeeper"):
        resolve_classpath(str(tmp_path / "no-such.jar"))


def test_a_server_that_cannot_bind_its_port_fails_with_its_log(tmp_path):
    (port,) = free_ports(1)
    with socket.create_server(("127.0.0.1", port)):
        server = ZooKeeperServer(tmp_path / "zk", port=port, tick_time_ms=500)
        with pytest.raises(ZooKeeperStartError, match="(?s)exited with code.*log"):
            server.start(timeout_s=15)
        assert not server.is_running()


def test_a_server_left_running_is_killed_when_its_python_process_exits(tmp_path):
    import subprocess
    import sys

    script = (
        "from kafkalite.testing.zookeeper import ZooKeeperServer\n"
        f"s = ZooKeeperServer({str(tmp_path / 'zk')!r}, tick_time_ms=500).start()\n"
        "print(s.pid, flush=True)\n"
        # exits without stop(): the atexit guard must kill the JVM
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
