"""The admin side of a partition reassignment, without I/O (DESIGN 6 "Reassignment", seed
000 section F, KIP-455's adding/removing replicas): whether a plan may be started, what
each partition of a reassignment is doing, and how far its new replicas have copied.

`kafkalite reassign` reads ZooKeeper and the brokers and hands the values here; the
controller's side of the move is elsewhere.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PartitionKey = tuple[str, int]


def plan_problems(
    plan: Mapping[PartitionKey, Sequence[int]],
    partitions_by_topic: Mapping[str, Collection[int]],
    registered_brokers: Collection[int],
    topics_being_deleted: Collection[str] = (),
    still_moving: Mapping[PartitionKey, tuple[Sequence[int], Sequence[int]]] | None = None,
) -> list[str]:
    """Why `plan` cannot start, one sentence per problem, in partition order; empty when
    it can. Every partition must exist (and its topic not be on its way out), and its new
    replicas must be a non-empty list of distinct brokers registered now: a replica on a
    broker that is not running would never catch up, and the move would never end.

    Nor may a partition still be moving (`still_moving`: (original, target) replicas, from
    its topic znode's adding/removing replicas) with no reassignment in progress: a
    cancelled move that could not go back yet. The controller refuses a new target for
    it; before it did, it took the new entry for the cancelled move and ended there."""
    problems: list[str] = []
    if not plan:
        return ["the plan lists no partitions"]
    registered = set(registered_brokers)
    known = ",".join(str(b) for b in sorted(registered)) or "none"
    for (topic, partition), replicas in sorted(plan.items()):
        name = f"{topic}-{partition}"
        if topic not in partitions_by_topic:
            problems.append(f"{name}: unknown topic {topic!r}")
            continue
        if topic in topics_being_deleted:
            problems.append(f"{name}: topic {topic!r} is being deleted")
            continue
        if partition not in partitions_by_topic[topic]:
            problems.append(f"{name}: topic {topic!r} has no partition {partition}")
            continue
        if still_moving and (topic, partition) in still_moving:
            original, target = still_moving[(topic, partition)]
            ids = ",".join(str(b) for b in original)
            problems.append(f"{name}: its previous move ({ids} -> {','.join(str(b) for b in target)}) has not ended: "
                            f"a cancelled move goes back to {ids} first; plan it again once `kafkalite reassign status` "
                            "no longer lists it")
            continue
        if not replicas:
            problems.append(f"{name}: no replicas (the replication factor must be at least 1)")
            continue
        if len(set(replicas)) != len(replicas):
            problems.append(f"{name}: replicas {list(replicas)} name a broker twice")
            continue
        missing = [b for b in replicas if b not in registered]
        if missing:
            which = ", ".join(str(b) for b in missing)
            verb = "is" if len(missing) == 1 else "are"
            problems.append(f"{name}: broker {which} {verb} not registered (registered brokers: {known})")
    return problems


@dataclass(frozen=True)
class PartitionMove:
    """One partition of a reassignment as ZooKeeper shows it now. `replicas` is the whole
    assignment (while moving: the original replicas followed by the ones being added);
    `target` is where it goes, preferred leader first. Once it has left the admin znode
    and nothing moves, it is `done` if its replicas are the target, else `failed`: the
    controller refused the target, or the move was cancelled and went back."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    target: tuple[int, ...]
    done: bool
    failed: bool = False

    def __post_init__(self) -> None:
        assert not (self.done and self.failed)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas if b not in self.adding)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "replicas": list(self.replicas),
            "adding": list(self.adding),
            "removing": list(self.removing),
            "done": self.done,
        }


def partition_moves(
    requested: Mapping[PartitionKey, Sequence[int]],
    replicas: Mapping[PartitionKey, Sequence[int]],
    adding: Mapping[PartitionKey, Sequence[int]],
    removing: Mapping[PartitionKey, Sequence[int]],
    seen: Mapping[PartitionKey, Sequence[int]] | None = None,
) -> list[PartitionMove]:
    """Every partition that is listed in the reassignment (`requested`: the admin znode's
    target replicas), still has adding or removing replicas in its topic znode, or was
    `seen` moving by an earlier look (with the target that look found), in partition
    order.

    A partition the controller has not started yet has no adding/removing replicas in its
    topic znode: they are computed from the plan (target minus current, current minus
    target). The target is the admin entry's (a move ends in its order), else the one
    `seen`, else the topic znode's. A partition has ended once it has left the admin znode
    and has no adding or removing replicas left: done if its replicas are the target, else
    failed. Leaving the admin znode alone said done, also of moves the controller refused
    or that were cancelled and went back."""
    seen = seen or {}
    keys = set(requested) | {k for k, v in adding.items() if v} | {k for k, v in removing.items() if v} | set(seen)
    moves = []
    for key in sorted(keys):
        now = tuple(replicas.get(key, ()))
        started_adding = tuple(adding.get(key, ()))
        started_removing = tuple(removing.get(key, ()))
        moving = bool(started_adding or started_removing)
        if key in requested:
            target = tuple(requested[key])
        elif key in seen:
            target = tuple(seen[key])
        else:
            target = tuple(b for b in now if b not in started_removing)
        if moving or key not in requested:
            add, remove = started_adding, started_removing
        else:
            add = tuple(b for b in target if b not in now)
            remove = tuple(b for b in now if b not in target)
        ended = key not in requested and not moving
        moves.append(PartitionMove(key[0], key[1], now, add, remove, target, ended and now == target, ended and now != target))
    return moves


def catch_up_bytes(leader_log_bytes: int | None, adding_log_bytes: Mapping[int, int | None]) -> tuple[int, int] | None:
    """(bytes the adding replicas hold, bytes they must hold) summed over the adding
    replicas, each capped at the leader's log size: a new replica copies the leader's log.
    None while the leader's size is unknown. A replica whose size is unknown (its broker
    did not answer, or has not created the log yet) counts as holding nothing."""
    if leader_log_bytes is None or not adding_log_bytes:
        return None
    total = leader_log_bytes * len(adding_log_bytes)
    caught = sum(min(size or 0, leader_log_bytes) for size in adding_log_bytes.values())
    assert 0 <= caught <= total
    return caught, total
