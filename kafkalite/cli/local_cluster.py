"""`bin/cluster`: start, inspect, signal and stop a local cluster of real processes.

    bin/cluster up [--brokers N] [--dir DIR] [--base-port P] [--zk-port P] [--racks r1,r2,...] [--override k=v]
    bin/cluster status [--dir DIR] [--json]
    bin/cluster kill ID [--signal KILL|TERM|STOP|CONT] [--dir DIR]
    bin/cluster start ID [--dir DIR]
    bin/cluster add-broker [--rack R] [--dir DIR]
    bin/cluster down [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from kafkalite.cli.admin_client import console_for_tables
from kafkalite.config import ConfigError, parse_overrides
from kafkalite.testing.cluster import ClusterError, LocalCluster


def _table(status: dict) -> None:
    """What runs where; printed whole when stdout is not a terminal (no "inter-b…" cells)."""
    from rich.table import Table

    console = console_for_tables()
    zk = status["zookeeper"]
    console.print(f"ZooKeeper {zk['connect']} (pid {zk['pid']}) {'up' if zk['alive'] else '[red]down[/red]'}")
    t = Table("id", "pid", "client", "inter-broker", "admin", "rack", "alive", "registered", "controller")
    for b in status["brokers"]:
        t.add_row(str(b["id"]), str(b["pid"]), f"{b['host']}:{b['port']}", str(b["inter_broker_port"]), str(b["admin_port"]),
                  b["rack"] or "-", "yes" if b["alive"] else "[red]no[/red]", "yes" if b["registered"] else "no",
                  "*" if b["controller"] else "")
    console.print(t)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bin/cluster", description="a local kafkalite cluster of real processes")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start ZooKeeper and N brokers")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--base-port", type=int, default=9092)
    up.add_argument("--zk-port", type=int, default=2181)
    up.add_argument("--racks", default="", help="comma-separated rack per broker")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="broker config for every broker")
    st = sub.add_parser("status", help="what runs where")
    st.add_argument("--json", action="store_true")
    kill = sub.add_parser("kill", help="signal one broker")
    kill.add_argument("id", type=int)
    kill.add_argument("--signal", default="KILL", choices=["KILL", "TERM", "STOP", "CONT"])
    start = sub.add_parser("start", help="start a stopped broker with its config and data")
    start.add_argument("id", type=int)
    add = sub.add_parser("add-broker", help="start one more broker (the next id) in the running cluster")
    add.add_argument("--rack", default="", help="its broker.rack")
    sub.add_parser("down", help="stop everything this cluster started")
    for p in (up, st, kill, start, add, sub.choices["down"]):
        p.add_argument("--dir", default=".cluster", help="cluster directory (default ./.cluster)")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "up":
            racks = [r.strip() for r in args.racks.split(",") if r.strip()]
            c = LocalCluster(args.dir, brokers=args.brokers, base_port=args.base_port, zk_port=args.zk_port,
                             racks=racks, overrides=parse_overrides(args.override))
            status = c.up()
            _table(status)
            boot = status["bootstrap"]
            print(f"\nbootstrap: {boot}\n")
            print("try:")
            print(f"  export KAFKALITE_BOOTSTRAP={boot}")
            print("  .venv/bin/kafkalite topics create demo --partitions 3 --replication-factor 3")
            print("  seq 1 10 | .venv/bin/kafkalite produce demo")
            print("  .venv/bin/kafkalite consume demo --from-beginning --max-messages 10")
            print("  .venv/bin/kafkalite consume demo --group readers --from-beginning --max-messages 10   # in a consumer group")
            print("  .venv/bin/kafkalite groups describe readers")
            if shutil.which("kcat"):
                print(f"  kcat -b {boot} -L")
            else:
                print(f"  kcat -b {boot} -L   # kcat is not installed: sudo apt-get install kcat (Debian/Ubuntu)")
            return 0
        c = LocalCluster.load(args.dir)
        if args.cmd == "status":
            status = c.status()
            if args.json:
                print(json.dumps(status, indent=2))
            else:
                _table(status)
            return 0
        if args.cmd == "kill":
            c.kill(args.id, args.signal)
            print(f"sent SIG{args.signal} to broker {args.id} (pid {c.broker(args.id)['pid']})")
            return 0
        if args.cmd == "start":
            c.start(args.id)
            print(f"broker {args.id} started (pid {c.broker(args.id)['pid']})")
            return 0
        if args.cmd == "add-broker":
            b = c.add_broker(rack=args.rack.strip() or None)
            print(f"broker {b['id']} started (pid {b['pid']}): client {b['host']}:{b['port']}, "
                  f"inter-broker {b['inter_broker_port']}, admin {b['admin_port']}, rack {b['rack'] or '-'}")
            racked = [x["id"] for x in c.state["brokers"] if x["rack"]]
            if racked and not b["rack"]:
                print(f"note: brokers {','.join(map(str, racked))} have racks and broker {b['id']} has none; "
                      "rack-aware placement needs a rack on every broker (--rack)")
            print(f"bootstrap: {c.status()['bootstrap']}")
            return 0
        if args.cmd == "down":
            c.down()
            print("cluster stopped")
            return 0
    except (ClusterError, ConfigError) as e:
        print(f"bin/cluster: {e}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
