"""Controller decisions: elections, broker failure, controlled shutdown, AlterIsr rules."""

from __future__ import annotations

from kafkalite.core.codes import ErrorCode
from kafkalite.core.election import (
    PartitionChange,
    PartitionState,
    controlled_shutdown_leader,
    init_leaders,
    leader_imbalance,
    offline_partition_leader,
    on_brokers_failed,
    on_controlled_shutdown,
    partitions_to_rebalance,
    preferred_leader_changes,
    preferred_replica_leader,
    validate_alter_isr,
    validate_alter_isr_request,
)
from kafkalite.core.invariants import check_controller_state
from kafkalite.core.replica_state import AlterIsrItem

TP = ("t", 0)


# ----------------------------------------------------------------- elections


def test_clean_election_picks_first_live_isr_member_in_assignment_order():
    result = offline_partition_leader([3, 1, 2], isr=[1, 2, 3], live={1, 2}, unclean=False)
    assert result.leader == 1  # 3 preferred but dead; 1 next in assignment order
    assert result.isr == [1, 2]
    assert result.unclean is False


def test_no_live_isr_without_unclean_leaves_partition_offline_and_keeps_isr():
    result = offline_partition_leader([1, 2, 3], isr=[1, 2], live={3}, unclean=False)
    assert result.leader == -1
    assert result.isr == [1, 2]


def test_unclean_election_from_live_assigned_replicas():
    result = offline_partition_leader([1, 2, 3], isr=[1, 2], live={3}, unclean=True)
    assert result.leader == 3
    assert result.isr == [3]
    assert result.unclean is True


def test_unclean_with_nobody_alive():
    result = offline_partition_leader([1, 2], isr=[1], live=set(), unclean=True)
    assert result.leader == -1


def test_preferred_replica_leader():
    assert preferred_replica_leader([2, 1], [1, 2], {1, 2}) == 2
    assert preferred_replica_leader([2, 1], [1], {1, 2}) is None  # not in ISR
    assert preferred_replica_leader([2, 1], [1, 2], {1}) is None  # dead


def test_controlled_shutdown_moves_leadership_away_and_drops_from_isr():
    leader, isr = controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, shutting_down={1})
    assert leader == 2
    assert isr == [2, 3]
    leader, isr = controlled_shutdown_leader([1, 2], [1], {1, 2}, shutting_down={1})
    assert leader == -1  # nobody else in sync: leadership stays, shutdown retried
    assert isr == [1]


def test_on_controlled_shutdown_changes_and_remaining():
    states = {
        ("t", 0): PartitionState(1, 3, (1, 2, 3), 7),  # led by 1
        ("t", 1): PartitionState(2, 4, (2, 1), 8),  # 1 follows
        ("t", 2): PartitionState(1, 1, (1,), 2),  # only 1 in sync
    }
    assignments = {("t", 0): [1, 2, 3], ("t", 1): [2, 1, 3], ("t", 2): [1, 3]}
    changes, remaining = on_controlled_shutdown(1, states, assignments, {1, 2, 3}, {1})
    assert changes == [
        PartitionChange(("t", 0), 2, 4, (2, 3), 7),
        PartitionChange(("t", 1), 2, 5, (2,), 8),
    ]
    assert remaining == [("t", 2)]


def test_on_controlled_shutdown_leaves_single_replica_partitions_alone():
    """As Kafka: nothing can take a single-replica partition, so it is neither changed nor
    reported as remaining (the broker would retry its shutdown in vain)."""
    states = {("t", 0): PartitionState(1, 3, (1,), 7), ("t", 1): PartitionState(2, 4, (2, 1), 8)}
    assignments = {("t", 0): [1], ("t", 1): [2, 1]}
    changes, remaining = on_controlled_shutdown(1, states, assignments, {1, 2}, {1})
    assert changes == [PartitionChange(("t", 1), 2, 5, (2,), 8)]
    assert remaining == []


# ----------------------------------------------------------------- broker failure


def test_on_brokers_failed_elects_shrinks_and_bumps_epochs():
    states = {
        ("a", 0): PartitionState(1, 5, (1, 2, 3), 10),  # leader died
        ("a", 1): PartitionState(2, 2, (2, 1), 4),  # follower died
        ("a", 2): PartitionState(2, 1, (2, 3), 1),  # untouched
        ("b", 0): PartitionState(1, 9, (1,), 3),  # only ISR member died, unclean on
        ("c", 0): PartitionState(1, 9, (1,), 3),  # only ISR member died, unclean off
    }
    assignments = {
        ("a", 0): [1, 2, 3], ("a", 1): [2, 1, 3], ("a", 2): [2, 3, 1],
        ("b", 0): [1, 3], ("c", 0): [1, 3],
    }
    live = {2, 3}
    changes = on_brokers_failed(states, assignments, live, {"b": True})
    by_tp = {c.topic_partition: c for c in changes}
    assert set(by_tp) == {("a", 0), ("a", 1), ("b", 0), ("c", 0)}
    assert by_tp[("a", 0)] == PartitionChange(("a", 0), 2, 6, (2, 3), 10, False)
    assert by_tp[("a", 1)] == PartitionChange(("a", 1), 2, 3, (2,), 4, False)
    assert by_tp[("b", 0)] == PartitionChange(("b", 0), 3, 10, (3,), 3, True)
    assert by_tp[("c", 0)] == PartitionChange(("c", 0), -1, 10, (1,), 3, False)
    new_states = {c.topic_partition: (c.leader, c.isr) for c in changes}
    assert check_controller_state(new_states, assignments) == []


def test_offline_partition_not_bumped_again_while_nothing_changes():
    states = {TP: PartitionState(-1, 10, (1,), 4)}
    assert on_brokers_failed(states, {TP: [1, 2]}, {2}) == []
    # broker 1 comes back: clean election
    assert on_brokers_failed(states, {TP: [1, 2]}, {1, 2}) == [PartitionChange(TP, 1, 11, (1,), 4)]


def test_init_leaders():
    states = init_leaders({("t", 0): [1, 2, 3], ("t", 1): [4, 5]}, live={2, 3})
    assert states[("t", 0)] == PartitionState(2, 0, (2, 3), 0)
    assert states[("t", 1)].leader == -1


# ------------------------------------------------------------------- AlterIsr


def item(isr, leader=1, leader_epoch=5, partition_epoch=10):
    return AlterIsrItem("t", 0, leader, leader_epoch, tuple(isr), partition_epoch)


CURRENT = PartitionState(1, 5, (1, 2), 10)
REPLICAS = [1, 2, 3]
LIVE = {1, 2, 3}


def test_alter_isr_accepted_bumps_version():
    decision = validate_alter_isr(CURRENT, item([1, 2, 3]), REPLICAS, LIVE)
    assert decision.error == ErrorCode.NONE
    assert decision.new_state == PartitionState(1, 5, (1, 2, 3), 11)
    assert decision.expected_version == 10
    assert decision.write_needed


def test_alter_isr_unknown_partition():
    assert validate_alter_isr(None, item([1]), REPLICAS, LIVE).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_isr_fenced_leader_epoch():
    assert validate_alter_isr(CURRENT, item([1], leader_epoch=4), REPLICAS, LIVE).error == ErrorCode.FENCED_LEADER_EPOCH
    assert validate_alter_isr(CURRENT, item([2], leader=2), REPLICAS, LIVE).error == ErrorCode.FENCED_LEADER_EPOCH


def test_alter_isr_invalid_version():
    decision = validate_alter_isr(CURRENT, item([1], partition_epoch=9), REPLICAS, LIVE)
    assert decision.error == ErrorCode.INVALID_UPDATE_VERSION


def test_alter_isr_invalid_request_cases():
    cases = [
        item([2, 3]),  # leader left out
        item([1, 4]),  # not a replica
        item([1, 1]),  # duplicate
        item([]),  # empty
    ]
    for bad in cases:
        assert validate_alter_isr(CURRENT, bad, REPLICAS, LIVE).error == ErrorCode.INVALID_REQUEST


def test_alter_isr_refuses_to_add_dead_or_shutting_down_broker():
    assert validate_alter_isr(CURRENT, item([1, 2, 3]), REPLICAS, {1, 2}).error == ErrorCode.INVALID_REQUEST
    decision = validate_alter_isr(CURRENT, item([1, 2, 3]), REPLICAS, LIVE, shutting_down={3})
    assert decision.error == ErrorCode.INVALID_REQUEST
    # keeping a dead member (a shrink of someone else) is fine
    current = PartitionState(1, 5, (1, 2, 3), 10)
    assert validate_alter_isr(current, item([1, 3]), REPLICAS, {1, 2}).error == ErrorCode.NONE


def test_alter_isr_judges_added_members_by_the_broker_epoch_the_leader_saw():
    """KIP-903: `live_brokers` as {broker: epoch}. An added member whose epoch differs from
    its live registration is refused as ineligible; a member already in the ISR, the
    leader's own -1 and an unknown -1 are not judged by epoch; without epochs (an older
    sender) the proposal is judged as before."""
    live = {1: 10, 2: 20, 3: 30}

    def with_epochs(isr, epochs):
        return AlterIsrItem("t", 0, 1, 5, tuple(isr), 10, tuple(epochs))

    assert validate_alter_isr(CURRENT, with_epochs([1, 2, 3], [-1, 20, 30]), REPLICAS, live).error == ErrorCode.NONE
    stale = validate_alter_isr(CURRENT, with_epochs([1, 2, 3], [-1, 20, 29]), REPLICAS, live)
    assert (stale.error, stale.ineligible) == (ErrorCode.INVALID_REQUEST, True)
    # Broker 2 is already a member: its epoch is not the question here.
    assert validate_alter_isr(CURRENT, with_epochs([1, 2, 3], [-1, 19, 30]), REPLICAS, live).error == ErrorCode.NONE
    assert validate_alter_isr(CURRENT, with_epochs([1, 2, 3], [-1, 20, -1]), REPLICAS, live).error == ErrorCode.NONE
    assert validate_alter_isr(CURRENT, item([1, 2, 3]), REPLICAS, live).error == ErrorCode.NONE
    assert validate_alter_isr(CURRENT, with_epochs([1, 2, 3], [-1, 30]), REPLICAS, live).error == ErrorCode.INVALID_REQUEST
    # Given as a plain set of live brokers, epochs cannot be judged.
    assert validate_alter_isr(CURRENT, with_epochs([1, 2, 3], [-1, 20, 29]), REPLICAS, LIVE).error == ErrorCode.NONE


def test_alter_isr_retry_of_applied_change_succeeds_without_write():
    applied = PartitionState(1, 5, (1, 2, 3), 11)
    decision = validate_alter_isr(applied, item([1, 2, 3], partition_epoch=10), REPLICAS, LIVE)
    assert decision.error == ErrorCode.NONE
    assert decision.write_needed is False
    assert decision.new_state == applied


def test_alter_isr_request_level_checks():
    assert validate_alter_isr_request(1, 100, {1: 100}, is_controller=False) == ErrorCode.NOT_CONTROLLER
    assert validate_alter_isr_request(1, 99, {1: 100}, is_controller=True) == ErrorCode.STALE_BROKER_EPOCH
    assert validate_alter_isr_request(2, 100, {1: 100}, is_controller=True) == ErrorCode.STALE_BROKER_EPOCH
    assert validate_alter_isr_request(1, 100, {1: 100}, is_controller=True) == ErrorCode.NONE


# --------------------------------------------------------------- imbalance


def test_leader_imbalance_and_rebalance_candidates():
    assignments = {("t", 0): [1, 2], ("t", 1): [1, 2], ("t", 2): [2, 1], ("t", 3): [2, 1]}
    states = {
        ("t", 0): PartitionState(2, 1, (1, 2), 1),
        ("t", 1): PartitionState(2, 1, (2,), 1),
        ("t", 2): PartitionState(2, 1, (1, 2), 1),
        ("t", 3): PartitionState(2, 1, (1, 2), 1),
    }
    assert leader_imbalance(assignments, states) == {1: 1.0, 2: 0.0}
    # ("t", 1): broker 1 is not in the ISR, so it cannot take over
    assert partitions_to_rebalance(assignments, states, {1, 2}, imbalance_pct_max=10) == [("t", 0)]
    changes = preferred_leader_changes([("t", 0), ("t", 1)], states, assignments, {1, 2})
    assert changes == [PartitionChange(("t", 0), 1, 2, (1, 2), 1)]
