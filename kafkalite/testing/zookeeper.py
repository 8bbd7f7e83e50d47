"""Real ZooKeeper servers for tests, bin/cluster and benchmarks (DESIGN.md section 1).

kafkalite never fakes ZooKeeper: this module starts the real server from installed jars
(Debian's `zookeeper` package by default) as a child JVM, in its own process group so a
Ctrl-C aimed at the parent does not reach it, and tracks every JVM it started so an
`atexit` guard can SIGKILL the ones still running, by PID, if the owner forgot to stop them.

    with ZooKeeperServer(tmp_dir, tick_time_ms=500) as zk:
        client = KazooClient(zk.connect_string)

    ensemble = ZooKeeperEnsemble(tmp_dir, n=3); ensemble.start()
    ensemble.kill(2); ...; ensemble.restart(2); ensemble.stop()

The classpath is, in order: the `classpath` argument (the `zookeeper.classpath` setting),
the `ZOOKEEPER_CLASSPATH` environment variable, the Debian jars in /usr/share/java.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from kafkalite.testing.ports import LOOPBACK_HOST, free_port, free_ports

CLASSPATH_ENV = "ZOOKEEPER_CLASSPATH"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# A ceiling, not a reservation: the JVM takes what it uses. 100,000 partitions are 200,000
# znodes plus 1,000-op multis in flight, which ran out of 128 MiB (issue 13); zkServer.sh's
# own default is 1000 MiB.
JAVA_HEAP_ARG = "-Xmx512m"

# zookeeper.jar's manifest Class-Path already names jute, netty, metrics and slf4j-api by
# absolute path; they are listed again so the classpath does not depend on the manifest
# (a jar copied elsewhere loses it). Only the ones that exist are used.
_DEBIAN_JAVA_DIR = Path("/usr/share/java")
_DEBIAN_REQUIRED_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar")
_DEBIAN_OPTIONAL_JARS = (
    "slf4j-simple.jar",
    "metrics-core.jar",
    "commons-cli.jar",
    "commons-io.jar",
    "snappy-java.jar",
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-common.jar",
    "netty-handler.jar",
    "netty-resolver.jar",
    "netty-transport.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
)

# `srvr` answers "Mode: <mode>"; these are the modes in which the server serves clients.
_SERVING_MODES = ("standalone", "leader", "follower", "observer")
_MODE_RE = re.compile(r"^Mode:\s*(\S+)", re.MULTILINE)

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
_POLL_INTERVAL_S = 0.05
_FOUR_LETTER_TIMEOUT_S = 1.0
_FOUR_LETTER_REPLY_BYTES_MAX = 1 << 20
_LOG_TAIL_BYTES = 4000


class ZooKeeperUnavailableError(RuntimeError):
    """Java or the ZooKeeper jars are missing: an environment problem, not a test failure."""


class ZooKeeperStartError(RuntimeError):
    """The server process exited or did not start serving in time."""


# --------------------------------------------------------------------------- classpath


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ZooKeeperUnavailableError(
            "java was not found on PATH (nor in $JAVA_HOME/bin). Install a JRE and "
            "ZooKeeper, e.g. `apt-get install zookeeper` (it pulls in a JRE)."
        )
    return found


def default_classpath() -> str:
    missing = [j for j in _DEBIAN_REQUIRED_JARS if not (_DEBIAN_JAVA_DIR / j).is_file()]
    if missing:
        raise ZooKeeperUnavailableError(
            f"ZooKeeper jars not found: {', '.join(str(_DEBIAN_JAVA_DIR / j) for j in missing)}. "
            f"Install them with `apt-get install zookeeper`, or set {CLASSPATH_ENV} "
            "(or the zookeeper.classpath setting) to a classpath holding zookeeper, "
            "zookeeper-jute, slf4j-api and their dependencies (e.g. '/opt/zookeeper/lib/*')."
        )
    jars = list(_DEBIAN_REQUIRED_JARS) + [
        j for j in _DEBIAN_OPTIONAL_JARS if (_DEBIAN_JAVA_DIR / j).is_file()
    ]
    return os.pathsep.join(str(_DEBIAN_JAVA_DIR / j) for j in jars)


def resolve_classpath(classpath: str | None = None) -> str:
    """The argument, else $ZOOKEEPER_CLASSPATH, else the Debian jars; checked to exist."""
    if classpath is None:
        classpath = os.environ.get(CLASSPATH_ENV) or None
        source = f"${CLASSPATH_ENV}"
    else:
        source = "the zookeeper.classpath setting"
    if classpath is None:
        return default_classpath()
    entries = [e for e in classpath.split(os.pathsep) if e]
    # A wildcard entry ('dir/*') is expanded by java itself; check its directory instead.
    missing = [e for e in entries if not Path(e.removesuffix("*")).exists()]
    if not entries or missing:
        raise ZooKeeperUnavailableError(
            f"{source} = {classpath!r} names entries that do not exist: {missing or '(empty)'}. "
            "Point it at the ZooKeeper jars, or unset it and `apt-get install zookeeper`."
        )
    return classpath


# --------------------------------------------------------------------------- four-letter words


def four_letter_word(host: str, port: int, command: str, timeout_s: float = _FOUR_LETTER_TIMEOUT_S) -> str:
    """Send a ZooKeeper four-letter command (`srvr`, `ruok`, `mntr`, ...) and return the reply."""
    assert len(command) == 4
    chunks: list[bytes] = []
    received = 0
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(command.encode("ascii"))
        while received < _FOUR_LETTER_REPLY_BYTES_MAX:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            received += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def server_mode(host: str, port: int) -> str | None:
    """The `Mode:` a server reports, or None when it does not answer or is not serving."""
    try:
        reply = four_letter_word(host, port, "srvr")
    except OSError:
        return None
    match = _MODE_RE.search(reply)
    return match.group(1) if match else None


# --------------------------------------------------------------------------- process tracking

# Every JVM started by this process and not yet reaped, by PID. The atexit guard kills them.
_running_lock = threading.Lock()
_running: dict[int, subprocess.Popen] = {}


def _track(process: subprocess.Popen) -> None:
    with _running_lock:
        _running[process.pid] = process


def _untrack(process: subprocess.Popen) -> None:
    with _running_lock:
        _running.pop(process.pid, None)


def kill_all_started_servers() -> None:
    """SIGKILL every ZooKeeper JVM this process started that is still running (by PID)."""
    with _running_lock:
        processes = list(_running.values())
        _running.clear()
    for process in processes:
        if process.poll() is None:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass


atexit.register(kill_all_started_servers)


# --------------------------------------------------------------------------- one server


@dataclasses.dataclass(frozen=True)
class QuorumMember:
    """This server's place in an ensemble: its myid and every member's quorum ports."""

    myid: int
    # (myid, quorum_port, election_port) for every member, this one included.
    peers: tuple[tuple[int, int, int], ...]
    # myid -> the address a member serves its quorum ports on (default: loopback)
    hosts: tuple[tuple[int, str], ...] = ()


class ZooKeeperServer:
    """One real ZooKeeper server (standalone, or one member of a ZooKeeperEnsemble)."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        *,
        port: int | None = None,
        tick_time_ms: int = 2000,
        classpath: str | None = None,
        log_path: str | os.PathLike | None = None,
        quorum: QuorumMember | None = None,
        host: str = LOOPBACK_HOST,
        wrap: list[str] | None = None,
    ) -> None:
        """`host`: the address it serves on; `wrap`: an argv prefix it is launched under,
        e.g. `ip netns exec NAME` to run it in a network namespace (issue 14), where `host`
        is that namespace's address."""
        assert tick_time_ms > 0
        self.data_dir = Path(data_dir)
        self.port = port if port is not None else free_port()
        self.tick_time_ms = tick_time_ms
        self.classpath = classpath
        self.log_path = Path(log_path) if log_path is not None else self.data_dir / "zookeeper.log"
        self.quorum = quorum
        self._host = host
        self.wrap = list(wrap or [])
        self._process: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None

    # -- properties

    @property
    def host(self) -> str:
        return self._host

    @property
    def connect_string(self) -> str:
        return f"{self._host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def mode(self) -> str | None:
        """'standalone', 'leader', 'follower', or None when not serving."""
        return server_mode(self._host, self.port)

    # -- lifecycle

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ZooKeeperServer:
        """Launch the JVM and wait until `srvr` reports it serving."""
        self.launch()
        self.wait_until_serving(timeout_s)
        return self

    def launch(self) -> None:
        """Launch the JVM without waiting (an ensemble launches all members, then waits)."""
        if self.is_running():
            raise RuntimeError(f"ZooKeeper on port {self.port} is already running (pid {self.pid})")
        self._reap()
        java = java_executable()
        classpath = resolve_classpath(self.classpath)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self._config_text())
        if self.quorum is not None:
            (self.data_dir / "myid").write_text(f"{self.quorum.myid}\n")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        try:
            self._process = subprocess.Popen(
                [*self.wrap, java, JAVA_HEAP_ARG, "-cp", classpath, MAIN_CLASS, str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                # Its own session: a Ctrl-C aimed at the parent's process group misses it.
                start_new_session=True,
            )
        except OSError as e:
            self._log_file.close()
            self._log_file = None
            raise ZooKeeperUnavailableError(f"cannot run {java}: {e}") from e
        _track(self._process)

    def wait_until_serving(self, timeout_s: float = START_TIMEOUT_S) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                self._reap()
                raise ZooKeeperStartError(
                    f"ZooKeeper on port {self.port} exited with code {code} while starting; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            mode = self.mode()
            if mode in _SERVING_MODES:
                return
            if time.monotonic() >= deadline:
                self.kill()
                raise ZooKeeperStartError(
                    f"ZooKeeper on port {self.port} not serving after {timeout_s:.0f} s "
                    f"(last mode {mode!r}); log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, wait, SIGKILL after `timeout_s`, wait for exit. Idempotent."""
        self._signal_and_wait(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """SIGKILL (crash without shutdown) and wait for exit. Idempotent."""
        self._signal_and_wait(signal.SIGKILL, STOP_TIMEOUT_S)

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Stop (if running) and start again on the same port and data dir."""
        self.stop()
        self.start(timeout_s)

    def log_tail(self, size_bytes: int = _LOG_TAIL_BYTES) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - size_bytes))
                return f.read().decode("utf-8", errors="replace")
        except OSError as e:
            return f"(log unreadable: {e})"

    def __enter__(self) -> ZooKeeperServer:
        try:
            return self.start()
        except BaseException:
            self.kill()
            raise

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperServer(port={self.port}, pid={self.pid}, data_dir={str(self.data_dir)!r})"

    # -- internals

    def _config_text(self) -> str:
        lines = [
            f"tickTime={self.tick_time_ms}",
            f"dataDir={self.data_dir.resolve()}",
            f"clientPort={self.port}",
            f"clientPortAddress={self._host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            # Session timeouts are clamped to [2, 20] ticks by the server; say so explicitly.
            f"minSessionTimeout={2 * self.tick_time_ms}",
            f"maxSessionTimeout={20 * self.tick_time_ms}",
            "maxClientCnxns=0",
            # Snapshots and the transaction log are small in tests; purge old ones anyway.
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        if self.quorum is not None:
            lines += ["initLimit=10", "syncLimit=5"]
            lines += [
                f"server.{myid}={dict(self.quorum.hosts).get(myid, LOOPBACK_HOST)}:{quorum_port}:{election_port}"
                for myid, quorum_port, election_port in self.quorum.peers
            ]
        return "\n".join(lines) + "\n"

    def _signal_and_wait(self, first_signal: int, timeout_s: float) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.kill(process.pid, first_signal)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT_S)
        self._reap()

    def _reap(self) -> None:
        """Forget an exited process and close its log handle."""
        if self._process is not None and self._process.poll() is not None:
            _untrack(self._process)
        if self._log_file is not None and (self._process is None or self._process.poll() is not None):
            self._log_file.close()
            self._log_file = None


# --------------------------------------------------------------------------- ensemble


class ZooKeeperEnsemble:
    """n ZooKeeper servers on loopback forming one quorum. Members are numbered by myid, 1..n."""

    def __init__(
        self,
        base_dir: str | os.PathLike,
        n: int = 3,
        *,
        tick_time_ms: int = 2000,
        classpath: str | None = None,
    ) -> None:
        assert n >= 1
        self.base_dir = Path(base_dir)
        ports = free_ports(3 * n)
        client_ports, quorum_ports, election_ports = ports[:n], ports[n : 2 * n], ports[2 * n :]
        peers = tuple(
            (myid, quorum_ports[myid - 1], election_ports[myid - 1]) for myid in range(1, n + 1)
        )
        self.members: dict[int, ZooKeeperServer] = {
            myid: ZooKeeperServer(
                self.base_dir / f"zk{myid}",
                port=client_ports[myid - 1],
                tick_time_ms=tick_time_ms,
                classpath=classpath,
                quorum=QuorumMember(myid=myid, peers=peers),
            )
            for myid in range(1, n + 1)
        }

    @property
    def connect_string(self) -> str:
        return ",".join(m.connect_string for m in self.members.values())

    def member(self, myid: int) -> ZooKeeperServer:
        return self.members[myid]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ZooKeeperEnsemble:
        """Launch every member, then wait until each serves as leader or follower."""
        try:
            for member in self.members.values():
                member.launch()
            deadline = time.monotonic() + timeout_s
            for member in self.members.values():
                member.wait_until_serving(max(0.1, deadline - time.monotonic()))
        except BaseException:
            self.kill_all()
            raise
        return self

    def stop(self) -> None:
        for member in self.members.values():
            member.stop()

    def kill_all(self) -> None:
        for member in self.members.values():
            member.kill()

    def kill(self, myid: int) -> None:
        self.members[myid].kill()

    def restart(self, myid: int, timeout_s: float = START_TIMEOUT_S) -> None:
        self.members[myid].restart(timeout_s)

    def leader(self) -> int | None:
        """The myid of the member that reports Mode: leader, if any."""
        for myid, member in self.members.items():
            if member.is_running() and member.mode() == "leader":
                return myid
        return None

    def __enter__(self) -> ZooKeeperEnsemble:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
