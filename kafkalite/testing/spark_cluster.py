"""A real Spark standalone cluster for tests: one master and N workers, separate JVMs.

Started from pyspark's own launch script and classes (``$SPARK_HOME/bin/spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), with SPARK_HOME = the
installed pyspark package, which ships ``bin/spark-class`` and ``jars/``. Nothing is
downloaded and no ``sbin/start-*.sh`` daemon script is used, so every JVM is our child
and its PID is known.

- Everything binds 127.0.0.1 on free ports (kafkalite.testing.ports): master RPC port,
  master web UI, and each worker's RPC port and web UI. The master REST server is off.
  The driver's own UI is the caller's business (``session_builder`` turns it off).
- Each worker offers 1 core and ``worker_memory`` to executors; work, log and conf dirs
  live under the given directory. An empty SPARK_CONF_DIR keeps any machine-wide
  spark-defaults.conf out.
- Executors launch Python workers with ``python`` (default: this interpreter, i.e. the
  venv's), via PYSPARK_PYTHON in the workers' environment and ``spark.pyspark.python``
  in the session, so executor Python workers can ``import kafkalite``.
- ``start()`` returns once the master's JSON (``/json/``) lists every worker ALIVE.
- ``stop()`` always stops every process by PID: SIGTERM to each daemon, then SIGKILL after a
  grace period. Executor JVMs and their Python workers are descendants of a worker, but
  PySpark's daemon.py moves itself into a new process group (``os.setpgid(0, 0)``), so
  process groups do not find them: ``stop()`` snapshots every descendant (by parent PID, in
  /proc) before signalling, and afterwards SIGKILLs any that survived, identified by
  (PID, start time) so a reused PID is never hit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kafkalite.testing.cluster import _tail, pid_alive, wait_pid_exit
from kafkalite.testing.ports import LOOPBACK_HOST, free_ports
from kafkalite.testing.process_identity import stat_after_comm

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
POLL_INTERVAL_S = 0.25
# Heap of the master and worker daemons themselves (executors get their own JVMs).
DAEMON_MEMORY = "256m"
WORKER_MEMORY_DEFAULT = "1g"
# Per-executor heap: must fit in a worker's memory offer or no executor is launched.
EXECUTOR_MEMORY_DEFAULT = "512m"
HTTP_TIMEOUT_S = 2.0


class SparkClusterError(RuntimeError):
    """The Spark cluster did not come up (or down); the message includes log tails."""


def spark_home() -> Path:
    """The installed pyspark package directory: it ships bin/spark-class and jars/."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    assert (home / "bin" / "spark-class").is_file(), f"no bin/spark-class in {home}"
    assert (home / "jars").is_dir(), f"no jars/ in {home}"
    return home


class SparkStandaloneCluster:
    """A master and ``workers`` workers on loopback; see the module docstring."""

    def __init__(self, directory: str | os.PathLike, *, workers: int = 2, worker_cores: int = 1,
                 worker_memory: str = WORKER_MEMORY_DEFAULT, python: str | None = None) -> None:
        assert workers >= 1
        assert worker_cores >= 1
        self.directory = Path(directory)
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.python = python or sys.executable
        self.home = spark_home()
        ports = free_ports(2 + 2 * workers)
        self.master_port, self.master_webui_port = ports[0], ports[1]
        self.worker_ports = [(ports[2 + 2 * i], ports[3 + 2 * i]) for i in range(workers)]
        self.procs: list[tuple[str, subprocess.Popen]] = []
        # Every descendant ever seen, as (pid, start time): executors and Python workers.
        self._seen: set[tuple[int, int]] = set()
        self.start_s: float | None = None  # measured: spawn to all workers ALIVE
        self.stop_s: float | None = None  # measured: the last stop()

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK_HOST}:{self.master_port}"

    @property
    def master_webui_url(self) -> str:
        return f"http://{LOOPBACK_HOST}:{self.master_webui_port}"

    @property
    def pids(self) -> list[int]:
        return [p.pid for _, p in self.procs]

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> SparkStandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Spawn the master and workers; return when every worker is registered and ALIVE.
        On any failure everything started so far is stopped before the error propagates."""
        began = time.monotonic()
        try:
            self._spawn("master", MASTER_CLASS, [
                "--host", LOOPBACK_HOST, "--port", str(self.master_port),
                "--webui-port", str(self.master_webui_port)])
            for i, (port, webui_port) in enumerate(self.worker_ports):
                work_dir = self.directory / f"worker-{i}" / "work"
                work_dir.mkdir(parents=True, exist_ok=True)
                self._spawn(f"worker-{i}", WORKER_CLASS, [
                    "--host", LOOPBACK_HOST, "--port", str(port), "--webui-port", str(webui_port),
                    "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                    "--work-dir", str(work_dir), self.master_url])
            self._wait_workers_alive(began + timeout_s)
        except BaseException:
            try:
                self.stop()
            except SparkClusterError as e:  # keep the start failure as the error raised
                print(f"spark cluster: {e}", file=sys.stderr)
            raise
        self.start_s = time.monotonic() - began

    def stop(self) -> None:
        """Stop every process this cluster started (daemons, executors, Python workers);
        idempotent. Raises if any survived SIGKILL."""
        began = time.monotonic()
        self._remember_descendants()
        for _name, proc in reversed(self.procs):  # workers first: they stop their executors
            self._stop_daemon(proc)
        for pid, start in list(self._seen):
            if _start_time(pid) == start:
                wait_pid_exit(pid, STOP_GRACE_S)
            if _start_time(pid) == start:
                os.kill(pid, signal.SIGKILL)
                wait_pid_exit(pid, STOP_GRACE_S)
        left = self.leftover_pids()
        self.stop_s = time.monotonic() - began
        if left:
            raise SparkClusterError(f"processes left after stop: {left}")

    def leftover_pids(self) -> list[int]:
        """Daemons and descendants ever seen that are still alive (should be [] after stop)."""
        self._remember_descendants()
        daemons = [p.pid for _, p in self.procs if p.poll() is None]
        return sorted(set(daemons) | {pid for pid, start in self._seen if _start_time(pid) == start and pid_alive(pid)})

    def worker_of(self, pid: int) -> str | None:
        """The name ("worker-0", ...) of the daemon that ``pid`` descends from, or None."""
        by_pid = {p.pid: name for name, p in self.procs}
        parents = _parents()
        while pid > 1:
            if pid in by_pid:
                return by_pid[pid]
            pid = parents.get(pid, 0)
        return None

    # -- internals ---------------------------------------------------------------------------

    def _env(self, name: str) -> dict[str, str]:
        conf_dir = self.directory / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(self.home),
            "SPARK_CONF_DIR": str(conf_dir),
            "SPARK_LOG_DIR": str(self.directory / "logs"),
            "SPARK_LOCAL_IP": LOOPBACK_HOST,
            "SPARK_LOCAL_HOSTNAME": LOOPBACK_HOST,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "PYSPARK_PYTHON": self.python,
            # The master's REST submission server would take port 6066: off.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_WORKER_OPTS": f"-Dspark.worker.cleanup.enabled=false -Dspark.pyspark.python={self.python}",
        })
        # A driver-side setting must not leak into the daemons (e.g. an IPython driver).
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        return env

    def _spawn(self, name: str, cls: str, args: list[str]) -> None:
        log_dir = self.directory / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / f"{name}.out", "ab") as out:
            proc = subprocess.Popen(
                [str(self.home / "bin" / "spark-class"), cls, *args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self._env(name), cwd=self.directory, start_new_session=True)
        self.procs.append((name, proc))

    def _master_state(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.master_webui_url}/json/", timeout=HTTP_TIMEOUT_S) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def _wait_workers_alive(self, deadline: float) -> None:
        state = None
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise SparkClusterError(f"{name} exited with {proc.returncode}:\n{self._log_tails()}")
            state = self._master_state()
            if state is not None:
                alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= self.workers:
                    return
            time.sleep(POLL_INTERVAL_S)
        raise SparkClusterError(f"workers not ALIVE in time; master says {state}\n{self._log_tails()}")

    def _log_tails(self) -> str:
        logs = self.directory / "logs"
        return "\n".join(f"--- {name}.out ---\n{_tail(str(logs / f'{name}.out'))}" for name, _ in self.procs)

    def _remember_descendants(self) -> None:
        parents = _parents()
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        todo = [p.pid for _, p in self.procs]
        while todo:
            for child in children.get(todo.pop(), []):
                start = _start_time(child)
                if start is not None:
                    self._seen.add((child, start))
                todo.append(child)

    def _stop_daemon(self, proc: subprocess.Popen) -> None:
        """SIGTERM (a worker then kills its executors), SIGKILL after a grace period; reap."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_GRACE_S)


def _parents() -> dict[int, int]:
    """pid -> parent pid for every process now."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_after_comm(int(entry))
            if fields is not None:
                parents[int(entry)] = int(fields[1])
    return parents


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (with the PID, a unique identity)."""
    fields = stat_after_comm(pid)
    return None if fields is None else int(fields[19])


def session_builder(cluster: SparkStandaloneCluster, app_name: str, *, executor_memory: str = EXECUTOR_MEMORY_DEFAULT):
    """A SparkSession builder for this cluster: one 1-core executor per worker, no driver
    UI, the driver bound to loopback, and Python workers on ``cluster.python`` (this also
    sets PYSPARK_PYTHON in this process's environment, which pyspark reads on the driver).
    The caller calls ``.getOrCreate()`` (after adding its own configs) and ``.stop()``."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = cluster.python
    return (SparkSession.builder.master(cluster.master_url).appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", LOOPBACK_HOST)
            .config("spark.driver.bindAddress", LOOPBACK_HOST)
            .config("spark.executor.memory", executor_memory)
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", str(cluster.workers * cluster.worker_cores))
            .config("spark.pyspark.python", cluster.python)
            .config("spark.sql.shuffle.partitions", "4"))


def task_location(_index: int) -> list[tuple[int, str, str, str]]:
    """Run as a Spark task: ``[(pid, hostname, kafkalite.__file__, sys.executable)]`` of the
    Python worker that runs it.

    It lives here, not in a test module, on purpose: executors unpickle functions by module
    name, and a test module (tests/ is not a package on their sys.path) is not importable
    there -- "No module named 'test_...'". Code that tasks run must live in kafkalite."""
    import socket

    import kafkalite

    return [(os.getpid(), socket.gethostname(), kafkalite.__file__, sys.executable)]
