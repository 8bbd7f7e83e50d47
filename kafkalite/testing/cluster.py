"""A local cluster of real processes: one ZooKeeper and N brokers on loopback.

Used by `bin/cluster`, by the integration/compat/chaos tests and by the benchmarks. Broker
i (ids 1..N) gets client port P+i-1, inter-broker port P+100+i-1 and admin port P+200+i-1
(DESIGN.md section 4c); `add_broker` gives the next id the same scheme's ports, so ids go
up to BROKERS_MAX before the blocks would overlap. Everything lives under one directory:
`cluster.json` (what runs where, and the `--override`s every broker gets), `zookeeper/`,
and `broker-<id>/` with `server.properties`, `data/` and `broker.log`. Processes are
started in their own sessions and only ever signalled by the PIDs recorded here, and only
while each PID still names the process started then (its start time is recorded with it,
kafkalite.testing.process_identity): a PID reused by another process after a broker died
or a reboot is taken as exited, said so in `notes`, and never signalled.

With `netns=PREFIX` (issue 14, kafkalite.testing.netns) ZooKeeper and every broker run in
network namespaces of their own (`PREFIX-zk`, `PREFIX-b<id>`) joined by a bridge, each on
its namespace's address instead of 127.0.0.1 (same ports); clients on the host reach them
through the bridge, and `net` makes network faults between them. `down` removes the
namespaces.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kafkalite.testing import process_identity as ident
from kafkalite.testing import zookeeper as zkmod
from kafkalite.testing.netns import NetnsError, NetnsLayout
from kafkalite.testing.probes import process_state
from kafkalite.testing.zookeeper import ZooKeeperServer

STATE_FILE = "cluster.json"
INTER_BROKER_SECRET_FILE = "inter-broker.secret"
ZK_DIGEST_FILE = "zookeeper.digest"
CLIENT_PROPERTIES = "client.properties"
ADMIN_USER = "admin"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# Client, inter-broker and admin ports come in blocks of 100 from the base port.
BROKERS_MAX = 100


class ClusterError(RuntimeError):
    """A cluster operation that cannot be done; the message says why."""


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_state(pid) != "Z"  # a zombie (exited, not yet reaped) is not alive


def wait_pid_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return True
        except ChildProcessError:
            pass
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


class LocalCluster:
    def __init__(self, directory: str | os.PathLike, *, brokers: int = 3, base_port: int = 9092, zk_port: int = 2181,
                 racks: list[str] | None = None, overrides: dict[str, Any] | None = None,
                 zk_tick_time_ms: int = 2000, zk_connect: str | None = None, python: str | None = None,
                 ports: list[tuple[int, int, int]] | None = None, netns: str | None = None, zk_ensemble: int = 1,
                 small_log_dir: str | None = None, zk_acl: bool = False, secure: bool = False,
                 mtls_ports: list[int] | None = None, inter_broker_secret: bool = True):
        if brokers < 1:
            raise ClusterError("--brokers must be at least 1")
        if racks and len(racks) not in (0, brokers):
            raise ClusterError(f"--racks lists {len(racks)} racks for {brokers} brokers")
        self.dir = Path(directory).resolve()
        self.count = brokers
        # False: no RPC secret at all (benchmarks comparing with brokers older than issue 15,
        # which refuse the config key).
        self.inter_broker_secret_enabled = inter_broker_secret
        self.base_port = base_port
        self.zk_port = zk_port
        self.racks = racks or []
        self.overrides = dict(overrides or {})
        self.zk_tick_time_ms = zk_tick_time_ms
        self.external_zk = zk_connect
        self.python = python or sys.executable
        if ports is not None and len(ports) != brokers:
            raise ClusterError("ports must list (client, inter-broker, admin) for every broker")
        self.ports = ports
        self.netns = netns
        if zk_ensemble != 1 and not netns:
            raise ClusterError("a ZooKeeper ensemble (--zk-ensemble) is only made with --netns")
        self.zk_ensemble = zk_ensemble
        # Issue 14: a second log dir per broker on a tmpfs of this size ("256m"), for disk
        # faults (bin/chaos fills it up); mounted by `up`, unmounted by `down` (root only).
        self.small_log_dir = small_log_dir
        # Issue 15: the brokers authenticate to ZooKeeper with a digest identity made for
        # this cluster and create their znodes with ACLs (zookeeper.set.acl).
        self.zk_acl = zk_acl
        # Issue 15: the client listener is SASL_SSL (SCRAM-SHA-512) with a dev CA under
        # tls/, an `admin` user and client.properties; with `mtls_ports` every broker also
        # has an SSL listener there that requires a client certificate (mutual TLS).
        if mtls_ports is not None and (not secure or len(mtls_ports) != brokers):
            raise ClusterError("mtls_ports needs secure=True and one port per broker")
        self.secure = secure
        self.mtls_ports = mtls_ports
        self.net: NetnsLayout | None = None
        self.zk_servers: list[ZooKeeperServer] = []
        self.zk: ZooKeeperServer | None = None
        self.state: dict[str, Any] = {}
        self._procs: dict[int, subprocess.Popen] = {}
        # Things the caller should hear about that are not errors: a recorded PID that now
        # names another process (left alone, taken as exited).
        self.notes: list[str] = []

    # -- state file ---------------------------------------------------------------------
    @classmethod
    def load(cls, directory: str | os.PathLike) -> LocalCluster:
        d = Path(directory).resolve()
        path = d / STATE_FILE
        if not path.exists():
            raise ClusterError(f"no cluster in {d} (run `bin/cluster up` first)")
        state = json.loads(path.read_text())
        # (a cluster.json of an `up` that failed before writing the brokers' configs lists none)
        c = cls(d, brokers=max(1, len(state["brokers"])), base_port=state["base_port"], zk_port=state["zookeeper"]["port"],
                overrides=state.get("overrides", {}), secure=bool(state.get("secure")))
        c.state = state
        if state.get("netns"):
            c.net = NetnsLayout.from_dict(state["netns"])
            c.netns = c.net.prefix
        return c

    def network(self) -> NetnsLayout:
        """The namespaces' layout, for network faults; only a cluster started with netns has one."""
        self._reload()
        if not self.state.get("netns"):
            raise ClusterError("this cluster does not run in network namespaces (start it with `bin/cluster up --netns PREFIX`)")
        self.net = NetnsLayout.from_dict(self.state["netns"])
        return self.net

    def _reload(self) -> None:
        """cluster.json is the truth shared by every process driving this cluster (bin/chaos
        or another bin/cluster call may have restarted brokers under new PIDs)."""
        path = self.dir / STATE_FILE
        if path.exists():
            try:
                self.state = json.loads(path.read_text())
            except (OSError, ValueError):
                pass

    def _save(self) -> None:
        tmp = self.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        os.replace(tmp, self.dir / STATE_FILE)

    # -- up -----------------------------------------------------------------------------
    def up(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        self.dir.mkdir(parents=True, exist_ok=True)
        existing = self.dir / STATE_FILE
        if existing.exists():
            old = json.loads(existing.read_text())
            running = [b["id"] for b in old["brokers"] if self._broker_whose(b) == ident.OURS]
            if running or any(self._zk_whose(label, e) == ident.OURS for label, e in _zk_entries(old)):
                raise ClusterError(f"a cluster is already running in {self.dir} (brokers {running}); `bin/cluster down` first")
        if self.netns:
            if self.external_zk:
                raise ClusterError("--netns runs its own ZooKeeper in a namespace; it cannot use an external one")
            try:
                self.net = NetnsLayout.plan(self.netns, range(1, self.count + 1), zk_members=self.zk_ensemble)
                if self.net.exists():
                    raise ClusterError(f"network namespaces of prefix {self.netns!r} exist already "
                                       f"(bridge {self.net.bridge}); `bin/cluster down` the cluster using them first")
                self.net.create()
            except NetnsError as e:
                raise ClusterError(f"cannot set up the network namespaces: {e}") from None
        if self.external_zk:
            zk_state = {"connect": self.external_zk, "pid": None, "port": None}
        elif self.net is not None and self.zk_ensemble > 1:
            zk_state = self._start_ensemble(timeout_s)
        else:
            where = {} if self.net is None else {"host": self.net.member("zk").address, "wrap": self.net.wrap("zk")}
            self.zk = ZooKeeperServer(self.dir / "zookeeper", port=self.zk_port, tick_time_ms=self.zk_tick_time_ms, **where)
            try:
                self.zk.start()
            except Exception as e:  # noqa: BLE001 - any start failure is reported the same way
                if self.net is not None:
                    self.net.destroy()
                raise ClusterError(f"ZooKeeper did not start on port {self.zk_port}: {e}") from None
            zkmod._untrack(self.zk._process)  # it outlives this process; `down` stops it by PID
            zk_state = {"connect": self.zk.connect_string, "pid": self.zk.pid, "identity": ident.identity_of(self.zk.pid),
                        "port": self.zk_port}
        self.state = {"base_port": self.base_port, "zookeeper": zk_state, "overrides": self.overrides, "brokers": []}
        if self.net is not None:
            self.state["netns"] = self.net.to_dict()
        self._save()  # from here on `down` knows what runs: ZooKeeper now, each broker once spawned
        try:
            self._prepare_brokers()
        except BaseException:
            self._undo_up()
            raise
        self._save()
        for b in self.state["brokers"]:
            self._spawn(b)
            self._save()
        self.wait_ready(timeout_s)
        return self.status()

    def _prepare_brokers(self) -> None:
        """Everything `up` does between starting ZooKeeper and starting the brokers."""
        self._make_inter_broker_secret()
        if self.zk_acl:
            self._make_zk_digest()
        if self.secure:
            self.state["secure"] = self._secure_setup()
        for i in range(1, self.count + 1):
            self.state["brokers"].append(self._write_broker_config(i))

    def _undo_up(self) -> None:
        """`up` failed after starting ZooKeeper and before any broker (a --small-log-dir
        mount, the --secure or --zk-acl setup): stop ZooKeeper, unmount what was mounted and
        remove the namespaces, so `up` can be run again (ZooKeeper's port free); had that
        failed, cluster.json still names what is left for `bin/cluster down`."""
        self._save()  # the mounts made so far (down reads the state from the file)
        try:
            self.down(graceful=False)
        except Exception as e:  # noqa: BLE001 - the failure of `up` is what the caller must see
            self.notes.append(f"cleaning up after the failed start: {e}; `bin/cluster down --dir {self.dir}` may finish it")

    def _start_ensemble(self, timeout_s: float) -> dict[str, Any]:
        """ZooKeeper members zk1..zkN, each in its own namespace, the same ports in each."""
        assert self.net is not None
        names = self.net.zookeepers
        peers = tuple((i, 2888, 3888) for i in range(1, len(names) + 1))
        hosts = tuple((i, self.net.member(n).address) for i, n in enumerate(names, 1))
        self.zk_servers = [
            ZooKeeperServer(self.dir / f"zookeeper-{i}", port=self.zk_port, tick_time_ms=self.zk_tick_time_ms,
                            host=self.net.member(n).address, wrap=self.net.wrap(n),
                            quorum=zkmod.QuorumMember(myid=i, peers=peers, hosts=hosts))
            for i, n in enumerate(names, 1)]
        try:
            for server in self.zk_servers:
                server.launch()
            deadline = time.monotonic() + timeout_s
            for server in self.zk_servers:
                server.wait_until_serving(max(0.1, deadline - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - any start failure is reported the same way
            for server in self.zk_servers:
                server.kill()
            self.net.destroy()
            raise ClusterError(f"the ZooKeeper ensemble did not start: {e}") from None
        for server in self.zk_servers:
            zkmod._untrack(server._process)  # they outlive this process; `down` stops them by PID
        members = [{"name": n, "pid": z.pid, "identity": ident.identity_of(z.pid), "address": z.host}
                   for n, z in zip(names, self.zk_servers)]
        return {"connect": ",".join(z.connect_string for z in self.zk_servers), "pid": members[0]["pid"],
                "identity": members[0]["identity"], "port": self.zk_port, "members": members}

    def _secure_setup(self) -> dict[str, Any]:
        """The dev CA (tls/), the `admin` SCRAM user with a random password, and
        client.properties in librdkafka's names for clients of the SASL_SSL listener."""
        import secrets

        from kafkalite.cli.dev_ca import create_dev_ca
        from kafkalite.core.sasl import SALT_BYTES, SCRAM_SHA_256, SCRAM_SHA_512, make_credential
        from kafkalite.zk.client import ZkAdapter
        from kafkalite.zk.security import make_client
        from kafkalite.zk.users import alter_user_config

        hosts = tuple(sorted({"127.0.0.1"} | ({m.address for m in self.net.members.values()} if self.net is not None else set())))
        tls = create_dev_ca(self.dir / "tls", hosts)
        password = secrets.token_urlsafe(18)
        credentials = {m: make_credential(m, password, secrets.token_bytes(SALT_BYTES)).to_kafka() for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
        security = self._zk_security_of_state()  # with --zk-acl: the cluster's digest identity, private ACL
        client = make_client(self.state["zookeeper"]["connect"], 10, security)
        client.start(timeout=15)
        try:
            alter_user_config(ZkAdapter(client, security=security), ADMIN_USER, credentials)
        finally:
            client.stop()
            client.close()
        hosts_ports = [self._write_broker_ports(i) for i in range(1, self.count + 1)]
        props = {
            "bootstrap.servers": ",".join(f"{h}:{p}" for h, p in hosts_ports),
            "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": ADMIN_USER, "sasl.password": password, "ssl.ca.location": str(tls["ca"]),
        }
        client_config = self.dir / CLIENT_PROPERTIES
        fd = os.open(client_config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("# librdkafka properties for this cluster's SASL_SSL listener (bin/cluster up --secure)\n")
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        return {"client_config": str(client_config), "tls_dir": str(self.dir / "tls"), "mtls_ports": self.mtls_ports,
                **{name: str(path) for name, path in tls.items()}}

    def _write_broker_ports(self, i: int) -> tuple[str, int]:
        """Broker i's client host and port (before its config is written)."""
        port = self.ports[i - 1][0] if self.ports is not None else self._scheme_ports(i)[0]
        return ("127.0.0.1" if self.net is None else self.net.member(str(i)).address), port

    def _security_props(self, i: int, host: str, port: int) -> dict[str, Any]:
        sec = self.state["secure"]
        mtls_ports = sec.get("mtls_ports")
        listeners = f"SASL_SSL://{host}:{port}"
        if mtls_ports and i <= len(mtls_ports):
            listeners += f",SSL://{host}:{mtls_ports[i - 1]}"
        return {"listeners": listeners, "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "ssl.certificate.location": sec["broker"], "ssl.key.location": sec["broker_key"],
                "ssl.ca.location": sec["ca"], "ssl.client.auth": "required"}

    def _scheme_ports(self, i: int) -> tuple[int, int, int]:
        return self.base_port + i - 1, self.base_port + 100 + i - 1, self.base_port + 200 + i - 1

    def _make_inter_broker_secret(self) -> None:
        """Issue 15: a new random secret per cluster, in a file only its owner reads, so the
        brokers' RPC connections are authenticated (kafkalite.rpc.auth), unless the
        overrides configure one (or turn it off with an empty inter.broker.secret)."""
        if not self.inter_broker_secret_enabled or "inter.broker.secret" in self.overrides or "inter.broker.secret.file" in self.overrides:
            return
        path = self.dir / INTER_BROKER_SECRET_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        self.state["inter_broker_secret_file"] = str(path)

    def _make_zk_digest(self) -> None:
        """Credentials file (0600) of the cluster's ZooKeeper identity: one line user:password."""
        path = self.dir / ZK_DIGEST_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"kafkalite:{secrets.token_hex(16)}\n")
        self.state["zk_digest_file"] = str(path)
        if not self.external_zk:  # our own ZooKeeper: its root is the cluster's too
            from kafkalite.zk.security import make_client, secure_root

            security = self._zk_security_of_state()
            client = make_client(self.state["zookeeper"]["connect"], 10, security)
            client.start(timeout=15)
            try:
                secure_root(client, security)
            finally:
                client.stop()
                client.close()

    def _zk_security_of_state(self) -> Any:
        from kafkalite.zk.security import ZkSecurity, security_from

        path = self.state.get("zk_digest_file")
        return security_from(True, "", "", path) if path else ZkSecurity()

    def zk_security(self) -> Any:
        """The kafkalite.zk.security settings an admin tool of this cluster uses."""
        self._reload()
        return self._zk_security_of_state()

    def inter_broker_secret(self) -> bytes | None:
        """The secret the brokers' RPC uses (tests that speak the RPC need it)."""
        from kafkalite.rpc.auth import load_secret

        self._reload()
        overrides = self.state.get("overrides", self.overrides)
        return load_secret(str(overrides.get("inter.broker.secret", "")),
                           str(overrides.get("inter.broker.secret.file", self.state.get("inter_broker_secret_file", ""))))

    def _write_broker_config(self, i: int, ports: tuple[int, int, int] | None = None, rack: str | None = None) -> dict[str, Any]:
        bdir = self.dir / f"broker-{i}"
        (bdir / "data").mkdir(parents=True, exist_ok=True)
        if ports is not None:
            port, ib_port, ad_port = ports
        elif self.ports is not None:
            port, ib_port, ad_port = self.ports[i - 1]
        else:
            port, ib_port, ad_port = self._scheme_ports(i)
        if rack is None:
            rack = self.racks[i - 1] if self.racks else ""
        host = "127.0.0.1" if self.net is None else self.net.member(str(i)).address
        log_dirs = [str(bdir / "data")]
        if self.small_log_dir:
            small = bdir / "small"
            small.mkdir(exist_ok=True)
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.small_log_dir}", "tmpfs", str(small)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise ClusterError(f"cannot mount a {self.small_log_dir} tmpfs at {small}: {done.stderr.strip()}")
            self.state.setdefault("mounts", []).append(str(small))
            log_dirs.append(str(small))
        props = {
            "broker.id": i, "listeners": f"PLAINTEXT://{host}:{port}",
            "inter.broker.listener": f"{host}:{ib_port}", "admin.listener": f"{host}:{ad_port}",
            "zookeeper.connect": self.state["zookeeper"]["connect"], "log.dirs": ",".join(log_dirs),
            "broker.rack": rack,
        }
        if self.state.get("inter_broker_secret_file"):
            props["inter.broker.secret.file"] = self.state["inter_broker_secret_file"]
        if self.state.get("zk_digest_file"):
            props["zookeeper.set.acl"] = "true"
            props["zookeeper.digest.file"] = self.state["zk_digest_file"]
        if self.state.get("secure"):
            props.update(self._security_props(i, host, port))
        props.update(self.overrides)
        cfg = bdir / "server.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return {"id": i, "pid": None, "host": host, "port": port, "inter_broker_port": ib_port, "admin_port": ad_port,
                "rack": rack or None, "log_dirs": log_dirs, "config": str(cfg), "log": str(bdir / "broker.log"),
                **({"small_log_dir": log_dirs[1]} if self.small_log_dir else {})}

    def _spawn(self, b: dict[str, Any]) -> None:
        log = open(b["log"], "ab")
        try:
            # In a namespace: `ip netns exec` enters it and execs the broker (same PID).
            net = NetnsLayout.from_dict(self.state["netns"]) if self.state.get("netns") else None
            wrap = net.wrap(str(b["id"])) if net is not None else []
            proc = subprocess.Popen(
                [*wrap, self.python, "-m", "kafkalite.cli.main", "broker", "--config", b["config"]],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                cwd=str(self.dir),
            )
        finally:
            log.close()
        self._procs[b["id"]] = proc
        b["pid"] = proc.pid
        b["identity"] = ident.identity_of(proc.pid)  # (an `ip netns exec` wrapper execs the broker: same start time)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S, broker_ids: list[int] | None = None) -> None:
        """Until every (given) broker is registered and a controller is elected."""
        want = set(broker_ids or [b["id"] for b in self.state["brokers"]])
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            for b in self.state["brokers"]:
                if b["id"] in want and self._broker_whose(b) != ident.OURS:
                    raise ClusterError(f"broker {b['id']} exited during start-up; see {b['log']}:\n{_tail(b['log'])}")
            try:
                registered, controller = self._zk_view()
                if want <= registered and controller is not None and self._metadata_knows(want, registered):
                    return
                last = f"registered {sorted(registered)}, controller {controller}"
            except Exception as e:  # noqa: BLE001 - ZooKeeper still starting
                last = str(e)
            time.sleep(0.1)
        raise ClusterError(f"cluster not ready after {timeout_s:.0f} s ({last})")

    def _metadata_knows(self, want: set[int], registered: set[int]) -> bool:
        """Every wanted broker has heard from the controller about every registered broker."""
        from kafkalite.testing.probes import broker_state

        for b in self.state["brokers"]:
            if b["id"] in want:
                known = {x["id"] for x in broker_state(b["admin_port"], host=b["host"], timeout_s=2)["metadata"]["brokers"]}
                if not registered <= known:
                    return False
        return True

    def _zk_view(self) -> tuple[set[int], int | None]:
        from kafkalite.zk.security import make_client

        client = make_client(self.state["zookeeper"]["connect"], 5, self.zk_security())
        client.start(timeout=5)
        try:
            ids = set(int(x) for x in (client.get_children("/brokers/ids") if client.exists("/brokers/ids") else []))
            controller = None
            if client.exists("/controller"):
                data, _ = client.get("/controller")
                controller = json.loads(data.decode()).get("brokerid")
            return ids, controller
        finally:
            client.stop()
            client.close()

    # -- growing ------------------------------------------------------------------------
    def add_broker(self, rack: str | None = None, *, ports: tuple[int, int, int] | None = None,
                   timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Start broker max(id)+1 in this running cluster, with the cluster's overrides, on
        the base-port scheme's ports (or `ports`: client, inter-broker, admin), and wait
        until it is registered and has the cluster's metadata. It is recorded in the state
        file first, so `kill`, `start` and `down` know it even if it fails to start."""
        self._reload()
        if not self.state.get("brokers"):
            raise ClusterError(f"no cluster in {self.dir} (run `bin/cluster up` first)")
        try:
            self._zk_view()
        except Exception:  # noqa: BLE001 - any failure to reach it is reported the same way
            raise ClusterError(f"ZooKeeper at {self.state['zookeeper']['connect']} is not reachable: "
                               "is the cluster up? (`bin/cluster up`)") from None
        new_id = max(b["id"] for b in self.state["brokers"]) + 1
        if ports is None:
            if new_id > BROKERS_MAX:
                raise ClusterError(f"broker {new_id} would leave the base-port scheme (at most {BROKERS_MAX} brokers)")
            ports = self._scheme_ports(new_id)
        if self.state.get("netns"):
            try:
                self.network().add_broker(new_id)
            except NetnsError as e:
                raise ClusterError(f"cannot make a namespace for broker {new_id}: {e}") from None
            self.state["netns"] = self.net.to_dict()  # type: ignore[union-attr]
        else:
            self._check_ports_free(new_id, ports)
        b = self._write_broker_config(new_id, ports=ports, rack=rack or "")
        self.state["brokers"].append(b)
        self.count = len(self.state["brokers"])
        self._save()
        self._spawn(b)
        self._save()
        self.wait_ready(timeout_s, [new_id])
        return b

    def _check_ports_free(self, broker_id: int, ports: tuple[int, int, int]) -> None:
        taken = {self.state["zookeeper"].get("port"): "ZooKeeper"}
        for b in self.state["brokers"]:
            for kind in ("port", "inter_broker_port", "admin_port"):
                taken[b[kind]] = f"broker {b['id']}'s {kind.replace('_', '-')}"
        for port, kind in zip(ports, ("client port", "inter-broker port", "admin port")):
            if port in taken:
                raise ClusterError(f"the {kind} {port} of broker {broker_id} is already {taken[port]}")
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    raise ClusterError(f"the {kind} {port} of broker {broker_id} is in use by another process") from None

    # -- status -------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        self._reload()
        try:
            registered, controller = self._zk_view()
            zk_ok = True
        except Exception:  # noqa: BLE001
            registered, controller, zk_ok = set(), None, False
        brokers = []
        for b in self.state["brokers"]:
            brokers.append({
                "id": b["id"], "pid": b["pid"], "host": b["host"], "port": b["port"],
                "inter_broker_port": b["inter_broker_port"], "admin_port": b["admin_port"], "rack": b["rack"],
                "log_dirs": b["log_dirs"], "alive": self._broker_whose(b) == ident.OURS, "registered": b["id"] in registered,
                "controller": controller == b["id"], "log": b["log"], "small_log_dir": b.get("small_log_dir"),
            })
        zk = self.state["zookeeper"]
        out = {
            "bootstrap": ",".join(f"{b['host']}:{b['port']}" for b in self.state["brokers"]),
            "zookeeper": {"connect": zk["connect"], "pid": zk["pid"], "alive": zk_ok},
            "controller": controller, "brokers": brokers, "dir": str(self.dir),
        }
        if self.state.get("zk_digest_file"):  # issue 15: --zk-acl
            out["zookeeper"]["digest_file"] = self.state["zk_digest_file"]
        if self.state.get("inter_broker_secret_file"):
            out["inter_broker_secret_file"] = self.state["inter_broker_secret_file"]
        if self.state.get("secure"):
            out["client_config"] = self.state["secure"]["client_config"]
        if self.state.get("netns"):
            net = NetnsLayout.from_dict(self.state["netns"])
            for b in brokers:
                m = net.member(str(b["id"]))
                b["namespace"], b["address"] = m.namespace, m.address
            if "members" in zk:
                out["zookeeper"]["members"] = [
                    {**m, "namespace": net.member(m["name"]).namespace, "alive": self._zk_whose(m["name"], m) == ident.OURS}
                    for m in zk["members"]]
            else:
                out["zookeeper"].update(namespace=net.member("zk").namespace, address=net.member("zk").address)
            out["netns"] = {"prefix": net.prefix, "subnet": net.subnet, "bridge": net.bridge,
                            "host_address": net.host_address}
        return out

    # -- whose PIDs (kafkalite.testing.process_identity) ---------------------------------
    @staticmethod
    def _looks_like_broker(b: dict[str, Any]) -> ident.LooksOurs:
        """For records without an identity: the broker entry point with this broker's config."""
        config = b["config"]
        return lambda argv: "kafkalite.cli.main" in argv and "broker" in argv and config in argv

    def _looks_like_zookeeper(self, argv: list[str]) -> bool:
        """For records without an identity: java QuorumPeerMain with a zoo.cfg of this cluster."""
        return zkmod.MAIN_CLASS in argv and any(a.startswith(f"{self.dir}{os.sep}") for a in argv)

    def _broker_whose(self, b: dict[str, Any]) -> str:
        state = ident.whose(b.get("pid"), b.get("identity"), self._looks_like_broker(b))
        if state == ident.OTHER:
            self._note_other(f"broker {b['id']}", b["pid"])
        return state

    def _zk_whose(self, label: str, entry: dict[str, Any]) -> str:
        state = ident.whose(entry.get("pid"), entry.get("identity"), self._looks_like_zookeeper)
        if state == ident.OTHER:
            self._note_other(label, entry["pid"])
        return state

    def _note_other(self, what: str, pid: int) -> None:
        note = f"{what}: pid {pid} is another process now ({ident.describe(pid)}); taken as exited, not signalled"
        if note not in self.notes:
            self.notes.append(note)

    def _signal_broker(self, b: dict[str, Any], signum: int) -> bool:
        return ident.signal_if_ours(b.get("pid"), b.get("identity"), self._looks_like_broker(b), signum)

    # -- process control ----------------------------------------------------------------
    def broker(self, broker_id: int) -> dict[str, Any]:
        self._reload()
        for b in self.state["brokers"]:
            if b["id"] == broker_id:
                return b
        raise ClusterError(f"no broker {broker_id} in this cluster (ids 1..{len(self.state['brokers'])})")

    def kill(self, broker_id: int, sig: str = "KILL") -> None:
        b = self.broker(broker_id)
        signum = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP, "CONT": signal.SIGCONT}.get(sig.upper())
        if signum is None:
            raise ClusterError(f"unknown signal {sig!r}; use KILL, TERM, STOP or CONT")
        whose = self._broker_whose(b)
        if whose != ident.OURS or not self._signal_broker(b, signum):
            other = f" (pid {b['pid']} is another process now: {ident.describe(b['pid'])}; not signalled)" if whose == ident.OTHER else ""
            raise ClusterError(f"broker {broker_id} is not running{other}")
        if signum == signal.SIGKILL:
            ident.wait_not_ours(b["pid"], b.get("identity"), self._looks_like_broker(b), STOP_TIMEOUT_S)

    def set_log_dirs(self, broker_id: int, log_dirs: list[str]) -> None:
        """Give a stopped broker these log dirs (`log.dirs`) from its next start (JBOD tests:
        a second dir on a small filesystem)."""
        b = self.broker(broker_id)
        if self._broker_whose(b) == ident.OURS:
            raise ClusterError(f"broker {broker_id} is running; stop it first")
        cfg = Path(b["config"])
        lines = [line for line in cfg.read_text().splitlines() if not line.startswith("log.dirs=")]
        cfg.write_text("\n".join([*lines, "log.dirs=" + ",".join(log_dirs)]) + "\n")
        b["log_dirs"] = list(log_dirs)
        self._save()

    def stop_broker(self, broker_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (controlled shutdown) and wait; SIGKILL if it does not exit in time."""
        b = self.broker(broker_id)
        if self._broker_whose(b) != ident.OURS:
            return
        looks_ours = self._looks_like_broker(b)
        self._signal_broker(b, signal.SIGCONT)
        self._signal_broker(b, signal.SIGTERM)
        if not ident.wait_not_ours(b["pid"], b.get("identity"), looks_ours, timeout_s):
            self._signal_broker(b, signal.SIGKILL)
            ident.wait_not_ours(b["pid"], b.get("identity"), looks_ours, 10)

    def start(self, broker_id: int, *, wait: bool = True, timeout_s: float = START_TIMEOUT_S) -> None:
        b = self.broker(broker_id)
        if self._broker_whose(b) == ident.OURS:
            raise ClusterError(f"broker {broker_id} is already running (pid {b['pid']})")
        self._spawn(b)
        self._save()
        if wait:
            self.wait_ready(timeout_s, [broker_id])

    def down(self, *, graceful: bool = True) -> None:
        """Stop every broker (SIGTERM: a controlled shutdown each, one after the other) and
        the cluster's own ZooKeeper. `graceful=False` kills the brokers at once instead
        (SIGKILL, all together), as a test's teardown does: what a test checks is over by
        then, the controlled shutdowns cost about a second per cluster, and a log cleaner
        worker dies with its broker (PR_SET_PDEATHSIG)."""
        self._reload()
        errors = []
        brokers = self.state.get("brokers", [])
        if graceful:
            for b in brokers:
                try:
                    self.stop_broker(b["id"], timeout_s=15)
                except Exception as e:  # noqa: BLE001
                    errors.append(f"broker {b['id']}: {e}")
        else:
            for b in brokers:
                if self._broker_whose(b) == ident.OURS:
                    self._signal_broker(b, signal.SIGKILL)  # (a stopped process dies of SIGKILL too)
            for b in brokers:
                if not ident.wait_not_ours(b.get("pid"), b.get("identity"), self._looks_like_broker(b), 10):
                    errors.append(f"broker {b['id']}: pid {b['pid']} still alive 10 s after SIGKILL")
        for label, entry in _zk_entries(self.state):
            if self._zk_whose(label, entry) != ident.OURS:
                continue
            pid, identity = entry["pid"], entry.get("identity")
            ident.signal_if_ours(pid, identity, self._looks_like_zookeeper, signal.SIGTERM)
            if not ident.wait_not_ours(pid, identity, self._looks_like_zookeeper, 15):
                ident.signal_if_ours(pid, identity, self._looks_like_zookeeper, signal.SIGKILL)
                ident.wait_not_ours(pid, identity, self._looks_like_zookeeper, 5)
        for server in [self.zk, *self.zk_servers]:
            if server is not None:
                server._reap()
        for b in self.state.get("brokers", []):
            b["pid"] = None
        for b in self.state.get("brokers", []):
            b.pop("identity", None)
        if self.state:
            self.state["zookeeper"]["pid"] = None
            self.state["zookeeper"].pop("identity", None)
            for m in self.state["zookeeper"].get("members", []):
                m["pid"] = None
                m.pop("identity", None)
            self._save()
        if self.state.get("netns"):
            errors += NetnsLayout.from_dict(self.state["netns"]).destroy()
        for mount in self.state.get("mounts", []):
            subprocess.run(["umount", "-l", mount], capture_output=True)  # lazily: nothing holds it any more
        if self.state.get("mounts"):
            self.state["mounts"] = []
            self._save()
        if errors:
            raise ClusterError("; ".join(errors))


def _zk_entries(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, entry with pid and identity) of each ZooKeeper process the state records."""
    zk = state.get("zookeeper") or {}
    if zk.get("members"):
        return [(f"ZooKeeper {m['name']}", m) for m in zk["members"]]
    return [("ZooKeeper", zk)] if zk.get("pid") else []


def _tail(path: str, size: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(f.tell() - size, 0))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
