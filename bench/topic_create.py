"""Topic creation at scale (issue 13 item 3): on a fresh 3-broker cluster with the shipped
defaults (as `bin/cluster up` starts it), `kafkalite topics create big --partitions N
--replication-factor R` as a user runs it, then:

  cli       the CLI's wall time (it returns once every partition has a leader, or fails);
  led       from the start until every broker's Metadata shows a leader for every partition;
  isr       until every partition's ISR is full (every follower has caught up);
  rss       each broker's resident memory before and after, and the difference per
            partition replica hosted (the memory cost of a partition);
  fds       each broker's open file descriptors after creation;
  idle CPU  each broker's CPU time over --idle-seconds (default 20) afterwards, with nothing
            produced: the cost of idle replication (incremental fetch sessions, issue 13).

    .venv/bin/python bench/topic_create.py --partitions 10000
    .venv/bin/python bench/topic_create.py --partitions 10000 --compare 3da5456

`--compare REF` first runs the same measurement with the brokers and the CLI of git
revision REF (exported with `git archive` into a temporary directory and put first on
PYTHONPATH), then with this tree, side by side in one run, so both see the same machine.
Bounded: every wait has a deadline (--deadline-s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafkalite.cli.admin_client import AdminClient
from kafkalite.testing.cluster import LocalCluster
from kafkalite.testing.ports import free_ports

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOPIC = "big"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def all_led(admin: AdminClient, n: int, want_isr: int | None = None) -> bool:
    try:
        md = admin.metadata([TOPIC])
    except Exception:  # noqa: BLE001 - unknown topic yet, broker busy
        return False
    t = md.topics.get(TOPIC)
    if t is None or len(t.partitions) != n:
        return False
    if want_isr is None:
        return all(p.leader >= 0 for p in t.partitions)
    return all(p.leader >= 0 and len(p.isr) == want_isr for p in t.partitions)


def wait_for(pred, deadline: float, what: str, interval_s: float = 0.05) -> float:
    while time.monotonic() < deadline:
        if pred():
            return time.monotonic()
        time.sleep(interval_s)
    raise TimeoutError(f"timed out waiting for {what}")


def measure(partitions: int, rf: int, workdir: str, deadline_s: float, src: str | None, idle_s: float) -> dict:
    env_path = os.environ.get("PYTHONPATH")
    if src:
        os.environ["PYTHONPATH"] = src + (os.pathsep + env_path if env_path else "")
    ports = free_ports(10)
    cluster = LocalCluster(workdir, brokers=3, zk_port=ports[-1], ports=[tuple(ports[i * 3: i * 3 + 3]) for i in range(3)],
                           inter_broker_secret=src is None)  # (older brokers refuse the key)
    out: dict = {}
    try:
        status = cluster.up()
        boot = status["bootstrap"]
        pids = {b["id"]: b["pid"] for b in status["brokers"]}
        time.sleep(1.0)  # let start-up settle before the baseline memory reading
        rss_before = {b: rss_kib(p) for b, p in pids.items()}
        cli = [sys.executable, "-m", "kafkalite.cli.main", "topics", "create", TOPIC, "--partitions", str(partitions),
               "--replication-factor", str(rf), "--bootstrap", boot]
        start = time.monotonic()
        proc = subprocess.run(cli, capture_output=True, text=True, timeout=deadline_s)
        out["cli_s"] = time.monotonic() - start
        out["cli_rc"] = proc.returncode
        out["cli_output"] = (proc.stdout + proc.stderr).strip()
        deadline = start + deadline_s
        admins = [AdminClient(f"{b['host']}:{b['port']}", request_timeout_ms=60000) for b in status["brokers"]]
        try:
            out["led_s"] = max(wait_for(lambda a=a: all_led(a, partitions), deadline, "leaders", 0.25) for a in admins) - start
            out["isr_s"] = max(wait_for(lambda a=a: all_led(a, partitions, rf), deadline, "full ISRs", 0.2)
                               for a in admins) - start
        finally:
            for a in admins:
                a.close()
        time.sleep(1.0)
        rss_after = {b: rss_kib(p) for b, p in pids.items()}
        hosted = partitions * rf / 3
        out["rss_before_mib"] = {b: v / 1024 for b, v in rss_before.items()}
        out["rss_after_mib"] = {b: v / 1024 for b, v in rss_after.items()}
        out["kib_per_replica"] = sum(rss_after[b] - rss_before[b] for b in pids) / 3 / hosted
        out["fds"] = {b: open_fds(p) for b, p in pids.items()}
        # Idle replication: nothing is produced; what each broker spends anyway (after a
        # short settling time: the controller's follow-up work, the first checkpoints).
        time.sleep(min(idle_s, 10.0))
        before = {b: cpu_s(p) for b, p in pids.items()}
        time.sleep(idle_s)
        out["idle_core"] = {b: (cpu_s(p) - before[b]) / idle_s for b, p in pids.items()}
    finally:
        cluster.down()
        if src:
            if env_path is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = env_path
    return out


def export_revision(ref: str, into: str) -> str:
    """`git archive REF kafkalite` unpacked under `into`; returns the directory to put on PYTHONPATH."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "kafkalite"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def row(label: str, r: dict) -> str:
    rss = " ".join(f"{v:.0f}" for v in r["rss_after_mib"].values())
    fds = " ".join(str(v) for v in r["fds"].values())
    idle = " ".join(f"{100 * v:.0f}%" for v in r["idle_core"].values())
    return (f"{label:>12} {r['cli_s']:>7.2f}s {'ok' if r['cli_rc'] == 0 else 'FAIL':>4} {r['led_s']:>7.2f}s {r['isr_s']:>7.2f}s "
            f"{r['kib_per_replica']:>8.1f} {rss:>15} {fds:>17} {idle:>16}")


def main() -> int:
    ap = argparse.ArgumentParser(description="time to create one big topic on a fresh 3-broker cluster")
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--replication-factor", type=int, default=3)
    ap.add_argument("--compare", metavar="REF", help="also measure git revision REF first, in the same run")
    ap.add_argument("--deadline-s", type=float, default=600.0)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--idle-seconds", type=float, default=20.0, help="then measure each broker's CPU over this long with nothing produced")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="kafkalite-topic-create-")
    os.makedirs(work, exist_ok=True)
    runs: list[tuple[str, str | None]] = []
    if args.compare:
        runs.append((args.compare[:12], export_revision(args.compare, tempfile.mkdtemp(prefix="kafkalite-ref-", dir=work))))
    runs.append(("this tree", None))
    print(f"one topic, {args.partitions} partitions, RF {args.replication_factor}, fresh 3-broker cluster, shipped defaults")
    print(f"{'code':>12} {'cli':>8} {'rc':>4} {'led':>8} {'isr':>8} {'KiB/rep':>8} {'RSS MiB/broker':>15} {'fds/broker':>17} {'idle CPU/broker':>16}")
    for i, (label, src) in enumerate(runs):
        r = measure(args.partitions, args.replication_factor, os.path.join(work, f"run{i}"), args.deadline_s, src, args.idle_seconds)
        print(row(label, r), flush=True)
        if r["cli_rc"] != 0:
            print(f"{'':>12} cli: {r['cli_output'][-300:]}", flush=True)
    print("cli: `kafkalite topics create` wall time; led: until every broker's Metadata shows a leader for every partition;")
    print("isr: until every ISR is full; KiB/rep: RSS growth per partition replica hosted (mean over brokers);")
    print("idle CPU: each broker's CPU time over --idle-seconds with nothing produced, as a share of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
