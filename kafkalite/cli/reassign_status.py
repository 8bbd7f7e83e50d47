"""`kafkalite reassign status`: the partitions of the reassignment in progress.

    kafkalite reassign status [--json | --once] [--interval S] [--zookeeper Z] [--bootstrap B]

What moves comes from ZooKeeper: /admin/reassign_partitions (what is asked) and each topic
znode's KIP-455 adding/removing replicas (what the controller has started). A partition has
ended once it left the admin znode and has nothing adding or removing: done if its replicas
are then the target it was first seen moving to, else it did not move (the controller
refused the target, its log says why, or the move was cancelled and went back). The
live status exits 1 when a partition did not move.

`--json` prints [{"topic", "partition", "replicas", "adding", "removing", "done"}] once
(ZooKeeper only). Otherwise a progress bar per partition: the bytes its adding replicas
hold of the leader's log (`log_size_bytes` of each broker's admin HTTP /state), the rate
and ETA from the refreshes so far, and its leader and ISR (Metadata, from --bootstrap). It
refreshes every --interval seconds until every partition is done, or Ctrl-C; `--once`
prints it once.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafkalite.cli.admin_client import AdminClient, AdminError, ClusterMetadata, fail, resolve_bootstrap
from kafkalite.cli.zk_session import resolve_zookeeper, zookeeper
from kafkalite.core.reassignment_plan import PartitionKey, PartitionMove, catch_up_bytes, partition_moves
from kafkalite.zk import ZkAdapter, codec
from kafkalite.zk.codec import BrokerRegistration
from kafkalite.zk.errors import ZkError

REFRESH_INTERVAL_S_DEFAULT = 2.0
REFRESH_INTERVAL_S_MIN = 0.2
BROKER_STATE_TIMEOUT_S = 3.0
BAR_WIDTH = 24


@dataclass(frozen=True)
class Snapshot:
    """One look at ZooKeeper: the moves, the throttle asked for, the live brokers."""

    moves: list[PartitionMove]
    throttle: dict[str, int]
    in_progress: bool
    brokers: dict[int, BrokerRegistration]


def read_snapshot(zk: ZkAdapter, seen: Mapping[PartitionKey, Sequence[int]] | None = None) -> Snapshot:
    """`seen`: the partitions earlier looks followed, with the target each was first seen
    moving to (what an ended move is judged by: the admin entry is gone by then)."""
    existing = zk.get_reassignment()
    requested = existing[0].partitions if existing is not None else {}
    replicas: dict[PartitionKey, list[int]] = {}
    adding: dict[PartitionKey, list[int]] = {}
    removing: dict[PartitionKey, list[int]] = {}
    for topic, (assignment, _) in zk.get_topic_assignments(zk.get_topics()).items():
        for p, ids in assignment.partitions.items():
            replicas[(topic, p)] = ids
        for p, ids in assignment.adding_replicas.items():
            adding[(topic, p)] = ids
        for p, ids in assignment.removing_replicas.items():
            removing[(topic, p)] = ids
    moves = partition_moves(requested, replicas, adding, removing, seen)
    brokers = {b: reg for b, (reg, _) in zk.get_brokers().items()}
    return Snapshot(moves, existing[0].throttle if existing is not None else {}, existing is not None, brokers)


def format_moves_json(moves: list[PartitionMove]) -> str:
    """A JSON list, one partition per line."""
    if not moves:
        return "[]"
    return "[\n" + ",\n".join(f"  {json.dumps(m.to_json())}" for m in moves) + "\n]"


def run_status(args: argparse.Namespace) -> int:
    if args.json and args.once:
        return fail("reassign status", "--json already prints once; give one of --json and --once", 2)
    if args.interval < REFRESH_INTERVAL_S_MIN:
        return fail("reassign status", f"--interval must be at least {REFRESH_INTERVAL_S_MIN:g} s", 2)
    try:
        with zookeeper(resolve_zookeeper(args.zookeeper)) as zk:
            if args.json:
                print(format_moves_json(read_snapshot(zk).moves))
                return 0
            with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
                return _watch(zk, admin, args.interval, once=args.once)
    except (AdminError, ZkError) as e:
        return fail("reassign status", str(e))


def _watch(zk: ZkAdapter, admin: AdminClient, interval_s: float, *, once: bool) -> int:
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    from kafkalite.cli.admin_client import console_for_tables

    console = console_for_tables()
    snapshot = read_snapshot(zk)
    if not snapshot.moves:
        console.print("no reassignment in progress")
        return 0
    rate = snapshot.throttle.get(codec.FOLLOWER_THROTTLED_RATE)
    console.print(f"reassignment of {len(snapshot.moves)} partitions"
                  f"{f', throttled to {rate:,} bytes/s' if rate else ''}")
    seen = {(m.topic, m.partition): m.target for m in snapshot.moves}
    columns = (TextColumn("{task.description}"), BarColumn(bar_width=BAR_WIDTH), TaskProgressColumn(),
               TextColumn("{task.fields[copied]}"), TextColumn("ETA"), TimeRemainingColumn(compact=True),
               TextColumn("{task.fields[detail]}"))
    with Progress(*columns, console=console, auto_refresh=False) as progress:
        tasks: dict[PartitionKey, Any] = {}
        while True:
            metadata = admin.metadata()
            sizes = _log_sizes(snapshot.brokers, _brokers_to_ask(snapshot.moves, metadata))
            for move in snapshot.moves:
                key = (move.topic, move.partition)
                now = _progress_of(move, metadata, sizes)
                fields = {"total": now.total, "completed": now.completed, "copied": now.copied, "detail": now.detail}
                if key not in tasks:
                    description = f"{move.topic}-{move.partition} {_ids(move.original)} -> {_ids(move.target)}"
                    tasks[key] = progress.add_task(description, **fields)
                else:
                    progress.update(tasks[key], **fields)
            progress.refresh()
            if once or all(m.done or m.failed for m in snapshot.moves):
                break
            time.sleep(interval_s)
            snapshot = read_snapshot(zk, seen)
            for m in snapshot.moves:
                seen.setdefault((m.topic, m.partition), m.target)
    if failed := [m for m in snapshot.moves if m.failed]:
        named = ", ".join(f"{m.topic}-{m.partition} (on {_ids(m.replicas)}, not {_ids(m.target)})" for m in failed[:10])
        more = f" and {len(failed) - 10} more" if len(failed) > 10 else ""
        return fail("reassign status", f"{len(failed)} of {len(snapshot.moves)} partitions did not move: {named}{more}; "
                    "the controller refused the target (its log says why) or the move was cancelled")
    if all(m.done for m in snapshot.moves):
        console.print("reassignment complete")
    return 0


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(b) for b in ids)


def _brokers_to_ask(moves: list[PartitionMove], metadata: ClusterMetadata) -> set[int]:
    """Each unfinished move's leader and adding replicas."""
    ask: set[int] = set()
    for move in moves:
        if move.done or not move.adding:
            continue
        ask.update(move.adding)
        leader = _partition_meta(metadata, move)
        if leader is not None and leader.leader >= 0:
            ask.add(leader.leader)
    return ask


def _partition_meta(metadata: ClusterMetadata, move: PartitionMove):
    topic = metadata.topics.get(move.topic)
    if topic is None:
        return None
    return next((p for p in topic.partitions if p.partition == move.partition), None)


def _log_sizes(brokers: dict[int, BrokerRegistration], ask: set[int]) -> dict[int, dict[str, int]]:
    """broker -> {"topic-partition": log bytes} from its admin HTTP /state; brokers that
    are down or do not answer in time are left out (their replicas count as empty)."""
    sizes: dict[int, dict[str, int]] = {}
    for b in sorted(ask):
        reg = brokers.get(b)
        if reg is None:
            continue
        try:
            url = f"http://{reg.host}:{reg.admin_port}/state"
            with urllib.request.urlopen(url, timeout=BROKER_STATE_TIMEOUT_S) as response:
                state = json.loads(response.read())
        except (OSError, ValueError, urllib.error.URLError):
            continue
        sizes[b] = {name: entry["log_size_bytes"] for name, entry in state.get("partitions", {}).items()
                    if isinstance(entry.get("log_size_bytes"), int)}
    return sizes


@dataclass(frozen=True)
class MoveProgress:
    """One refresh of one move, in the units of rich's progress bar: bytes (`total` None
    while unknown, which rich shows as a pulsing bar)."""

    completed: int
    total: int | None
    copied: str
    detail: str


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _progress_of(move: PartitionMove, metadata: ClusterMetadata, sizes: dict[int, dict[str, int]]) -> MoveProgress:
    meta = _partition_meta(metadata, move)
    isr = list(meta.isr) if meta is not None else []
    leader = meta.leader if meta is not None else -1
    where = f"leader {leader if leader >= 0 else 'none'}  ISR {_ids(isr) or '-'}"
    if move.done:
        return MoveProgress(1, 1, "", f"[green]done[/green]  {where}")
    if move.failed:
        return MoveProgress(0, 1, "", f"[red]not moved[/red] (refused or cancelled), on {_ids(move.replicas)}  {where}")
    if not move.adding:
        what = f"removing {_ids(move.removing)}" if move.removing else "waiting for the controller"
        return MoveProgress(1, 1, "", f"{what}  {where}")
    name = f"{move.topic}-{move.partition}"
    counted = catch_up_bytes(sizes.get(leader, {}).get(name) if leader >= 0 else None,
                             {b: sizes.get(b, {}).get(name) for b in move.adding})
    if all(b in isr for b in move.adding):
        # caught up: the log sizes may differ by what is in flight, the ISR is the truth
        total = counted[1] if counted is not None else 0
        removing = f", removing {_ids(move.removing)}" if move.removing else ""
        return MoveProgress(max(total, 1), max(total, 1), _bytes(total), f"{_ids(move.adding)} in ISR{removing}  {where}")
    if counted is None:
        return MoveProgress(0, None, "?", f"copying to {_ids(move.adding)}  {where}")
    caught, total = counted
    if total == 0:  # an empty log: copied once every new replica has created it
        created = int(all(sizes.get(b, {}).get(name) is not None for b in move.adding))
        return MoveProgress(created, 1, "0 B / 0 B", f"copying to {_ids(move.adding)}  {where}")
    return MoveProgress(caught, total, f"{_bytes(caught)} / {_bytes(total)}", f"copying to {_ids(move.adding)}  {where}")
