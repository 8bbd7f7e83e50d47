"""`bin/cluster`: start, inspect, signal and stop a local cluster of real processes.

    bin/cluster up [--brokers N] [--dir DIR] [--base-port P] [--zk-port P] [--racks r1,r2,...] [--override k=v]
                   [--netns PREFIX [--zk-ensemble N]] [--small-log-dir SIZE]
    bin/cluster status [--dir DIR] [--json]
    bin/cluster kill ID [--signal KILL|TERM|STOP|CONT] [--dir DIR]
    bin/cluster start ID [--dir DIR]
    bin/cluster add-broker [--rack R] [--dir DIR]
    bin/cluster down [--dir DIR]

Network faults, for a cluster started with --netns (each member in its own network
namespace, kafkalite.testing.netns); members are broker ids and `zk`; `heal` undoes all:

    bin/cluster partition --isolate ID [--clients]     # ID cut from every other member
    bin/cluster partition --between 1,2 3              # group 1,2 cut from group 3, both ways
    bin/cluster partition --oneway 1 2                 # packets from 1 to 2 dropped
    bin/cluster netem ID [--delay 50ms] [--loss 5%]
    bin/cluster heal
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from kafkalite.cli.admin_client import console_for_tables
from kafkalite.config import ConfigError, parse_overrides
from kafkalite.testing.cluster import ClusterError, LocalCluster
from kafkalite.testing.netns import NetnsError


def _table(status: dict) -> None:
    """What runs where; printed whole when stdout is not a terminal (no "inter-b…" cells)."""
    from rich.table import Table
    from rich.text import Text

    console = console_for_tables()
    zk = status["zookeeper"]
    where = f" in namespace {zk['namespace']}" if zk.get("namespace") else (
        " (members " + ", ".join(f"{m['name']} in {m['namespace']}" for m in zk["members"]) + ")" if zk.get("members") else "")
    console.print(Text.assemble(f"ZooKeeper {zk['connect']}{where} (pid {zk['pid']}) ", ("up", "") if zk["alive"] else ("down", "red")))
    netns = "netns" in status
    t = Table("id", "pid", "client", "inter-broker", "admin", "rack", "alive", "registered", "controller",
              *(["namespace"] if netns else []))
    for b in status["brokers"]:
        t.add_row(str(b["id"]), str(b["pid"]), f"{b['host']}:{b['port']}", str(b["inter_broker_port"]), str(b["admin_port"]),
                  b["rack"] or "-", "yes" if b["alive"] else Text("no", style="red"), "yes" if b["registered"] else "no",
                  "*" if b["controller"] else "", *([b["namespace"]] if netns else []))
    console.print(t)
    if netns:
        n = status["netns"]
        console.print(f"network namespaces {n['prefix']}-*: subnet {n['subnet']} on bridge {n['bridge']} "
                      f"(this host is {n['host_address']})")


def _members(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _percent(text: str) -> float:
    value = float(text.rstrip("%"))
    return value / 100


def _millis(text: str) -> float:
    t = text.strip().lower()
    if t.endswith("ms"):
        return float(t[:-2])
    if t.endswith("s"):
        return float(t[:-1]) * 1000
    return float(t)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bin/cluster", description="a local kafkalite cluster of real processes")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start ZooKeeper and N brokers")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--base-port", type=int, default=9092)
    up.add_argument("--zk-port", type=int, default=2181)
    up.add_argument("--racks", default="", help="comma-separated rack per broker")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="broker config for every broker")
    up.add_argument("--netns", metavar="PREFIX", default=None,
                    help="run ZooKeeper and each broker in a network namespace of its own (PREFIX-zk, PREFIX-b1, ...), "
                         "joined by a bridge; needs root")
    up.add_argument("--small-log-dir", metavar="SIZE", default=None,
                    help="give each broker a second log dir on a tmpfs of SIZE (e.g. 256m), for disk faults "
                         "(bin/chaos --disk fills it); needs root")
    up.add_argument("--zk-ensemble", type=int, default=1, metavar="N",
                    help="with --netns: a ZooKeeper ensemble of N members (PREFIX-zk1, ...) instead of one")
    up.add_argument("--secure", action="store_true",
                    help="client listener SASL_SSL with SCRAM-SHA-512: a dev CA in DIR/tls, an `admin` user with a random "
                         "password, and DIR/client.properties (librdkafka keys) for clients and --command-config")
    up.add_argument("--zk-acl", action="store_true",
                    help="brokers authenticate to ZooKeeper with a digest identity made for this cluster and create the "
                         "cluster's znodes with ACLs (zookeeper.set.acl): only they and admin tools given "
                         "KAFKALITE_ZK_DIGEST_FILE may write them")
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
    part = sub.add_parser("partition", help="cut members of a --netns cluster apart (undone by heal)")
    how = part.add_mutually_exclusive_group(required=True)
    how.add_argument("--isolate", metavar="ID", help="cut broker ID (or zk) from every other member")
    how.add_argument("--between", nargs=2, metavar=("GROUP", "GROUP"), help="cut group A from group B, e.g. 1,2 3")
    how.add_argument("--oneway", nargs=2, metavar=("FROM", "TO"), help="drop packets from FROM to TO only")
    part.add_argument("--clients", action="store_true", help="with --isolate: cut the host's clients too")
    netem = sub.add_parser("netem", help="delay and/or lose packets of one member of a --netns cluster")
    netem.add_argument("id", help="broker id or zk")
    netem.add_argument("--delay", default="0ms", help="e.g. 50ms")
    netem.add_argument("--loss", default="0%", help="e.g. 5%%")
    sub.add_parser("heal", help="undo every partition and netem")
    for p in (up, st, kill, start, add, sub.choices["down"], part, netem, sub.choices["heal"]):
        p.add_argument("--dir", default=".cluster", help="cluster directory (default ./.cluster)")
    args = parser.parse_args(argv)
    c: LocalCluster | None = None
    try:
        if args.cmd == "up":
            racks = [r.strip() for r in args.racks.split(",") if r.strip()]
            c = LocalCluster(args.dir, brokers=args.brokers, base_port=args.base_port, zk_port=args.zk_port,
                             racks=racks, overrides=parse_overrides(args.override), netns=args.netns,
                             zk_ensemble=args.zk_ensemble, small_log_dir=args.small_log_dir, zk_acl=args.zk_acl,
                             secure=args.secure)
            status = c.up()
            _table(status)
            boot = status["bootstrap"]
            print(f"\nbootstrap: {boot}\n")
            if args.secure:
                conf = status["client_config"]
                print(f"client config (SASL_SSL, SCRAM-SHA-512, user admin): {conf}\n")
                print("try:")
                print(f"  export KAFKALITE_COMMAND_CONFIG={conf}")
                print("  .venv/bin/kafkalite topics create demo --partitions 3 --replication-factor 3")
                print("  seq 1 10 | .venv/bin/kafkalite produce demo")
                print("  .venv/bin/kafkalite consume demo --from-beginning --max-messages 10")
                print(f"  kcat -F {conf} -L")
                return 0
            print("try:")
            print(f"  export KAFKALITE_BOOTSTRAP={boot}")
            if status["zookeeper"].get("digest_file"):
                print(f"  export KAFKALITE_ZK_DIGEST_FILE={status['zookeeper']['digest_file']}   # for --zookeeper commands")
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
        if args.cmd == "partition":
            net = c.network()
            if args.clients and not args.isolate:
                print("bin/cluster: --clients goes with --isolate", file=sys.stderr)
                return 2
            if args.isolate:
                net.isolate(args.isolate, clients=args.clients)
                print(f"{args.isolate} is cut from every other member" + (" and from clients" if args.clients else
                                                                          " (clients on this host still reach it)"))
            elif args.between:
                net.between(_members(args.between[0]), _members(args.between[1]))
                print(f"{args.between[0]} and {args.between[1]} are cut from each other")
            else:
                net.oneway(*args.oneway)
                print(f"packets from {args.oneway[0]} to {args.oneway[1]} are dropped")
            return 0
        if args.cmd == "netem":
            try:
                delay, loss = _millis(args.delay), _percent(args.loss)
            except ValueError:
                print(f"bin/cluster: netem: cannot read --delay {args.delay!r} / --loss {args.loss!r} "
                      "(e.g. --delay 50ms --loss 5%)", file=sys.stderr)
                return 2
            print(f"{args.id}: " + c.network().netem(args.id, delay_ms=delay, loss=loss))
            return 0
        if args.cmd == "heal":
            c.network().heal()
            print("every partition and netem undone")
            return 0
    except NetnsError as e:
        print(f"bin/cluster: {e}", file=sys.stderr)
        return 1
    except (ClusterError, ConfigError) as e:
        print(f"bin/cluster: {e}", file=sys.stderr)
        return 1
    finally:
        for note in c.notes if c is not None else []:  # e.g. a recorded PID that is another process now
            print(f"bin/cluster: note: {note}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
