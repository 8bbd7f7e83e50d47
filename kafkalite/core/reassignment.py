"""Replica reassignment decisions (seed 000 section F, with Kafka 2.x/KIP-455 semantics).

Everything here decides; the core controller performs the writes. With AR the replicas a
partition had before the move and RAR the reassigned ones (the target):

1. the topic znode gets AR+RAR as the replica set, with `adding` = RAR - AR and
   `removing` = AR - RAR (KIP-455's fields: the move is recoverable from the topic znode
   and the admin znode after a controller failover, and cancellable, since AR = replicas -
   adding). AR comes first and keeps its order (so a cancel restores the preferred
   replica); RAR's order is the admin entry's, which the move ends with. Kafka writes RAR
   first and loses AR's order on a cancel;
2. the leader epoch is bumped and LeaderAndIsr goes to every replica, so the new ones
   start fetching and the leader tracks them;
3. once RAR ⊆ ISR: a leader from RAR if the current one is leaving, the ISR shrunk to RAR,
   leader epoch + 1 (`completion`);
4. StopReplica(delete) to AR - RAR, the topic znode gets RAR, the admin entry goes.

A cancelled move (its admin entry gone while the topic znode still says adding/removing)
goes back: a leader from AR, the ISR shrunk to AR (`reversion`), StopReplica(delete) to
the adding replicas, the topic znode gets AR.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kafkalite.core.election import PartitionState
from kafkalite.core.replica_state import NO_LEADER


@dataclass(frozen=True)
class Move:
    """A partition's replica set during a move (the topic znode's view)."""

    replicas: tuple[int, ...]  # AR + RAR, target first
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    def __post_init__(self) -> None:
        assert len(set(self.replicas)) == len(self.replicas), f"duplicate replicas {self.replicas}"
        assert set(self.adding) <= set(self.replicas) and set(self.removing) <= set(self.replicas)
        assert not set(self.adding) & set(self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)


def invalid_target(target: Sequence[int], registered: Iterable[int]) -> str | None:
    """Why a reassignment target is refused (Kafka's controller refuses the same), or None."""
    if not target:
        return "an empty replica list"
    if len(set(target)) != len(target):
        return f"duplicate replicas {list(target)}"
    missing = sorted(set(target) - set(registered))
    if missing:
        return f"brokers {missing} are not registered"
    return None


def start(current: Sequence[int], target: Sequence[int]) -> Move:
    """The replica set written when a move starts: AR, then the rest of RAR (RAR itself
    when it only reorders AR: nothing moves, the order is written at once)."""
    if set(current) == set(target):
        return Move(tuple(target), (), ())
    replicas = tuple(current) + tuple(r for r in target if r not in current)
    return Move(replicas, tuple(r for r in target if r not in current), tuple(r for r in current if r not in target))


def _leader_from(state: PartitionState, candidates: Sequence[int], eligible: set[int]) -> int:
    if state.leader in candidates and state.leader in eligible:
        return state.leader
    for r in candidates:
        if r in state.isr and r in eligible:
            return r
    return NO_LEADER


def completion(state: PartitionState, move: Move, eligible: Iterable[int],
               target: Sequence[int] | None = None) -> PartitionState | None:
    """Step 3, when it can happen: every target replica is in the ISR and one of them can
    lead (live, not shutting down; the first in RAR's order, `target`, if the current
    leader is leaving). The returned state has the leader epoch bumped and its version
    unchanged (the caller writes it conditionally on `state.version`)."""
    eligible_set = set(eligible)
    target = tuple(target) if target is not None else move.target
    assert set(target) == set(move.target), f"RAR {target} is not the move's {move.target}"
    if not set(target) <= set(state.isr):
        return None
    leader = _leader_from(state, target, eligible_set)
    if leader == NO_LEADER:
        return None
    isr = tuple(r for r in state.isr if r in target)
    assert leader in isr and set(isr) == set(target)
    return PartitionState(leader, state.leader_epoch + 1, isr, state.version, state.controller_epoch)


def reversion(state: PartitionState, move: Move, eligible: Iterable[int]) -> PartitionState | None:
    """A cancelled move: back to AR. The leader stays if it is an original replica, else
    the first original one that is in the ISR and eligible; None when none can lead now
    (the revert waits for one). A partition without a leader stays without one, with its
    ISR cut to AR (never below one member)."""
    eligible_set = set(eligible)
    original = move.original
    if state.leader == NO_LEADER:
        isr = tuple(r for r in state.isr if r in original) or tuple(state.isr)
        if set(isr) - set(original):
            return None
        return PartitionState(NO_LEADER, state.leader_epoch + 1, isr, state.version, state.controller_epoch)
    leader = _leader_from(state, original, eligible_set)
    if leader == NO_LEADER:
        return None
    isr = tuple(r for r in state.isr if r in original)
    assert leader in isr
    return PartitionState(leader, state.leader_epoch + 1, isr, state.version, state.controller_epoch)
