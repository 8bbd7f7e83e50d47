"""Invariant checkers for the simulator (tests/sim) and the unit tests.

Each `check_*` returns a list of violation messages (empty = fine) so a simulator can
report all of them with its seed; `assert_ok` turns a list into one AssertionError.
They mirror DESIGN section 7's guarantees:
- 2: below the HW every replica holds identical batches (`check_replicas_identical_below_hw`);
- 3: HW and consumer offsets only grow (`MonotonicTracker`);
- 4: at most one leader per partition per leader epoch (`check_single_leader_per_epoch`,
  `LeaderEpochTracker`); and the replica-state rules of DESIGN section 5
  (`check_partition_invariants`, `check_controller_state`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence

from kafkalite.core.replica_state import NO_LEADER, PartitionReplicaState


def assert_ok(violations: Sequence[str]) -> None:
    if violations:
        raise AssertionError("; ".join(violations))


def check_partition_invariants(
    state: PartitionReplicaState, leo: int | None = None
) -> list[str]:
    """DESIGN section 5 on one replica: leader in ISR and maximal ISR, ISR ⊆ replicas,
    ISR ⊆ maximal ISR, log_start <= HW (<= LEO when given), pending change coherent."""
    name = f"{state.topic}-{state.partition}@{state.local_broker_id}"
    out: list[str] = []
    isr, maximal, replicas = set(state.isr), set(state.maximal_isr), set(state.replicas)
    if not isr <= replicas:
        out.append(f"{name}: ISR {state.isr} not within replicas {state.replicas}")
    if not maximal <= replicas:
        out.append(f"{name}: maximal ISR {state.maximal_isr} not within replicas")
    if not isr <= maximal:
        out.append(f"{name}: ISR {state.isr} not within maximal ISR {state.maximal_isr}")
    if state.log_start_offset > state.hw:
        out.append(f"{name}: log start {state.log_start_offset} > HW {state.hw}")
    if leo is not None and state.hw > leo:
        out.append(f"{name}: HW {state.hw} > LEO {leo}")
    if state.is_leader and state.local_broker_id not in isr:
        out.append(f"{name}: leader not in its ISR {state.isr}")
    if state.is_leader and state.local_broker_id not in maximal:
        out.append(f"{name}: leader not in its maximal ISR {state.maximal_isr}")
    if not state.is_leader and state.pending is not None:
        out.append(f"{name}: non-leader has a pending ISR change")
    return out


def check_replicas_identical_below_hw(
    logs: Mapping[int, Sequence[Hashable]], hw: int, log_start: int = 0
) -> list[str]:
    """Guarantee 2. `logs` maps broker id -> its log as a sequence indexed by offset
    (records, batch bytes, (epoch, payload) pairs: anything comparable); `hw` is the
    committed offset to check below. Every replica must hold [log_start, hw) and agree."""
    out: list[str] = []
    if not logs:
        return out
    for broker, log in sorted(logs.items()):
        if len(log) < hw:
            out.append(f"broker {broker}: log ends at {len(log)} below HW {hw}")
    reference_broker = min(logs)
    reference = logs[reference_broker]
    for offset in range(log_start, min(hw, len(reference))):
        for broker, log in sorted(logs.items()):
            if offset < len(log) and log[offset] != reference[offset]:
                out.append(
                    f"offset {offset}: broker {broker} has {log[offset]!r},"
                    f" broker {reference_broker} has {reference[offset]!r}"
                )
    return out


def check_single_leader_per_epoch(
    observations: Iterable[tuple[Hashable, int, int]],
) -> list[str]:
    """Guarantee 4 over (partition, leader epoch, leader id) observations, e.g. every
    become_leader the simulator saw."""
    tracker = LeaderEpochTracker()
    out: list[str] = []
    for partition, epoch, leader in observations:
        out.extend(tracker.observe(partition, epoch, leader))
    return out


class LeaderEpochTracker:
    """Incremental form of `check_single_leader_per_epoch` for a simulator."""

    def __init__(self) -> None:
        self._leaders: dict[tuple[Hashable, int], int] = {}

    def observe(self, partition: Hashable, epoch: int, leader: int) -> list[str]:
        if leader == NO_LEADER:
            return []
        seen = self._leaders.setdefault((partition, epoch), leader)
        if seen != leader:
            return [f"{partition}: leader epoch {epoch} led by both {seen} and {leader}"]
        return []


class MonotonicTracker:
    """Guarantee 3 and "HW never decreases on a leader": values per key only grow."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._last: dict[Hashable, int] = {}

    def observe(self, key: Hashable, value: int) -> list[str]:
        last = self._last.get(key)
        self._last[key] = value if last is None else max(last, value)
        if last is not None and value < last:
            return [f"{key}: {self.what} went back from {last} to {value}"]
        return []


def check_controller_state(
    states: Mapping[Hashable, tuple[int, Sequence[int]]],
    assignments: Mapping[Hashable, Sequence[int]],
) -> list[str]:
    """The controller's partition states ((leader, isr) per partition): leader in ISR or
    -1, ISR non-empty, ISR ⊆ assigned replicas."""
    out: list[str] = []
    for tp, (leader, isr) in sorted(states.items(), key=lambda kv: repr(kv[0])):
        assigned = set(assignments.get(tp, ()))
        if not isr:
            out.append(f"{tp}: empty ISR")
        if leader != NO_LEADER and leader not in isr:
            out.append(f"{tp}: leader {leader} not in ISR {list(isr)}")
        if not set(isr) <= assigned:
            out.append(f"{tp}: ISR {list(isr)} not within assignment {sorted(assigned)}")
    return out


def check_acked_not_lost(
    acked: Mapping[int, Hashable], log: Sequence[Hashable]
) -> list[str]:
    """Guarantee 1: every acknowledged (offset -> record) is in `log` (the current
    leader's) unchanged."""
    out: list[str] = []
    for offset, record in sorted(acked.items()):
        if offset >= len(log):
            out.append(f"acked offset {offset} missing (log ends at {len(log)})")
        elif log[offset] != record:
            out.append(f"acked offset {offset}: {record!r} became {log[offset]!r}")
    return out
