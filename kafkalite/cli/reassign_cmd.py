"""`kafkalite reassign generate|execute|status|cancel`: move partition replicas between
brokers (Kafka 2.x's kafka-reassign-partitions, over the same ZooKeeper znode).

    kafkalite reassign generate --topics a,b --brokers 1,2,4 [--rebalance] [--json]
    kafkalite reassign execute --plan FILE [--throttle BYTES_PER_S]
    kafkalite reassign status [--json | --once] [--interval S] [--bootstrap B]
    kafkalite reassign cancel

Every subcommand takes --zookeeper (default $KAFKALITE_ZOOKEEPER, else 127.0.0.1:2181).

`generate` prints a plan for every partition of the topics on the given brokers only,
moving as few replicas as possible (kafkalite.core.placement.reassign_replicas): the plan
is Kafka's JSON, {"version": 1, "partitions": [{"topic", "partition", "replicas"}]},
listing the partitions that move. `--rebalance` also moves replicas onto under-loaded
brokers (a broker just added) until replica counts differ by at most one. `--json` prints
only the plan; otherwise a table of current -> proposed replicas comes first.

`execute` checks the plan against ZooKeeper (topics and partitions exist, every broker is
registered, replicas non-empty and distinct, no partition still moving: a cancelled move
that has not gone back yet), refuses while a reassignment is in progress, and writes
/admin/reassign_partitions; the controller does the rest. `--throttle` limits
the replication of the moving partitions to that many bytes/s (leader and follower).

`status` follows the moving partitions (kafkalite/cli/reassign_status.py); `cancel`
deletes /admin/reassign_partitions, and the controller moves the partitions still in
progress back to their original replicas.

Exit codes: 0 ok, 1 the operation failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json

from kafkalite.cli import reassign_status
from kafkalite.cli.admin_client import AdminError, add_bootstrap_argument, console_for_tables, fail
from kafkalite.cli.zk_session import add_zookeeper_argument, resolve_zookeeper, zookeeper
from kafkalite.core.codes import CoreError
from kafkalite.core.placement import reassign_replicas
from kafkalite.core.reassignment_plan import plan_problems
from kafkalite.zk import ZkAdapter, codec
from kafkalite.zk.codec import Reassignment
from kafkalite.zk.errors import ReassignmentInProgressError, ZkError, ZnodeDecodeError

PLAN_FILE_BYTES_MAX = 64 << 20


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reassign", help="move partition replicas between brokers")
    rsub = p.add_subparsers(dest="reassign_command", required=True)

    generate = rsub.add_parser("generate", help="plan moving topics' replicas onto the given brokers")
    generate.add_argument("--topics", required=True, metavar="T1,T2,...", help="topics whose partitions to place")
    generate.add_argument("--brokers", required=True, metavar="ID,ID,...", help="the brokers to place them on")
    generate.add_argument("--rebalance", action="store_true",
                          help="also move replicas to under-loaded brokers until replica counts differ by at most one")
    generate.add_argument("--json", action="store_true", help="print only the plan (Kafka's reassignment JSON)")
    generate.set_defaults(func=run_generate)

    execute = rsub.add_parser("execute", help="start the reassignment a plan file describes")
    execute.add_argument("--plan", required=True, metavar="FILE", help="plan JSON (from `reassign generate`)")
    execute.add_argument("--throttle", metavar="BYTES_PER_S", default=None,
                         help="replication throttle of the moving partitions, bytes/s (leader and follower)")
    execute.set_defaults(func=run_execute)

    status = rsub.add_parser("status", help="progress of the reassignment in progress")
    status.add_argument("--json", action="store_true",
                        help="print [{topic, partition, replicas, adding, removing, done}] once and exit")
    status.add_argument("--once", action="store_true", help="print the progress once and exit")
    status.add_argument("--interval", type=float, default=reassign_status.REFRESH_INTERVAL_S_DEFAULT, metavar="S",
                        help=f"seconds between refreshes (default {reassign_status.REFRESH_INTERVAL_S_DEFAULT:g})")
    add_bootstrap_argument(status)
    status.set_defaults(func=reassign_status.run_status)

    cancel = rsub.add_parser("cancel", help="stop the reassignment; unfinished partitions go back")
    cancel.set_defaults(func=run_cancel)

    for leaf in (generate, execute, status, cancel):
        add_zookeeper_argument(leaf)


# -- argument parsing ----------------------------------------------------------------------

def parse_topics(text: str) -> list[str]:
    """'a,b' -> ['a', 'b'] (order kept, repeats dropped); ValueError when empty."""
    topics = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not topics:
        raise ValueError(f"--topics {text!r} names no topic")
    return topics


def parse_broker_ids(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; ValueError naming a bad or repeated id."""
    ids: list[int] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if not item.isascii() or not item.isdigit():
            raise ValueError(f"bad broker id {item!r} in --brokers {text!r}")
        if int(item) in ids:
            raise ValueError(f"broker {item} is listed twice in --brokers {text!r}")
        ids.append(int(item))
    if not ids:
        raise ValueError(f"--brokers {text!r} names no broker")
    return ids


def parse_throttle(text: str | None) -> int | None:
    """Bytes/s as a positive integer, or None when not given."""
    if text is None:
        return None
    if not text.strip().isascii() or not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"--throttle must be a positive number of bytes per second, got {text!r}")
    return int(text)


def _replicas(ids) -> str:
    return ",".join(str(b) for b in ids)


# -- generate ------------------------------------------------------------------------------

def run_generate(args: argparse.Namespace) -> int:
    try:
        topics = parse_topics(args.topics)
        brokers = parse_broker_ids(args.brokers)
    except ValueError as e:
        return fail("reassign generate", str(e), 2)
    try:
        with zookeeper(resolve_zookeeper(args.zookeeper)) as zk:
            current, racks = _read_for_generate(zk, topics, brokers)
    except (AdminError, ZkError) as e:
        return fail("reassign generate", str(e))
    try:
        proposed = reassign_replicas(current, brokers, racks, rebalance=args.rebalance)
    except CoreError as e:
        return fail("reassign generate", str(e))
    plan = Reassignment({k: tuple(v) for k, v in proposed.items() if v != current[k]})
    plan_json = format_plan(plan)
    if args.json:
        print(plan_json)
        return 0
    _print_generate_table(current, proposed)
    moved = sum(len(set(current[k]) - set(v)) for k, v in proposed.items())
    rackless = [b for b in brokers if racks.get(b) is None]
    if rackless and len(rackless) < len(brokers):
        print(f"note: broker {_replicas(rackless)} has no rack, so this plan does not spread replicas over racks")
    if not plan.partitions:
        print(f"nothing to move: every partition of {', '.join(topics)} is on brokers {_replicas(brokers)} "
              "with its replicas spread over the racks")
        return 0
    print(f"{len(plan.partitions)} of {len(proposed)} partitions move ({moved} replicas). "
          "Save the plan below to a file and start it with `kafkalite reassign execute --plan FILE`:")
    print(plan_json)
    return 0


def format_plan(plan: Reassignment) -> str:
    """The codec's JSON, one partition per line (readable, diffable, still Kafka's JSON)."""
    value = json.loads(codec.encode_reassignment(plan))
    entries = ",\n".join(f"  {json.dumps(e)}" for e in value.pop("partitions"))
    head = json.dumps(value)[:-1]
    return f"{head}, \"partitions\": [\n{entries}\n]}}" if entries else f"{head}, \"partitions\": []}}"


def _read_for_generate(zk: ZkAdapter, topics: list[str], brokers: list[int]):
    """The topics' current replicas (the target of a move in progress) and every allowed
    broker's rack, from ZooKeeper; AdminError for an unknown topic or broker."""
    registered = {b: reg for b, (reg, _) in zk.get_brokers().items()}
    for b in brokers:
        if b not in registered:
            known = _replicas(sorted(registered)) or "none"
            raise AdminError(f"broker {b} is not registered (registered brokers: {known})")
    assignments = zk.get_topic_assignments(topics)
    for t in topics:
        if t not in assignments:
            raise AdminError(f"unknown topic {t!r}")
    current = {(t, p): assignment.target_replicas(p)
               for t, (assignment, _) in assignments.items() for p in assignment.partitions}
    return current, {b: registered[b].rack for b in brokers}


def _print_generate_table(current, proposed) -> None:
    from rich.table import Table

    console = console_for_tables()
    table = Table("topic", "partition", "current", "proposed", "moves")
    for (topic, partition), replicas in sorted(proposed.items()):
        before = current[(topic, partition)]
        gone = [b for b in before if b not in replicas]
        new = [b for b in replicas if b not in before]
        if gone or new:
            moves = ", ".join(f"{a}->{b}" for a, b in zip(gone, new))
        elif replicas != before:
            moves = "order only"
        else:
            moves = "-"
        table.add_row(topic, str(partition), _replicas(before), _replicas(replicas), moves)
    console.print(table)


# -- execute -------------------------------------------------------------------------------

def read_plan(path: str) -> Reassignment:
    """The plan file, decoded strictly; AdminError with one line saying what is wrong."""
    try:
        with open(path, "rb") as f:
            data = f.read(PLAN_FILE_BYTES_MAX + 1)
    except OSError as e:
        raise AdminError(f"cannot read plan file {path}: {e.strerror or e}") from None
    if len(data) > PLAN_FILE_BYTES_MAX:
        raise AdminError(f"plan file {path} is larger than {PLAN_FILE_BYTES_MAX >> 20} MiB")
    try:
        return codec.decode_reassignment(data, path)
    except ZnodeDecodeError as e:
        raise AdminError(f"bad plan file {path}: {e.reason}") from None


def _in_progress_message(existing: Reassignment | None) -> str:
    left = f" ({len(existing.partitions)} partitions left)" if existing is not None else ""
    return (f"a reassignment is already in progress{left}; follow it with `kafkalite reassign status` "
            "or stop it with `kafkalite reassign cancel`")


def run_execute(args: argparse.Namespace) -> int:
    try:
        throttle = parse_throttle(args.throttle)
    except ValueError as e:
        return fail("reassign execute", str(e), 2)
    try:
        plan = read_plan(args.plan)
        with zookeeper(resolve_zookeeper(args.zookeeper)) as zk:
            existing = zk.get_reassignment()
            if existing is not None:
                return fail("reassign execute", _in_progress_message(existing[0]))
            topics = sorted({t for t, _ in plan.partitions})
            assignments = zk.get_topic_assignments(topics)
            problems = plan_problems(
                plan.partitions,
                {t: set(a.partitions) for t, (a, _) in assignments.items()},
                set(zk.get_brokers()),
                set(zk.get_topics_marked_for_deletion()),
                {(t, p): (a.original_replicas(p), a.target_replicas(p))
                 for t, (a, _) in assignments.items() for p in a.partitions if a.is_moving(p)},
            )
            if problems:
                more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
                return fail("reassign execute", f"plan refused: {problems[0]}{more}")
            started = Reassignment(plan.partitions, codec.reassignment_throttle(throttle) if throttle else plan.throttle)
            try:
                zk.create_reassignment(started)
            except ReassignmentInProgressError:
                return fail("reassign execute", _in_progress_message(None))
    except (AdminError, ZkError) as e:
        return fail("reassign execute", str(e))
    rate = started.throttle.get(codec.FOLLOWER_THROTTLED_RATE)
    print(f"started the reassignment of {len(started.partitions)} partitions "
          f"({'throttled to ' + format(rate, ',') + ' bytes/s' if rate else 'not throttled'}):")
    for (topic, partition), replicas in sorted(started.partitions.items()):
        assignment = assignments[topic][0]
        before = assignment.target_replicas(partition)
        note = "  (unchanged)" if list(replicas) == before else ""
        print(f"  {topic}-{partition}: {_replicas(before)} -> {_replicas(replicas)}{note}")
    print("follow it with `kafkalite reassign status`")
    return 0


# -- cancel --------------------------------------------------------------------------------

def run_cancel(args: argparse.Namespace) -> int:
    try:
        with zookeeper(resolve_zookeeper(args.zookeeper)) as zk:
            try:
                existing = zk.get_reassignment()
                left = f"{len(existing[0].partitions)} partitions were left" if existing is not None else ""
            except ZnodeDecodeError as e:  # written by something else: cancelling still deletes it
                left = f"its znode was unreadable: {e.reason}"
            deleted = zk.delete_reassignment()
    except (AdminError, ZkError) as e:
        return fail("reassign cancel", str(e))
    if not deleted:
        print("no reassignment in progress; nothing to cancel")
        return 0
    print(f"cancelled the reassignment ({left}): the controller moves the partitions still in progress "
          "back to their original replicas; finished ones stay moved")
    return 0
