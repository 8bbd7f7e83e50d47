"""`kafkalite groups list|describe|reset-offsets|delete`: consumer groups, as Kafka's
kafka-consumer-groups.sh shows and changes them.

    kafkalite groups list [--json]
    kafkalite groups describe GROUP [--json]
    kafkalite groups reset-offsets GROUP --topic T ... (see kafkalite/cli/groups_reset.py)
    kafkalite groups delete GROUP

`list` asks every broker for the groups it coordinates (ListGroups), then each group's
state (DescribeGroups). --json: [{"group", "state", "protocol_type", "members"}].

`describe` shows the group's state, protocol type and assignor (known while Stable), its
members (member id, group.instance.id, client id, host, assigned partitions decoded from the
consumer protocol's assignment) and, per partition the group has committed or is assigned,
the committed offset, the log end offset (the high watermark: what a consumer can reach) and
the lag between them. A group that does not exist is an error. --json: {"group", "state",
"protocol_type", "assignor", "coordinator", "members": [{"member_id", "group_instance_id",
"client_id", "host", "assignment": [{"topic", "partition"}] or null}], "offsets": [{"topic",
"partition", "committed_offset", "log_end_offset", "lag", "member_id"}]} with null for what
is unknown (no commit yet, a topic deleted since).

`delete` deletes a group and its committed offsets (DeleteGroups); the coordinator refuses a
group with active members (NON_EMPTY_GROUP).

Exit codes: 0 ok, 1 the operation failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from kafkalite.cli import groups_reset
from kafkalite.cli.admin_client import AdminError, add_bootstrap_argument, console_for_tables, counted, fail, resolve_bootstrap
from kafkalite.cli.group_admin import LATEST_TIMESTAMP, TP, GroupAdminClient, GroupDescription, GroupMember


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    gsub = p.add_subparsers(dest="groups_command", required=True)

    lst = gsub.add_parser("list", help="every group in the cluster, with its state")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    lst.set_defaults(func=run_list)

    describe = gsub.add_parser("describe", help="state, members and assignments, committed offsets and lag")
    describe.add_argument("group")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    describe.set_defaults(func=run_describe)

    delete = gsub.add_parser("delete", help="delete an empty group and its committed offsets")
    delete.add_argument("group")
    delete.set_defaults(func=run_delete)

    for leaf in (lst, describe, delete):
        add_bootstrap_argument(leaf)
    groups_reset.add_parser(gsub)


# -- list ----------------------------------------------------------------------------------

def run_list(args: argparse.Namespace) -> int:
    try:
        with GroupAdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            groups = admin.list_groups()
    except AdminError as e:
        return fail("groups list", str(e))
    if args.json:
        print(json.dumps([{"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type,
                           "members": len(g.members)} for g in groups], indent=2))
        return 0
    from rich.table import Table

    console = console_for_tables()
    if not groups:
        console.print("no groups")
        return 0
    table = Table("group", "state", "protocol type", "members")
    for g in groups:
        table.add_row(g.group_id, g.state, g.protocol_type or "-", str(len(g.members)))
    console.print(table)
    return 0


# -- describe ------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    member_id: str | None

    @property
    def lag(self) -> int | None:
        if self.committed_offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.committed_offset  # negative after a truncation, as Kafka shows it

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "committed_offset": self.committed_offset,
                "log_end_offset": self.log_end_offset, "lag": self.lag, "member_id": self.member_id}


def partition_lags(group: GroupDescription, committed: dict[TP, int], log_end: dict[TP, int]) -> list[PartitionLag]:
    """One row per partition the group has committed or is assigned, sorted."""
    assigned = group.assigned_to()
    return [PartitionLag(t, p, committed.get((t, p)), log_end.get((t, p)), assigned.get((t, p)))
            for t, p in sorted(set(committed) | set(assigned))]


def run_describe(args: argparse.Namespace) -> int:
    try:
        with GroupAdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            group = admin.describe_group(args.group)
            if not group.exists:
                return fail("groups describe", f"consumer group {args.group!r} does not exist")
            committed = admin.committed_offsets(args.group)
            topics = admin.metadata().topics
            tps = set(committed) | set(group.assigned_to())
            log_end = admin.list_offsets([tp for tp in tps if tp[0] in topics], LATEST_TIMESTAMP)
    except AdminError as e:
        return fail("groups describe", str(e))
    lags = partition_lags(group, committed, log_end)
    if args.json:
        print(json.dumps({"group": group.group_id, "state": group.state, "protocol_type": group.protocol_type,
                          "assignor": group.protocol or None, "coordinator": group.coordinator,
                          "members": [m.to_json() for m in group.members],
                          "offsets": [row.to_json() for row in lags]}, indent=2))
    else:
        _print_description(group, lags)
    return 0


def _print_description(group: GroupDescription, lags: list[PartitionLag]) -> None:
    from rich.table import Table

    console = console_for_tables()
    console.print(f"group {group.group_id}: state {group.state}, protocol type {group.protocol_type or '-'}, "
                  f"assignor {group.protocol or '-'}, coordinator broker {group.coordinator}, "
                  f"{counted(len(group.members), 'member')}")
    if group.members:
        members = Table("member id", "instance id", "client id", "host", "partitions", title="members")
        for m in group.members:
            members.add_row(m.member_id, m.group_instance_id or "-", m.client_id, m.host, _assignment_text(m))
        console.print(members)
    else:
        console.print(f"group {group.group_id} has no active members")
    if not lags:
        console.print("no committed offsets")
        return
    offsets = Table("topic", "partition", "current offset", "log end offset", "lag", "member id", title="offsets")
    for row in lags:
        offsets.add_row(row.topic, str(row.partition), _or_dash(row.committed_offset), _or_dash(row.log_end_offset),
                        _or_dash(row.lag), row.member_id or "-")
    console.print(offsets)


def _assignment_text(member: GroupMember) -> str:
    """'t:0,1 u:3'; '?' when the assignment is not the consumer protocol's."""
    if member.assignment is None:
        return "?"
    by_topic: dict[str, list[str]] = {}
    for topic, partition in member.assignment:
        by_topic.setdefault(topic, []).append(str(partition))
    return " ".join(f"{t}:{','.join(ps)}" for t, ps in by_topic.items()) or "-"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


# -- delete --------------------------------------------------------------------------------

def run_delete(args: argparse.Namespace) -> int:
    try:
        with GroupAdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            admin.delete_group(args.group)
    except AdminError as e:
        return fail("groups delete", str(e))
    print(f"deleted consumer group {args.group}")
    return 0
