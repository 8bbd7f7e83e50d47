"""`kafkalite groups reset-offsets`: move a consumer group's committed offsets, as Kafka's
kafka-consumer-groups.sh --reset-offsets does.

    kafkalite groups reset-offsets GROUP --topic T[:P,P...] [--topic ...]
              (--to-earliest | --to-latest | --to-offset N | --to-datetime ISO | --shift-by N)
              [--execute] [--json]

Every partition of each --topic (or only the listed ones) gets a new offset:
- --to-earliest: the log start offset; --to-latest: the log end offset (the high watermark,
  the end of what consumers can read);
- --to-offset N: N clamped to [log start, log end], as Kafka clamps it;
- --to-datetime ISO: the first offset whose record timestamp is at or after that time
  (ListOffsets by timestamp, Kafka's offsetsForTimes), the log end when no record is that
  recent. A time without a zone is local time, as in Kafka; 'Z' or '+02:00' may follow;
- --shift-by N: the committed offset plus N (N may be negative), clamped to [log start, log
  end]. As in Kafka, a partition without a committed offset cannot be shifted: the command
  fails naming it and nothing is committed.

Without --execute it is a dry run: the plan (partition, current committed offset, new offset)
is printed and nothing is committed. --execute commits the new offsets as a client outside
the group, which the coordinator accepts only while nobody consumes: the group must be Empty
(or not exist yet: Dead, and the commit creates it). With active members it fails; a dry run
then still prints the plan with a note.
--json prints {"group", "state", "executed", "partitions": [{"topic", "partition",
"current_offset" (null: none committed), "new_offset"}]}.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kafkalite.cli.admin_client import (
    AdminError,
    add_bootstrap_argument,
    console_for_tables,
    counted,
    fail,
    int64_arg,
    resolve_bootstrap,
)
from kafkalite.cli.group_admin import EARLIEST_TIMESTAMP, INACTIVE_STATES, LATEST_TIMESTAMP, NO_OFFSET, TP, GroupAdminClient

COMMAND = "groups reset-offsets"


def add_parser(gsub: argparse._SubParsersAction) -> None:
    r = gsub.add_parser("reset-offsets", help="plan (dry run) or commit new offsets for an inactive group")
    r.add_argument("group")
    r.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]",
                   help="a topic, or some of its partitions (repeatable)")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int64_arg, metavar="N", help="offset N, clamped to [log start, log end]")
    to.add_argument("--to-datetime", metavar="ISO", help="the first offset at or after this time, e.g. 2024-05-01T12:00:00Z")
    to.add_argument("--shift-by", type=int64_arg, metavar="N",
                    help="the committed offset plus N (negative: back), clamped to [log start, log end]")
    r.add_argument("--execute", action="store_true", help="commit the new offsets (default: dry run)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    add_bootstrap_argument(r)
    r.set_defaults(func=run_reset)


# -- argument parsing ----------------------------------------------------------------------

def parse_topic_spec(text: str) -> tuple[str, list[int] | None]:
    """'t' -> ('t', None): every partition; 't:0,2' -> ('t', [0, 2]). ValueError when bad."""
    topic, sep, rest = text.partition(":")
    topic = topic.strip()
    if not topic:
        raise ValueError(f"bad --topic {text!r}; expected TOPIC or TOPIC:P,P,...")
    if not sep:
        return topic, None
    items = [s.strip() for s in rest.split(",") if s.strip()]
    if not items or not all(s.isascii() and s.isdigit() for s in items):
        raise ValueError(f"bad --topic {text!r}; expected TOPIC or TOPIC:P,P,... with partition numbers")
    return topic, sorted({int(s) for s in items})


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 (a time without a zone is local time, as Kafka reads it) -> ms since the epoch."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"bad --to-datetime {text!r}; expected ISO 8601 such as 2024-05-01T12:00:00Z "
                         "or 2024-05-01T14:00:00.000+02:00") from None
    return int(when.timestamp() * 1000)  # naive: .timestamp() takes it as local time


# -- the plan ------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlannedOffset:
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition,
                "current_offset": self.current_offset, "new_offset": self.new_offset}


def clamp(offset: int, log_start: int, log_end: int) -> int:
    """Kafka's ConsumerGroupCommand.checkOffsetRange: below the log start goes to the log
    start, past the log end to the log end."""
    return min(max(offset, log_start), log_end)


def new_offsets(args: argparse.Namespace, admin: GroupAdminClient, tps: list[TP], timestamp_ms: int | None,
                committed: dict[TP, int]) -> dict[TP, int]:
    """The new offset of each partition, by the --to-* (or --shift-by) option given;
    `committed`: the group's committed offsets."""
    if args.shift_by is not None:  # checked before asking the leaders: Kafka refuses it too
        missing = [tp for tp in tps if tp not in committed]
        if missing:
            t, p = missing[0]
            more = f" (and {counted(len(missing) - 1, 'other partition')})" if len(missing) > 1 else ""
            raise AdminError(f"cannot shift the offset of {t}-{p}{more}: group {args.group!r} has no committed offset there; "
                             "give it one with --to-earliest, --to-latest, --to-offset or --to-datetime")
    if args.to_earliest:
        return admin.list_offsets(tps, EARLIEST_TIMESTAMP)
    log_end = admin.list_offsets(tps, LATEST_TIMESTAMP)
    if args.to_latest:
        return log_end
    if args.to_offset is not None:
        log_start = admin.list_offsets(tps, EARLIEST_TIMESTAMP)
        return {tp: clamp(args.to_offset, log_start[tp], log_end[tp]) for tp in tps}
    if args.shift_by is not None:
        log_start = admin.list_offsets(tps, EARLIEST_TIMESTAMP)
        return {tp: clamp(committed[tp] + args.shift_by, log_start[tp], log_end[tp]) for tp in tps}
    assert timestamp_ms is not None
    found = admin.list_offsets(tps, timestamp_ms)
    return {tp: log_end[tp] if found[tp] == NO_OFFSET else found[tp] for tp in tps}


def _partitions(admin: GroupAdminClient, specs: list[tuple[str, list[int] | None]]) -> list[TP]:
    """The partitions the --topic options name; AdminError for an unknown topic or partition."""
    known = admin.metadata().topics
    out: list[TP] = []
    for topic, wanted in specs:
        if topic not in known:
            raise AdminError(f"unknown topic {topic!r}")
        partitions = [p.partition for p in known[topic].partitions]
        for p in wanted or partitions:
            if p not in partitions:
                raise AdminError(f"topic {topic!r} has no partition {p} (partitions 0..{len(partitions) - 1})")
            out.append((topic, p))
    return sorted(set(out))


# -- the command ---------------------------------------------------------------------------

def run_reset(args: argparse.Namespace) -> int:
    try:
        specs = [parse_topic_spec(t) for t in args.topic]
        timestamp_ms = parse_datetime_ms(args.to_datetime) if args.to_datetime is not None else None
    except ValueError as e:
        return fail(COMMAND, str(e), 2)
    if args.to_offset is not None and args.to_offset < 0:
        return fail(COMMAND, f"--to-offset must be >= 0, got {args.to_offset}", 2)
    try:
        with GroupAdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            tps = _partitions(admin, specs)
            group = admin.describe_group(args.group)
            if args.execute and not group.inactive:
                return fail(COMMAND, f"consumer group {args.group!r} is {group.state} with "
                                     f"{counted(len(group.members), 'active member')}: offsets can be reset only while the group is inactive "
                                     "(Empty or Dead); stop its consumers first")
            committed = admin.committed_offsets(args.group)
            target = new_offsets(args, admin, tps, timestamp_ms, committed)
            plan = [PlannedOffset(t, p, committed.get((t, p)), target[(t, p)]) for t, p in tps]
            if args.execute:
                admin.commit_offsets(args.group, {(e.topic, e.partition): e.new_offset for e in plan})
    except AdminError as e:
        return fail(COMMAND, str(e))
    _print(args, group.state, len(group.members), plan)
    return 0


def _print(args: argparse.Namespace, state: str, members: int, plan: list[PlannedOffset]) -> None:
    if args.json:
        print(json.dumps({"group": args.group, "state": state, "executed": bool(args.execute),
                          "partitions": [e.to_json() for e in plan]}, indent=2))
        return
    from rich.table import Table

    console = console_for_tables()
    table = Table("topic", "partition", "current offset", "new offset", title=f"group {args.group}")
    for e in plan:
        table.add_row(e.topic, str(e.partition), "-" if e.current_offset is None else str(e.current_offset), str(e.new_offset))
    console.print(table)
    if args.execute:
        console.print(f"committed the new offsets of {counted(len(plan), 'partition')} for group {args.group}")
        return
    console.print("dry run: nothing committed (add --execute to commit these offsets)")
    if state not in INACTIVE_STATES:
        console.print(f"note: group {args.group} is {state} with {counted(members, 'active member')}; --execute is refused until it is Empty")
