"""Brokers as separate hosts (issue 14): one network namespace per cluster member, joined
by a bridge, and the network faults made real on them.

`bin/cluster up --netns PREFIX` puts ZooKeeper in namespace `PREFIX-zk` and broker i in
`PREFIX-b<i>`. Each namespace gets a veth pair whose outer end is a port of the bridge
`PREFIX-br`, its inner end `eth0` with an address of the cluster's own /24 (10.213.N.0/24,
N chosen free when the cluster comes up): the bridge (the host, where clients run) is .1,
ZooKeeper .2, broker i .10+i. Nothing leaves that subnet: no route, no NAT, no forwarding
beyond the bridge.

Faults are packet drops with iptables inside the namespaces, in a chain of our own
(`KLFAULT`, hooked into INPUT and OUTPUT) that `heal` flushes:

- `isolate(member)`: the member and every other member drop each other's packets; the
  host still reaches it (the zombie case), unless `clients=True`;
- `between(group_a, group_b)`: both ways between the groups;
- `oneway(src, dst)`: packets from src to dst only (dropped at src's OUTPUT and dst's
  INPUT);
- `netem(member, delay_ms, loss)`: `tc netem` on the member's eth0 when the kernel has
  it; without sch_netem (these Firecracker kernels lack it), the member's outgoing packets
  go through an NFQUEUE rule to a process in its namespace that holds each one for the
  delay and drops the given share (kafkalite.testing.nfqueue_delay; `--queue-bypass`, so
  packets flow again if it is gone); `heal` ends it.

Every command runs as root (`ip`, `iptables`, `tc` from Debian's iproute2 and iptables);
`NetnsError` says which one failed and what it printed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

CHAIN = "KLFAULT"
NFQUEUE_NUM = 7  # the delaying process's queue (each namespace has its own queues)
SUBNET_BASE = "10.213.0.0/16"
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")  # interface names are at most 15 characters
HOST = "host"  # the bridge side: where clients run
ZK = "zk"


class NetnsError(RuntimeError):
    """A namespace operation failed; the message names the command and its output."""


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NetnsError(f"{argv[0]}: command not found; network namespaces need Debian's iproute2 and iptables "
                         "(apt-get install iproute2 iptables)") from None
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetnsError(f"{' '.join(argv)}: {e}") from None
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done


def check_prefix(prefix: str) -> None:
    if not PREFIX_RE.match(prefix):
        raise NetnsError(f"--netns prefix {prefix!r}: 1-8 lower-case letters and digits, starting with a letter "
                         "(interface names are limited to 15 characters)")


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.213.0.0/16 that no interface of the host uses."""
    used = _run(["ip", "-4", "-o", "addr", "show"]).stdout
    taken = {ipaddress.ip_interface(m).network for m in re.findall(r"inet (\S+)", used)}
    for net in ipaddress.ip_network(SUBNET_BASE).subnets(new_prefix=24):
        if not any(net.overlaps(t) for t in taken):
            return net
    raise NetnsError(f"no free /24 left in {SUBNET_BASE}")


@dataclasses.dataclass
class Member:
    name: str  # "zk", "b1", ...
    namespace: str
    address: str
    veth: str  # the outer end, a bridge port


@dataclasses.dataclass
class NetnsLayout:
    prefix: str
    subnet: str  # "10.213.4.0/24"
    members: dict[str, Member]

    @classmethod
    def plan(cls, prefix: str, broker_ids: Iterable[int], subnet: ipaddress.IPv4Network | None = None,
             zk_members: int = 1) -> NetnsLayout:
        """One ZooKeeper (`zk`, at .2) or an ensemble of `zk_members` (`zk1`.. at .2, .3, ...)."""
        check_prefix(prefix)
        if not 1 <= zk_members <= 7:
            raise NetnsError("a ZooKeeper ensemble here has 1 to 7 members")
        net = subnet or free_subnet()
        hosts = list(net.hosts())
        names = [ZK] if zk_members == 1 else [f"{ZK}{i}" for i in range(1, zk_members + 1)]
        members = {n: Member(n, f"{prefix}-{n}", str(hosts[1 + k]), f"{prefix}-{n}") for k, n in enumerate(names)}
        for i in broker_ids:
            if not 1 <= i <= 200:
                raise NetnsError(f"broker id {i}: namespaces hold ids 1..200")
            members[f"b{i}"] = Member(f"b{i}", f"{prefix}-b{i}", str(hosts[9 + i]), f"{prefix}-b{i}")
        return cls(prefix, str(net), members)

    # -- state file ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"prefix": self.prefix, "subnet": self.subnet,
                "members": {k: dataclasses.asdict(m) for k, m in self.members.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> NetnsLayout:
        return cls(d["prefix"], d["subnet"], {k: Member(**m) for k, m in d["members"].items()})

    # -- addresses -----------------------------------------------------------------------
    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    @property
    def host_address(self) -> str:
        return str(next(ipaddress.ip_network(self.subnet).hosts()))

    @property
    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    @property
    def zookeepers(self) -> list[str]:
        return [k for k in self.members if k.startswith(ZK)]

    def member(self, name: str) -> Member:
        key = name if name in self.members or name == HOST else (f"b{name}" if name.isdigit() else name)
        if key not in self.members:
            choices = self.zookeepers + [k[1:] for k in self.members if k.startswith("b")]
            raise NetnsError(f"no cluster member {name!r}: choose from {', '.join(choices)}")
        return self.members[key]

    def wrap(self, name: str) -> list[str]:
        """The argv prefix that runs a command inside the member's namespace."""
        return ["ip", "netns", "exec", self.member(name).namespace]

    def add_broker(self, broker_id: int) -> Member:
        hosts = list(ipaddress.ip_network(self.subnet).hosts())
        m = Member(f"b{broker_id}", f"{self.prefix}-b{broker_id}", str(hosts[9 + broker_id]), f"{self.prefix}-b{broker_id}")
        self.members[m.name] = m
        _create_member(self, m)
        return m

    # -- lifecycle -----------------------------------------------------------------------
    def create(self) -> None:
        """The bridge, then each member's namespace, veth pair, address and fault chain.
        On any failure what was made is removed again."""
        try:
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", f"{self.host_address}/{self.prefix_len}", "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
            for m in self.members.values():
                _create_member(self, m)
        except NetnsError:
            self.destroy()
            raise

    def destroy(self) -> list[str]:
        """Remove every namespace, veth and the bridge; what was not there is skipped.
        Returns the errors of removals that failed."""
        errors = []
        existing = set(_run(["ip", "netns", "list"], check=False).stdout.split())
        for m in self.members.values():
            if m.namespace in existing:
                done = _run(["ip", "netns", "del", m.namespace], check=False)
                if done.returncode:
                    errors.append(done.stderr.strip())
            _run(["ip", "link", "del", m.veth], check=False)  # gone with the namespace, normally
        if _run(["ip", "link", "show", self.bridge], check=False).returncode == 0:
            done = _run(["ip", "link", "del", self.bridge], check=False)
            if done.returncode:
                errors.append(done.stderr.strip())
        return errors

    def exists(self) -> bool:
        return _run(["ip", "link", "show", self.bridge], check=False).returncode == 0

    # -- faults --------------------------------------------------------------------------
    def _drop(self, at: str, peer_address: str, direction: str) -> None:
        """At member `at`, drop packets to (OUTPUT) or from (INPUT) `peer_address`."""
        iface, flag = ("-o", "-d") if direction == "OUTPUT" else ("-i", "-s")
        _run([*self.wrap(at), "iptables", "-w", "-A", CHAIN, iface, "eth0", flag, peer_address, "-j", "DROP"])

    def _cut(self, a: str, b: str, *, both_ways: bool = True) -> None:
        """Drop a -> b (and b -> a): at both ends, so a half-open connection cannot slip by."""
        ma, mb = self.member(a), self.member(b)
        self._drop(ma.name, mb.address, "OUTPUT")
        self._drop(mb.name, ma.address, "INPUT")
        if both_ways:
            self._drop(mb.name, ma.address, "OUTPUT")
            self._drop(ma.name, mb.address, "INPUT")

    def isolate(self, name: str, *, clients: bool = False) -> None:
        m = self.member(name)
        for other in self.members.values():
            if other.name != m.name:
                self._cut(m.name, other.name)
        if clients:
            self._drop(m.name, self.host_address, "OUTPUT")
            self._drop(m.name, self.host_address, "INPUT")

    def between(self, group_a: Sequence[str], group_b: Sequence[str]) -> None:
        a = [self.member(x).name for x in group_a]
        b = [self.member(x).name for x in group_b]
        if set(a) & set(b):
            raise NetnsError(f"a member cannot be on both sides: {sorted(set(a) & set(b))}")
        for x in a:
            for y in b:
                self._cut(x, y)

    def oneway(self, src: str, dst: str) -> None:
        if self.member(src).name == self.member(dst).name:
            raise NetnsError("--oneway needs two different members")
        self._cut(src, dst, both_ways=False)

    def netem(self, name: str, *, delay_ms: float = 0, loss: float = 0) -> str:
        """Delay and/or loss on the member's eth0; returns how it was done."""
        if delay_ms < 0 or not 0 <= loss <= 1:
            raise NetnsError("netem: the delay must be >= 0 and the loss between 0% and 100%")
        m = self.member(name)
        args = (["delay", f"{delay_ms:g}ms"] if delay_ms else []) + (["loss", f"{loss * 100:g}%"] if loss else [])
        if not args:
            raise NetnsError("netem: give --delay and/or --loss")
        done = _run([*self.wrap(m.name), "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", *args], check=False)
        if done.returncode == 0:
            return "tc netem " + " ".join(args)
        # No netem qdisc in this kernel: outgoing packets go through NFQUEUE to a process in
        # the namespace that holds and drops them (kafkalite.testing.nfqueue_delay).
        self._stop_delayer(m.name)
        _run([*self.wrap(m.name), "iptables", "-w", "-A", CHAIN, "-o", "eth0", "-j", "NFQUEUE", "--queue-num",
              str(NFQUEUE_NUM), "--queue-bypass"])
        pidfile = self._delayer_pidfile(m.name)
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        log = open(pidfile.with_suffix(".log"), "ab")
        try:
            proc = subprocess.Popen([*self.wrap(m.name), sys.executable, "-m", "kafkalite.testing.nfqueue_delay",
                                     "--queue", str(NFQUEUE_NUM), "--delay-ms", f"{delay_ms:g}", "--loss", f"{loss:g}"],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        pidfile.write_text(str(proc.pid))
        return (f"{delay_ms:g} ms delay and {loss * 100:g}% loss of its outgoing packets (NFQUEUE to a delaying process, "
                f"pid {proc.pid}: this kernel has no netem qdisc)")

    def _delayer_pidfile(self, name: str) -> Path:
        return Path(tempfile.gettempdir()) / f"kafkalite-netns-{self.prefix}" / f"delay-{name}.pid"

    def _stop_delayer(self, name: str) -> None:
        """End the delaying process this layout started for a member (by its recorded PID,
        after checking it is one)."""
        pidfile = self._delayer_pidfile(name)
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            return
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                ours = b"kafkalite.testing.nfqueue_delay" in f.read()
        except OSError:
            ours = False
        if ours:
            try:
                os.kill(pid, signal.SIGTERM)
                for _ in range(50):
                    done, _status = os.waitpid(pid, os.WNOHANG) if _is_child(pid) else (0, 0)
                    if done == pid or not os.path.exists(f"/proc/{pid}"):
                        break
                    time.sleep(0.02)
            except (ProcessLookupError, ChildProcessError):
                pass
        pidfile.unlink(missing_ok=True)

    def heal(self) -> None:
        """Every fault undone: the chains flushed, any netem qdisc or delaying process removed."""
        for m in self.members.values():
            self._stop_delayer(m.name)
            _run([*self.wrap(m.name), "iptables", "-w", "-F", CHAIN], check=False)
            _run([*self.wrap(m.name), "tc", "qdisc", "del", "dev", "eth0", "root"], check=False)

    def faults(self) -> dict[str, list[str]]:
        """The drop rules in place, per member (for `status` and tests)."""
        out = {}
        for m in self.members.values():
            rules = _run([*self.wrap(m.name), "iptables", "-w", "-S", CHAIN], check=False).stdout.splitlines()
            rules = [r for r in rules if r.startswith("-A")]
            if rules:
                out[m.name] = rules
        return out


def _is_child(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid()
    except (OSError, ValueError, IndexError):
        return False


def _create_member(layout: NetnsLayout, m: Member) -> None:
    inner = f"{m.veth}i"[:15]
    _run(["ip", "netns", "add", m.namespace])
    _run(["ip", "link", "add", m.veth, "type", "veth", "peer", "name", inner])
    _run(["ip", "link", "set", inner, "netns", m.namespace])
    _run(["ip", "link", "set", m.veth, "master", layout.bridge])
    _run(["ip", "link", "set", m.veth, "up"])
    ns = ["ip", "netns", "exec", m.namespace]
    _run([*ns, "ip", "link", "set", inner, "name", "eth0"])
    _run([*ns, "ip", "addr", "add", f"{m.address}/{layout.prefix_len}", "dev", "eth0"])
    _run([*ns, "ip", "link", "set", "eth0", "up"])
    _run([*ns, "ip", "link", "set", "lo", "up"])
    _run([*ns, "iptables", "-w", "-N", CHAIN])
    _run([*ns, "iptables", "-w", "-I", "INPUT", "-j", CHAIN])
    _run([*ns, "iptables", "-w", "-I", "OUTPUT", "-j", CHAIN])


__all__ = ["HOST", "NetnsError", "NetnsLayout", "check_prefix", "free_subnet"]
