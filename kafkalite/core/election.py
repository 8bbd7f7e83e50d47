"""Controller decisions: leader elections, ISR changes the controller makes, AlterIsr
validation, leader imbalance (DESIGN section 6; seed 000 sections A, B, D; KIP-497;
Kafka's PartitionLeaderElectionAlgorithms and KafkaController).

Everything here decides; nothing writes. The controller shell performs the returned
`PartitionChange`s as conditional ZooKeeper writes (expected_version = the state znode's
version) and applies them in memory only after they succeed (STYLE habit 4). A
BadVersionError means: re-read and decide again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kafkalite.core.codes import ErrorCode
from kafkalite.core.replica_state import NO_LEADER, AlterIsrItem

TopicPartition = tuple[str, int]


class PartitionStateLike(Protocol):
    leader: int
    leader_epoch: int
    isr: Sequence[int]
    version: int


@dataclass(frozen=True)
class PartitionState:
    """The controller's copy of `/brokers/topics/<t>/partitions/<p>/state`; `version` is the
    znode version, i.e. the partition epoch carried in LeaderAndIsr and AlterIsr."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    version: int
    controller_epoch: int = 0


@dataclass(frozen=True)
class ElectionResult:
    leader: int  # NO_LEADER (-1) when nobody can lead
    isr: list[int]
    unclean: bool


@dataclass(frozen=True)
class PartitionChange:
    """Effect: conditionally write this partition state (expected znode version
    `expected_version`), then send LeaderAndIsr to its replicas."""

    topic_partition: TopicPartition
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    expected_version: int
    unclean: bool = False


# ------------------------------------------------------------------- elections


def offline_partition_leader(
    assigned: Sequence[int], isr: Sequence[int], live: Iterable[int], unclean: bool
) -> ElectionResult:
    """Seed section A 3.2 / Kafka offlinePartitionLeaderElection.

    - Clean: the first replica in assignment (preferred) order that is live and in the ISR;
      the new ISR is the live part of the old ISR.
    - Unclean (only with unclean.leader.election.enable): the first live assigned replica;
      the new ISR is just [leader] (data loss possible, hence the flag on the result).
    - Nobody: leader -1 and the ISR is KEPT, not emptied. Kafka never shrinks an ISR below
      its last member so that, when that member returns, it can be elected cleanly. We
      keep the whole ISR when every member died in the same event: none of them can be
      missing a committed write (the HW could not pass a member still in the ISR), so any
      of them is a clean choice later. Members that died in earlier events were already
      removed then, which gives Kafka's "last member" result.
    """
    live_set = set(live)
    isr_set = set(isr)
    for replica in assigned:
        if replica in live_set and replica in isr_set:
            new_isr = [r for r in isr if r in live_set]
            return ElectionResult(leader=replica, isr=new_isr, unclean=False)
    if unclean:
        for replica in assigned:
            if replica in live_set:
                return ElectionResult(leader=replica, isr=[replica], unclean=True)
    return ElectionResult(leader=NO_LEADER, isr=list(isr), unclean=False)


def preferred_replica_leader(
    assigned: Sequence[int], isr: Sequence[int], live: Iterable[int]
) -> int | None:
    """Kafka preferredReplicaPartitionLeaderElection: the first assigned replica, if it is
    live and in the ISR; else None (the election is skipped for this partition)."""
    if not assigned:
        return None
    preferred = assigned[0]
    if preferred in set(live) and preferred in set(isr):
        return preferred
    return None


def controlled_shutdown_leader(
    assigned: Sequence[int],
    isr: Sequence[int],
    live: Iterable[int],
    shutting_down: Iterable[int],
) -> tuple[int, list[int]]:
    """Kafka controlledShutdownPartitionLeaderElection: move leadership to the first
    assigned replica that is live, in the ISR and not shutting down; the new ISR drops the
    shutting-down brokers. When nobody qualifies the result is (NO_LEADER, isr unchanged)
    and the caller leaves the partition alone (the shutdown is retried; Kafka reports it
    as a remaining partition)."""
    live_set = set(live)
    leaving = set(shutting_down)
    isr_set = set(isr)
    for replica in assigned:
        if replica in live_set and replica in isr_set and replica not in leaving:
            return replica, [r for r in isr if r not in leaving]
    return NO_LEADER, list(isr)


def shrink_isr_for_leaving(
    isr: Sequence[int], leader: int, leaving: Iterable[int]
) -> list[int]:
    """The controller removes followers that died or shut down from an ISR whose leader
    stays (Kafka's removeReplicasFromIsr): never below one member."""
    gone = set(leaving)
    assert leader not in gone
    new_isr = [r for r in isr if r not in gone]
    return new_isr if new_isr else list(isr)


# --------------------------------------------------------- broker failure / startup


def on_brokers_failed(
    partition_states: Mapping[TopicPartition, PartitionStateLike],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Iterable[int],
    unclean_by_topic: Mapping[str, bool] | None = None,
) -> list[PartitionChange]:
    """Seed section A / DESIGN 6 "Broker failure", also run at failover and when brokers
    come back (partitions with leader -1 get a leader if they now can).

    For each partition whose leader is not live, or whose ISR names a dead broker: elect
    (`offline_partition_leader`) or shrink the ISR behind a live leader. Leader epoch + 1
    on every change (as Kafka's ZooKeeper controller does, also for a pure shrink, so a
    zombie leader's AlterIsr is fenced). Partitions with nothing to change are skipped.
    Sorted by topic-partition for deterministic output.
    """
    live_set = set(live)
    unclean_by_topic = unclean_by_topic or {}
    changes: list[PartitionChange] = []
    for tp in sorted(partition_states):
        state = partition_states[tp]
        assigned = assignments.get(tp, ())
        isr = list(state.isr)
        leader_live = state.leader != NO_LEADER and state.leader in live_set
        dead_in_isr = [r for r in isr if r not in live_set]
        if leader_live and not dead_in_isr:
            continue
        if leader_live:
            new_leader = state.leader
            new_isr = shrink_isr_for_leaving(isr, state.leader, dead_in_isr)
            unclean = False
        else:
            result = offline_partition_leader(
                assigned, isr, live_set, unclean_by_topic.get(tp[0], False)
            )
            new_leader, new_isr, unclean = result.leader, result.isr, result.unclean
        if new_leader == state.leader and new_isr == isr:
            continue  # still offline, nothing learned: do not bump the epoch
        assert new_leader == NO_LEADER or new_leader in new_isr
        assert set(new_isr) <= set(assigned) or not assigned
        changes.append(
            PartitionChange(
                topic_partition=tp,
                leader=new_leader,
                leader_epoch=state.leader_epoch + 1,
                isr=tuple(new_isr),
                expected_version=state.version,
                unclean=unclean,
            )
        )
    return changes


def init_leaders(
    assignments: Mapping[TopicPartition, Sequence[int]], live: Iterable[int]
) -> dict[TopicPartition, PartitionState]:
    """Seed section B init_leaders: for new partitions, leader = first live assigned
    replica, ISR = all live assigned replicas, leader epoch 0. Partitions with no live
    replica get leader -1 and the full assignment as ISR (nobody has data yet, so any
    replica is a clean leader later). `version` 0 is what ZooKeeper gives a new znode."""
    live_set = set(live)
    states: dict[TopicPartition, PartitionState] = {}
    for tp in sorted(assignments):
        assigned = list(assignments[tp])
        live_assigned = [r for r in assigned if r in live_set]
        if live_assigned:
            states[tp] = PartitionState(live_assigned[0], 0, tuple(live_assigned), 0)
        else:
            states[tp] = PartitionState(NO_LEADER, 0, tuple(assigned), 0)
    return states


def on_controlled_shutdown(
    broker_id: int,
    partition_states: Mapping[TopicPartition, PartitionStateLike],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Iterable[int],
    shutting_down: Iterable[int],
) -> tuple[list[PartitionChange], list[TopicPartition]]:
    """DESIGN 6 "Controlled shutdown": move every leadership away from `broker_id` and drop
    it from the ISRs it follows in. Returns (changes, partitions it still leads), the
    second being what Kafka returns as "partitions remaining" (no other live ISR member;
    single-replica partitions are not counted, as in Kafka, since nothing can take them);
    the broker retries or gives up after its bound. A follower leaving the ISR bumps the
    leader epoch, as every ISR change the controller makes does."""
    leaving = set(shutting_down) | {broker_id}
    live_set = set(live)
    changes: list[PartitionChange] = []
    remaining: list[TopicPartition] = []
    for tp in sorted(partition_states):
        state = partition_states[tp]
        assigned = assignments.get(tp, ())
        if broker_id not in assigned or len(assigned) < 2:
            continue  # as Kafka: a single-replica partition stops with its broker
        if state.leader == broker_id:
            leader, isr = controlled_shutdown_leader(assigned, state.isr, live_set, leaving)
            if leader == NO_LEADER:
                remaining.append(tp)
                continue
        elif broker_id in state.isr and state.leader != NO_LEADER:
            leader, isr = state.leader, shrink_isr_for_leaving(state.isr, state.leader, {broker_id})
        else:
            continue
        if leader == state.leader and list(isr) == list(state.isr):
            continue
        changes.append(
            PartitionChange(tp, leader, state.leader_epoch + 1, tuple(isr), state.version)
        )
    return changes, remaining


def preferred_leader_changes(
    partitions: Iterable[TopicPartition],
    partition_states: Mapping[TopicPartition, PartitionStateLike],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Iterable[int],
) -> list[PartitionChange]:
    """Preferred leader election (admin request or auto rebalance): partitions whose
    preferred replica is live, in the ISR and not already leading. ISR unchanged."""
    live_set = set(live)
    changes: list[PartitionChange] = []
    for tp in sorted(set(partitions)):
        state = partition_states.get(tp)
        if state is None:
            continue
        leader = preferred_replica_leader(assignments.get(tp, ()), state.isr, live_set)
        if leader is None or leader == state.leader:
            continue
        changes.append(
            PartitionChange(tp, leader, state.leader_epoch + 1, tuple(state.isr), state.version)
        )
    return changes


# ------------------------------------------------------------------- AlterIsr


@dataclass(frozen=True)
class AlterIsrDecision:
    """Per-partition AlterIsr outcome. On NONE, `new_state` is what to write (conditional on
    `expected_version`) and, once written, to answer with; when the ISR already matched,
    `write_needed` is False and `new_state` is the current state (an idempotent retry)."""

    error: ErrorCode
    new_state: PartitionState | None = None
    expected_version: int = -1
    write_needed: bool = False
    # INVALID_REQUEST for adding a member that cannot join now (not live, shutting down, or
    # not the incarnation the leader saw): the one refusal that depends on when it is
    # decided, which the controller fences with a new leader epoch.
    ineligible: bool = False


def added_from_another_incarnation(item: AlterIsrItem, isr: Sequence[int], live_brokers: Iterable[int] | Mapping[int, int]) -> bool:
    """Whether `item` adds a member (to `isr`) that the leader saw fetch with a broker epoch
    other than its live registration's (KIP-903), or names epochs that do not match its
    ISR; False when the epochs are unknown (an older sender, or no {broker: epoch} given)."""
    epochs = item.new_isr_epochs
    if not epochs:
        return False
    if len(epochs) != len(item.new_isr):
        return True
    if not isinstance(live_brokers, Mapping):
        return False
    return any(e >= 0 and b not in isr and live_brokers.get(b) != e for b, e in zip(item.new_isr, epochs))


def validate_alter_isr_request(
    broker_id: int,
    broker_epoch: int,
    live_broker_epochs: Mapping[int, int],
    is_controller: bool,
) -> ErrorCode:
    """Top-level AlterIsr checks (KIP-497): NOT_CONTROLLER if this broker no longer is;
    STALE_BROKER_EPOCH if the sender is not registered or registered again since (its
    epoch is the czxid of its /brokers/ids znode, DESIGN section 2)."""
    if not is_controller:
        return ErrorCode.NOT_CONTROLLER
    if live_broker_epochs.get(broker_id) != broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    return ErrorCode.NONE


def validate_alter_isr(
    current: PartitionStateLike | None,
    item: AlterIsrItem,
    replicas: Sequence[int],
    live_brokers: Iterable[int] | Mapping[int, int],
    shutting_down: Iterable[int] = (),
) -> AlterIsrDecision:
    """Partition-level AlterIsr rules (KIP-497; Kafka KafkaController.processAlterIsr):

    - UNKNOWN_TOPIC_OR_PARTITION: no state for the partition (topic deleted).
    - FENCED_LEADER_EPOCH: the leader epoch differs from ours (a newer leader exists), or
      the sender is not the leader of that epoch.
    - already in the desired state (same leader, epoch, ISR): success without a write, so
      a retry after a lost response is harmless (Kafka's equalsIgnoreZk check, made
      before the version check).
    - INVALID_UPDATE_VERSION: the partition epoch (znode version) differs.
    - INVALID_REQUEST: the ISR is empty, has duplicates, is not within the replicas, or
      leaves the leader out; or it ADDS a broker the controller sees as dead or shutting
      down (KIP-497's example; Kafka 3.x later gave this INELIGIBLE_REPLICA, which
      kafkalite does not have, so INVALID_REQUEST it is), or one the leader saw fetch with
      another broker epoch than its registration's (KIP-903: `live_brokers` given as
      {broker: epoch}): the leader's view of it is of an earlier incarnation, which may
      have held records the restarted one lost with its unflushed log. Keeping an
      already-present dead member is allowed: shrinking it is the leader's or the failure
      handler's business.
    - NONE: the new state keeps leader and leader epoch, takes the ISR, and its version is
      `expected_version + 1` (ZooKeeper bumps a znode's version by one per set).
    """
    if current is None:
        return AlterIsrDecision(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if item.leader_epoch != current.leader_epoch:
        return AlterIsrDecision(ErrorCode.FENCED_LEADER_EPOCH)
    if item.leader_id != current.leader:
        return AlterIsrDecision(ErrorCode.FENCED_LEADER_EPOCH)
    new_isr = tuple(item.new_isr)
    if set(new_isr) == set(current.isr) and len(new_isr) == len(current.isr):
        state = PartitionState(current.leader, current.leader_epoch, tuple(current.isr), current.version)
        return AlterIsrDecision(ErrorCode.NONE, state, current.version, write_needed=False)
    if item.partition_epoch != current.version:
        return AlterIsrDecision(ErrorCode.INVALID_UPDATE_VERSION)
    if not _isr_is_valid(new_isr, item.leader_id, replicas):
        return AlterIsrDecision(ErrorCode.INVALID_REQUEST)
    eligible = set(live_brokers) - set(shutting_down)
    added = set(new_isr) - set(current.isr)
    if not added <= eligible or added_from_another_incarnation(item, current.isr, live_brokers):
        return AlterIsrDecision(ErrorCode.INVALID_REQUEST, ineligible=True)
    state = PartitionState(current.leader, current.leader_epoch, new_isr, current.version + 1)
    return AlterIsrDecision(ErrorCode.NONE, state, current.version, write_needed=True)


def _isr_is_valid(isr: tuple[int, ...], leader: int, replicas: Sequence[int]) -> bool:
    if not isr:
        return False
    if len(set(isr)) != len(isr):
        return False
    if not set(isr) <= set(replicas):
        return False
    return leader in isr


# ------------------------------------------------------------- imbalance


def leader_imbalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    states: Mapping[TopicPartition, PartitionStateLike],
) -> dict[int, float]:
    """Kafka checkAndTriggerAutoLeaderRebalance: for each broker that is the preferred
    replica of some partitions, the fraction of those it does not currently lead."""
    preferred_count: dict[int, int] = {}
    not_leading: dict[int, int] = {}
    for tp, assigned in assignments.items():
        if not assigned:
            continue
        preferred = assigned[0]
        preferred_count[preferred] = preferred_count.get(preferred, 0) + 1
        state = states.get(tp)
        if state is None or state.leader != preferred:
            not_leading[preferred] = not_leading.get(preferred, 0) + 1
    return {
        broker: not_leading.get(broker, 0) / count
        for broker, count in sorted(preferred_count.items())
    }


def partitions_to_rebalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    states: Mapping[TopicPartition, PartitionStateLike],
    live: Iterable[int],
    imbalance_pct_max: float,
) -> list[TopicPartition]:
    """auto.leader.rebalance.enable: for brokers whose imbalance ratio exceeds
    `imbalance_pct_max` / 100 (leader.imbalance.per.broker.percentage), the partitions
    they prefer and could lead now (live and in the ISR) but do not."""
    live_set = set(live)
    ratios = leader_imbalance(assignments, states)
    result: list[TopicPartition] = []
    for tp in sorted(assignments):
        assigned = assignments[tp]
        state = states.get(tp)
        if not assigned or state is None:
            continue
        preferred = assigned[0]
        if ratios.get(preferred, 0.0) <= imbalance_pct_max / 100:
            continue
        if preferred_replica_leader(assigned, state.isr, live_set) not in (None, state.leader):
            result.append(tp)
    return result
