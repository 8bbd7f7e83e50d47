"""`kafkalite topics create|list|describe|delete`: topic administration.

    kafkalite topics create NAME --partitions P --replication-factor R [--config k=v ...] [--stall-timeout S]
    kafkalite topics list [--json]
    kafkalite topics describe [NAME] [--json]
    kafkalite topics delete NAME
    kafkalite topics alter NAME --partitions N [--force] [--zookeeper HOST:PORT]

`describe` shows per partition the leader, leader epoch, replicas, ISR and offline replicas,
and flags UNDER-REPLICATED (ISR smaller than the replicas) and OFFLINE (no leader). With
--json it prints {"topics": [{"name", "partitions": [{"partition", "leader",
"leader_epoch", "replicas", "isr", "offline_replicas", "under_replicated", "offline"}]}]}.
`alter --partitions N` grows a topic with Kafka's CreatePartitions. Below the current
count it removes the highest-numbered partitions and their data (seed 000 PartitionRemove;
Kafka never shipped it): refused without --force, done through ZooKeeper
(/admin/partitions_remove, --zookeeper, default $KAFKALITE_ZOOKEEPER else 127.0.0.1:2181).
Keyed producers' hash space shrinks with it.
`create` returns once every partition has a leader; a topic whose creation outlasts the
request timeout (tens of thousands of partitions) is waited for as long as partitions keep
getting leaders (--stall-timeout without progress ends the wait with an error).
Exit codes: 0 ok, 1 the operation failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys

from kafkalite.cli.admin_client import (
    LEADERS_STALL_TIMEOUT_S,
    AdminClient,
    AdminError,
    NoBrokerError,
    TopicInfo,
    TopicNotReadyError,
    add_bootstrap_argument,
    console_for_tables,
    fail,
    int16_arg,
    int32_arg,
    resolve_bootstrap,
)
from kafkalite.cli.zk_session import add_zookeeper_argument, resolve_zookeeper, zookeeper


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("topics", help="create, list, describe and delete topics")
    tsub = p.add_subparsers(dest="topics_command", required=True)

    create = tsub.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int32_arg, required=True)
    create.add_argument("--replication-factor", type=int16_arg, required=True)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="topic config override (repeatable), e.g. min.insync.replicas=2")
    create.add_argument("--stall-timeout", type=float, default=LEADERS_STALL_TIMEOUT_S, metavar="SECONDS",
                        help="when creation outlasts the request, keep waiting for leaders until this long passes "
                             f"without one more partition getting a leader (default {LEADERS_STALL_TIMEOUT_S:.0f})")
    create.set_defaults(func=run_create)

    lst = tsub.add_parser("list", help="list topic names")
    lst.add_argument("--json", action="store_true", help="a JSON array of names")
    lst.set_defaults(func=run_list)

    describe = tsub.add_parser("describe", help="partitions: leader, epoch, replicas, ISR, health")
    describe.add_argument("name", nargs="?", help="one topic (default: all)")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    describe.set_defaults(func=run_describe)

    delete = tsub.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name")
    delete.set_defaults(func=run_delete)

    alter = tsub.add_parser("alter", help="add partitions (or remove the highest ones, with --force)")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int32_arg, required=True, help="the new partition count")
    alter.add_argument("--force", action="store_true", help="needed to remove partitions (their data is deleted)")
    add_zookeeper_argument(alter)  # removals go through ZooKeeper
    alter.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the new layout (default 30)")
    alter.set_defaults(func=run_alter)

    for leaf in (create, lst, describe, delete, alter):
        add_bootstrap_argument(leaf)


def parse_configs(items: list[str]) -> dict[str, str]:
    """['k=v', ...] -> {k: v}; ValueError naming the bad item. Keys and values are
    validated by the broker, which knows the allowed topic configs."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"bad --config {item!r}; expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def run_create(args: argparse.Namespace) -> int:
    try:
        configs = parse_configs(args.config)
    except ValueError as e:
        return fail("topics create", str(e), 2)
    if args.partitions < 1:
        return fail("topics create", f"--partitions must be at least 1, got {args.partitions}", 2)
    if args.replication_factor < 1:
        return fail("topics create", f"--replication-factor must be at least 1, got {args.replication_factor}", 2)
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            try:
                admin.create_topic(args.name, args.partitions, args.replication_factor, configs)
            except (TopicNotReadyError, NoBrokerError) as e:
                # A big topic can take longer than the request timeout (or keep the broker
                # too busy to answer in time): it is created, or being created; wait for
                # its leaders as long as their number grows.
                if isinstance(e, NoBrokerError) and "timed out" not in str(e):
                    raise
                print(f"topic {args.name}: waiting for every partition to have a leader ({e})", file=sys.stderr)
                admin.wait_for_leaders(args.name, args.partitions, stall_timeout_s=args.stall_timeout)
    except AdminError as e:
        return fail("topics create", str(e))
    print(f"created topic {args.name} ({args.partitions} partitions, replication factor {args.replication_factor})")
    return 0


def run_list(args: argparse.Namespace) -> int:
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            names = list(admin.metadata().topics)
    except AdminError as e:
        return fail("topics list", str(e))
    if args.json:
        print(json.dumps(names))
    else:
        for name in names:
            print(name)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            topics = list(admin.metadata([args.name] if args.name else None).topics.values())
    except AdminError as e:
        return fail("topics describe", str(e))
    if args.json:
        print(json.dumps({"topics": [t.to_json() for t in topics]}, indent=2))
    else:
        _print_table(topics)
    return 0


def _print_table(topics: list[TopicInfo]) -> None:
    from rich.table import Table
    from rich.text import Text

    console = console_for_tables()
    if not topics:
        console.print("no topics")
        return
    table = Table("topic", "partition", "leader", "epoch", "replicas", "isr", "offline", "status")
    for t in topics:
        for p in t.partitions:
            flags = []
            if p.offline:
                flags.append(Text("OFFLINE", style="red"))
            if p.under_replicated:
                flags.append(Text("UNDER-REPLICATED", style="yellow"))
            table.add_row(t.name, str(p.partition), str(p.leader) if p.leader >= 0 else Text("-1", style="red"),
                          str(p.leader_epoch), _ids(p.replicas), _ids(p.isr), _ids(p.offline_replicas) or "-",
                          Text(" ").join(flags) or "ok")
    console.print(table)


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids)


def run_delete(args: argparse.Namespace) -> int:
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            admin.delete_topic(args.name)
    except AdminError as e:
        return fail("topics delete", str(e))
    print(f"deleted topic {args.name}")
    return 0


def run_alter(args: argparse.Namespace) -> int:
    if args.partitions < 1:
        return fail("topics alter", f"--partitions must be at least 1, got {args.partitions}", 2)
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            topic = admin.metadata([args.name]).topics.get(args.name)
            if topic is None or not topic.partitions:
                return fail("topics alter", f"unknown topic {args.name!r}")
            current = len(topic.partitions)
            if args.partitions == current:
                print(f"topic {args.name} already has {current} partitions")
                return 0
            if args.partitions > current:
                admin.create_partitions(args.name, args.partitions)
                print(f"topic {args.name}: {current} -> {args.partitions} partitions")
                return 0
            if not args.force:
                return fail("topics alter", f"{args.name} has {current} partitions; removing partitions "
                                            f"{args.partitions}..{current - 1} deletes their data: add --force")
            _request_removal(args, [(args.name, p) for p in range(args.partitions, current)])
            if not _wait_for_count(admin, args.name, args.partitions, args.timeout):
                return fail("topics alter", f"removal requested; {args.name} does not show {args.partitions} partitions "
                                            f"after {args.timeout:.0f} s (is a controller running?)")
            print(f"topic {args.name}: {current} -> {args.partitions} partitions (removed {args.partitions}..{current - 1})")
            return 0
    except AdminError as e:
        return fail("topics alter", str(e))


def _request_removal(args: argparse.Namespace, partitions: list[tuple[str, int]]) -> None:
    from kafkalite.zk.errors import ZkError

    connect = resolve_zookeeper(args.zookeeper)
    with zookeeper(connect) as zk:
        try:
            zk.request_partition_changes("remove", {tp: [] for tp in partitions})
        except ZkError as e:
            raise AdminError(f"ZooKeeper at {connect}: {e}") from None


def _wait_for_count(admin: AdminClient, name: str, count: int, timeout_s: float) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topic = admin.metadata([name]).topics.get(name)
        if topic is not None and len(topic.partitions) == count:
            return True
        time.sleep(0.2)
    return False
