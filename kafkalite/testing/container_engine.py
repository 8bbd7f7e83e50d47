"""A container engine for tests/compose: the Docker that already runs, or a private one.

`find_engine()` answers, in order:
1. a Docker daemon that already answers (`docker info`, honouring DOCKER_HOST): used as is;
2. as root on Debian with none running: Debian's `docker.io`, `docker-compose` and
   `debootstrap` are installed (apt-get) and a private `dockerd` is started on its own
   socket, data root and exec root (`PrivateDockerd`), its default bridge on its own
   subnet;
3. otherwise None, with the reason (the only case in which the compose test skips).

`PrivateDockerd.stop()` always runs (the test's `finally`): it stops the daemon by the PID
it started (SIGTERM, then SIGKILL), then removes the network devices and iptables chains
and rules the daemon added, found by comparing with what existed before it started. Its
data root is kept as a build cache under KAFKALITE_DOCKER_ROOT (default
/var/tmp/kafkalite-docker): a second run reuses the debootstrap base image and the layers.

No image registry need be reachable: `build_debootstrap_image` makes a base image from the
Debian mirror that apt already uses (debootstrap + `docker import`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DOCKER_ROOT_DEFAULT = "/var/tmp/kafkalite-docker"
DAEMON_START_TIMEOUT_S = 60.0
DAEMON_STOP_TIMEOUT_S = 30.0
APT_TIMEOUT_S = 1200.0
DEBOOTSTRAP_TIMEOUT_S = 1800.0
# The private daemon's default bridge and the pool its compose networks come from; chosen
# away from Docker's usual 172.17+/16 so a host that also runs Docker sees no overlap.
PRIVATE_BRIDGE_CIDR = "10.213.0.1/24"
PRIVATE_ADDRESS_POOL = "base=10.214.0.0/16,size=24"
APT_PACKAGES = ("docker.io", "docker-compose", "debootstrap")
IPTABLES_TABLES = ("filter", "nat")


class EngineError(RuntimeError):
    """The engine could not be prepared; the message says what failed."""


@dataclass
class Engine:
    """How to reach a daemon: the environment for docker/docker-compose and which binaries."""

    env: dict[str, str]
    docker: str
    compose: list[str]
    description: str
    private: PrivateDockerd | None = None

    def run(self, *args: str, timeout_s: float = 600.0, check: bool = True, capture: bool = True,
            cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
        return _run([self.docker, *args], env=self.env, timeout_s=timeout_s, check=check, capture=capture, cwd=cwd)

    def compose_run(self, *args: str, timeout_s: float = 900.0, check: bool = True, capture: bool = True,
                    cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return _run([*self.compose, *args], env={**self.env, **(env or {})}, timeout_s=timeout_s, check=check, capture=capture, cwd=cwd)

    def has_image(self, ref: str) -> bool:
        return self.run("image", "inspect", ref, check=False).returncode == 0


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout_s: float, check: bool = True, capture: bool = True,
         cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(cmd, env=env, timeout=timeout_s, cwd=cwd, stdin=subprocess.DEVNULL, text=True,
                              stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
    except subprocess.TimeoutExpired as e:
        raise EngineError(f"{' '.join(cmd)} did not finish within {timeout_s:.0f} s") from e
    except FileNotFoundError as e:
        raise EngineError(f"{cmd[0]} is not installed") from e
    if check and done.returncode != 0:
        tail = (done.stdout or "")[-4000:]
        raise EngineError(f"{' '.join(cmd)} failed with {done.returncode}:\n{tail}")
    return done


def _compose_command(docker: str, env: dict[str, str]) -> list[str] | None:
    """`docker compose` (v2 plug-in) if the CLI has it, else `docker-compose` (v1)."""
    if _run([docker, "compose", "version"], env=env, timeout_s=30, check=False).returncode == 0:
        return [docker, "compose"]
    found = shutil.which("docker-compose")
    return [found] if found else None


def _running_docker() -> Engine | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    env = dict(os.environ)
    if _run([docker, "info", "--format", "{{.ServerVersion}}"], env=env, timeout_s=30, check=False).returncode != 0:
        return None
    compose = _compose_command(docker, env)
    if compose is None:
        return None
    return Engine(env, docker, compose, f"the running Docker ({env.get('DOCKER_HOST', 'default socket')})")


def find_engine() -> tuple[Engine | None, str]:
    """(an engine, "") or (None, why there is none). May install packages and start a
    private daemon: the caller must call `release(engine)` when done."""
    running = _running_docker()
    if running is not None:
        return running, ""
    if os.geteuid() != 0:
        return None, "no Docker daemon answers and not running as root (cannot start a private one)"
    if not Path("/etc/debian_version").exists() or shutil.which("apt-get") is None:
        return None, "no Docker daemon answers and this is not Debian (cannot install docker.io to start a private one)"
    missing = [p for p in APT_PACKAGES if _run(["dpkg", "-s", p], timeout_s=30, check=False).returncode != 0]
    if missing:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=600", *missing]
        if _run(install, env=env, timeout_s=APT_TIMEOUT_S, check=False).returncode != 0:
            _run(["apt-get", "update", "-qq"], env=env, timeout_s=APT_TIMEOUT_S, check=False)
            done = _run(install, env=env, timeout_s=APT_TIMEOUT_S, check=False)
            if done.returncode != 0:
                return None, f"could not install {' '.join(missing)}: {(done.stdout or '')[-2000:]}"
    daemon = PrivateDockerd(Path(os.environ.get("KAFKALITE_DOCKER_ROOT", DOCKER_ROOT_DEFAULT)))
    try:
        daemon.start()
    except EngineError as e:
        daemon.stop()
        return None, f"a private dockerd could not start here: {e}"
    # Debian's client (/usr/bin/docker) matches the daemon's API; a newer CLI elsewhere on
    # PATH may not speak to it.
    docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")
    env = dict(os.environ, DOCKER_HOST=f"unix://{daemon.socket}")
    env.pop("DOCKER_CONTEXT", None)
    compose = _compose_command(docker, env)
    if compose is None:
        daemon.stop()
        return None, "docker-compose is not installed"
    return Engine(env, docker, compose, f"a private dockerd (pid {daemon.pid}, {daemon.socket})", daemon), ""


def release(engine: Engine | None) -> None:
    if engine is not None and engine.private is not None:
        engine.private.stop()


@dataclass
class PrivateDockerd:
    root: Path
    pid: int | None = None
    _proc: subprocess.Popen | None = None
    _links_before: set[str] = field(default_factory=set)
    _iptables_before: dict[str, list[str]] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.root / "run" / "docker.sock"

    @property
    def log_path(self) -> Path:
        return self.root / "dockerd.log"

    def start(self) -> None:
        for d in ("data", "exec", "run"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
        if not Path(dockerd).exists():
            raise EngineError("dockerd is not installed")
        self._links_before = _links()
        self._iptables_before = {t: _iptables_save(t) for t in IPTABLES_TABLES}
        pidfile = self.root / "run" / "docker.pid"
        pidfile.unlink(missing_ok=True)
        self.socket.unlink(missing_ok=True)
        args = [dockerd, f"--host=unix://{self.socket}", f"--data-root={self.root / 'data'}", f"--exec-root={self.root / 'exec'}",
                f"--pidfile={pidfile}", f"--bip={PRIVATE_BRIDGE_CIDR}", f"--default-address-pool={PRIVATE_ADDRESS_POOL}",
                "--containerd-namespace=kafkalite-test", "--containerd-plugins-namespace=kafkalite-test-plugins"]
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        self.pid = self._proc.pid
        deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
        docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
        env = dict(os.environ, DOCKER_HOST=f"unix://{self.socket}")
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise EngineError(f"dockerd exited with {self._proc.returncode}; see {self.log_path}:\n{_tail(self.log_path)}")
            if self.socket.exists() and _run([docker, "info"], env=env, timeout_s=20, check=False).returncode == 0:
                return
            time.sleep(0.3)
        raise EngineError(f"dockerd did not answer within {DAEMON_START_TIMEOUT_S:.0f} s; see {self.log_path}:\n{_tail(self.log_path)}")

    def stop(self) -> None:
        """Stop the daemon by its PID (and its process group: containerd and shims it
        started), then remove the bridges and iptables rules and chains it left."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
                try:
                    self._proc.wait(timeout=DAEMON_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    pass
            try:  # whatever of its session is left (containerd, shims, docker-proxy)
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self._proc = None
        for link in sorted(_links() - self._links_before):
            if link == "docker0" or link.startswith(("br-", "veth")):
                _run(["ip", "link", "delete", link], timeout_s=30, check=False)
        for table in IPTABLES_TABLES:
            _restore_iptables(table, self._iptables_before.get(table, []))


def _tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


def _links() -> set[str]:
    done = _run(["ip", "-o", "link", "show"], timeout_s=30, check=False)
    return {m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)[:@]", done.stdout or "", re.M)}


def _iptables_save(table: str) -> list[str]:
    if shutil.which("iptables-save") is None:
        return []
    done = _run(["iptables-save", "-t", table], timeout_s=30, check=False)
    return [line for line in (done.stdout or "").splitlines() if line.startswith((":", "-A "))]


def _restore_iptables(table: str, before: list[str]) -> None:
    """Delete the rules the daemon appended, flush and remove the chains it created, and
    put back the built-in chains' policies."""
    after = _iptables_save(table)
    old = set(before)
    for rule in reversed([r for r in after if r.startswith("-A ") and r not in old]):
        _run(["iptables", "-t", table, "-D", *rule[3:].split()], timeout_s=30, check=False)
    old_chains = {line.split()[0][1:] for line in before if line.startswith(":")}
    new_chains = [line.split()[0][1:] for line in after if line.startswith(":") and line.split()[0][1:] not in old_chains]
    for chain in new_chains:
        _run(["iptables", "-t", table, "-F", chain], timeout_s=30, check=False)
    for chain in new_chains:
        _run(["iptables", "-t", table, "-X", chain], timeout_s=30, check=False)
    # dockerd also sets the FORWARD policy to DROP: put back every built-in chain's policy.
    policies = {line.split()[0][1:]: line.split()[1] for line in before if line.startswith(":") and line.split()[1] != "-"}
    for line in after:
        if line.startswith(":"):
            chain, policy = line.split()[0][1:], line.split()[1]
            if chain in policies and policy != policies[chain]:
                _run(["iptables", "-t", table, "-P", chain, policies[chain]], timeout_s=30, check=False)


def debian_mirror() -> str:
    """The Debian mirror apt uses here (deb822 or one-line sources), for debootstrap."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if "security" not in m.group(1):
                return m.group(1)
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", text, re.M):
            if "security" not in m.group(1):
                return m.group(1)
    return "http://deb.debian.org/debian"


def debian_suite() -> str:
    text = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    m = re.search(r"^VERSION_CODENAME=(\S+)", text, re.M)
    return m.group(1) if m else "bookworm"


def build_debootstrap_image(engine: Engine, ref: str, packages: list[str]) -> float:
    """Make `ref` from a minimal Debian (debootstrap, the host's suite and mirror) with
    `packages`, unless the engine has it already; returns the seconds it took (0 if cached)."""
    if engine.has_image(ref):
        return 0.0
    if shutil.which("debootstrap") is None:
        raise EngineError("debootstrap is not installed (apt-get install debootstrap)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kafkalite-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", debian_suite(), str(rootfs), debian_mirror()],
             timeout_s=DEBOOTSTRAP_TIMEOUT_S)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            imported = subprocess.run([engine.docker, "import", "-", ref], stdin=tar.stdout, env=engine.env, capture_output=True,
                                      text=True, timeout=DEBOOTSTRAP_TIMEOUT_S)
        finally:
            if tar.stdout is not None:
                tar.stdout.close()
            tar.wait(timeout=60)
        if imported.returncode != 0:
            raise EngineError(f"docker import failed: {imported.stderr[-2000:]}")
    return time.monotonic() - started
