"""`kafkalite cluster describe` and `kafkalite elect-leaders`.

    kafkalite cluster describe [--json]
    kafkalite elect-leaders [--topic T] [--partition P]

`cluster describe` shows the live brokers (id, host:port, rack), the controller and totals
(topics, partitions, under-replicated, offline), from one Metadata request. With --json:
{"cluster_id", "controller_id", "brokers": [{"id", "host", "port", "rack"}], "topics",
"partitions", "under_replicated_partitions", "offline_partitions"}.

`elect-leaders` asks the controller (Kafka's ElectLeaders API, preferred replica election)
to give leadership back to each partition's preferred replica, the first in its assignment:
every partition, one topic's, or one partition. It prints one line per partition whose
leader moved or could not move; "election not needed" partitions are listed only when
asked for by --topic/--partition. Exit 1 when any requested election failed.
"""

from __future__ import annotations

import argparse
import json

from kafkalite.cli.admin_client import (
    AdminClient,
    AdminError,
    add_bootstrap_argument,
    console_for_tables,
    error_name,
    fail,
    int32_arg,
    resolve_bootstrap,
)
from kafkalite.protocol.errors import ErrorCode


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="brokers, controller and partition health")
    csub = p.add_subparsers(dest="cluster_command", required=True)
    describe = csub.add_parser("describe", help="brokers, controller, totals")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    add_bootstrap_argument(describe)
    describe.set_defaults(func=run_describe)

    elect = sub.add_parser("elect-leaders", help="move leadership back to the preferred replicas")
    elect.add_argument("--topic", help="only this topic's partitions (default: all topics)")
    elect.add_argument("--partition", type=int32_arg, help="only this partition (needs --topic)")
    add_bootstrap_argument(elect)
    elect.set_defaults(func=run_elect_leaders)


def run_describe(args: argparse.Namespace) -> int:
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            meta = admin.metadata()
    except AdminError as e:
        return fail("cluster describe", str(e))
    partitions = [p for t in meta.topics.values() for p in t.partitions]
    summary = {
        "cluster_id": meta.cluster_id,
        "controller_id": meta.controller_id,
        "brokers": [{"id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in meta.brokers],
        "topics": len(meta.topics),
        "partitions": len(partitions),
        "under_replicated_partitions": sum(1 for p in partitions if p.under_replicated),
        "offline_partitions": sum(1 for p in partitions if p.offline),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    from rich.table import Table
    from rich.text import Text

    console = console_for_tables()
    table = Table("id", "address", "rack", "controller", title=f"cluster {meta.cluster_id or '-'}")
    for b in meta.brokers:
        table.add_row(str(b.id), f"{b.host}:{b.port}", b.rack or "-", "*" if b.id == meta.controller_id else "")
    console.print(table)
    under, offline = summary["under_replicated_partitions"], summary["offline_partitions"]
    console.print(Text.assemble(
        f"controller: {meta.controller_id if meta.controller_id >= 0 else 'none'}   "
        f"topics: {summary['topics']}   partitions: {summary['partitions']}   under-replicated: ",
        (str(under), "yellow" if under else ""), "   offline: ", (str(offline), "red" if offline else "")))
    return 0


def run_elect_leaders(args: argparse.Namespace) -> int:
    if args.partition is not None and not args.topic:
        return fail("elect-leaders", "--partition needs --topic", 2)
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            requested = None
            if args.topic:
                topic = admin.metadata([args.topic]).topics[args.topic]
                known = [p.partition for p in topic.partitions]
                if args.partition is not None and args.partition not in known:
                    return fail("elect-leaders", f"topic {args.topic!r} has no partition {args.partition}")
                wanted = [args.partition] if args.partition is not None else known
                requested = [(args.topic, p) for p in wanted]
            results = admin.elect_preferred_leaders(requested)
    except AdminError as e:
        return fail("elect-leaders", str(e))
    failed = 0
    elected = 0
    for topic, p, code, message in results:
        if code == ErrorCode.NONE:
            elected += 1
            print(f"{topic}-{p}: leader moved to the preferred replica")
        elif code == ErrorCode.ELECTION_NOT_NEEDED:
            if requested is not None:
                print(f"{topic}-{p}: election not needed (the preferred replica leads)")
        else:
            failed += 1
            print(f"{topic}-{p}: failed: {error_name(code)}{': ' + message if message else ''}")
    if failed:
        return fail("elect-leaders", f"{failed} of {len(results)} elections failed")
    if requested is None and not elected:
        print("every partition is led by its preferred replica")
    return 0
