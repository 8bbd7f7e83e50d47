"""PartitionReplicaState: HW, ISR expand/shrink through AlterIsr (KIP-497), fencing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core.codes import (
    ErrorCode,
    IllegalTransitionError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    StaleLeaderEpochError,
)
from kafkalite.core.invariants import check_partition_invariants
from kafkalite.core.replica_state import (
    AlterIsrItem,
    IsrEvent,
    IsrPhase,
    LeaderAndIsrState,
    PartitionReplicaState,
    PendingExpandIsr,
    PendingShrinkIsr,
)

LAG_MS = 10_000


def leader_state(isr=(1, 2, 3), replicas=(1, 2, 3), leader_epoch=5, partition_epoch=10):
    return LeaderAndIsrState(1, leader_epoch, tuple(isr), partition_epoch, tuple(replicas), 1)


def make_leader(isr=(1, 2, 3), replicas=(1, 2, 3), leo=100, hw=50, now_ms=0, **kw):
    p = PartitionReplicaState("t", 0, 1)
    assert p.become_leader(leader_state(isr, replicas, **kw), leo, hw, now_ms)
    return p


def ok(p: PartitionReplicaState) -> None:
    assert check_partition_invariants(p) == []


# --------------------------------------------------------------- become_leader


def test_become_leader_adopts_state_and_resets_followers():
    p = make_leader(isr=(1, 2), replicas=(1, 2, 3), now_ms=1000)
    assert p.is_leader
    assert p.leader_id == 1
    assert p.leader_epoch == 5
    assert p.partition_epoch == 10
    assert p.isr == (1, 2)
    assert p.replicas == (1, 2, 3)
    assert p.hw == 50
    assert p.leader_epoch_start_offset == 100
    assert p.follower_state(2).last_caught_up_ms == 1000  # ISR member: full lag window
    assert p.follower_state(3).last_caught_up_ms == 0  # not in ISR
    assert p.follower_leo(2) == -1  # a new leader knows no follower LEO
    ok(p)


def test_same_leader_epoch_and_partition_epoch_is_idempotent():
    p = make_leader()
    assert p.become_leader(leader_state(), 100, 50, 5) is False


def test_stale_leader_epoch_refused():
    p = make_leader(leader_epoch=5)
    with pytest.raises(StaleLeaderEpochError) as info:
        p.become_leader(leader_state(leader_epoch=4), 100, 50, 0)
    assert info.value.code == ErrorCode.STALE_CONTROLLER_EPOCH
    with pytest.raises(StaleLeaderEpochError):
        p.become_follower(LeaderAndIsrState(2, 4, (2,), 99, (1, 2, 3)), 0)
    assert p.leader_epoch == 5
    assert p.is_leader


def test_stale_partition_epoch_in_same_leader_epoch_refused():
    p = make_leader(partition_epoch=10)
    with pytest.raises(StaleLeaderEpochError):
        p.become_leader(leader_state(partition_epoch=9), 100, 50, 0)


def test_same_leader_epoch_newer_partition_epoch_adopts_isr_and_clears_pending():
    p = make_leader(isr=(1, 2), now_ms=0)
    p.update_follower_fetch(3, 100, 100, 1)  # proposes expansion
    assert isinstance(p.pending, PendingExpandIsr)
    assert p.become_leader(leader_state(isr=(1,), partition_epoch=11), 100, 50, 2)
    assert p.pending is None
    assert p.isr_phase is IsrPhase.COMMITTED
    assert p.isr == (1,)
    assert p.partition_epoch == 11
    ok(p)


def test_become_leader_rejects_self_contradicting_state():
    p = PartitionReplicaState("t", 0, 1)
    with pytest.raises(InvalidRequestError):
        p.become_leader(LeaderAndIsrState(1, 1, (2, 3), 0, (1, 2, 3)), 0, 0, 0)  # leader not in ISR
    with pytest.raises(InvalidRequestError):
        p.become_leader(LeaderAndIsrState(1, 1, (1, 4), 0, (1, 2, 3)), 0, 0, 0)  # ISR ⊄ AR
    with pytest.raises(InvalidRequestError):
        p.become_leader(LeaderAndIsrState(2, 1, (2,), 0, (1, 2)), 0, 0, 0)  # names someone else


def test_two_leaders_in_one_epoch_refused():
    p = PartitionReplicaState("t", 0, 1)
    p.become_follower(LeaderAndIsrState(2, 3, (1, 2), 0, (1, 2)), 0)
    with pytest.raises(InvalidRequestError):
        p.become_leader(LeaderAndIsrState(1, 3, (1, 2), 1, (1, 2)), 0, 0, 0)


def test_become_follower_then_leader_again_with_new_epoch():
    p = make_leader()
    assert p.become_follower(LeaderAndIsrState(2, 6, (2, 3), 11, (1, 2, 3)), 10)
    assert not p.is_leader
    assert p.leader_id == 2
    assert p.pending is None
    assert p.become_follower(LeaderAndIsrState(2, 6, (2, 3), 11, (1, 2, 3)), 11) is False
    assert p.become_leader(leader_state(isr=(1, 2, 3), leader_epoch=7, partition_epoch=12), 120, 60, 20)
    assert p.hw == 60
    ok(p)


# ------------------------------------------------------------------- HW


def test_hw_is_min_leo_over_isr_and_never_decreases():
    p = make_leader(isr=(1, 2, 3), leo=100, hw=50)
    assert p.update_follower_fetch(2, 80, 100, 1).hw_changed is False  # 3 unknown
    assert p.update_follower_fetch(3, 70, 100, 1).hw_changed is True
    assert p.hw == 70
    assert p.update_follower_fetch(3, 90, 100, 2).hw_changed is True
    assert p.hw == 80
    # a follower that truncated reports a lower LEO: HW stays
    assert p.update_follower_fetch(2, 60, 100, 3).hw_changed is False
    assert p.hw == 80
    ok(p)


def test_the_leader_records_the_hw_it_last_answered_each_follower_with():
    """Kafka's lastSentHighWatermark: what the leader last told a follower (the status
    page's follower HW): the HW an answer carried, noted when it went out, never more than
    the HW and never back; an answer after a role change notes nothing."""
    p = make_leader(isr=(1, 2, 3), leo=100, hw=50)
    p.update_follower_fetch(2, 100, 100, 1)
    p.note_hw_sent(2, 50)
    assert p.follower_state(2).last_sent_hw == 50
    assert p.update_follower_fetch(3, 100, 100, 1).hw_changed  # 3 catches up: HW 50 -> 100
    assert p.follower_state(2).last_sent_hw == 50  # not told yet
    p.note_hw_sent(2, 40)  # an answer read before: nothing goes back
    assert p.follower_state(2).last_sent_hw == 50
    p.note_hw_sent(2, 100)
    assert p.follower_state(2).last_sent_hw == 100
    p.note_hw_sent(9, 100)  # no follower of this partition
    ok(p)


def test_single_member_isr_hw_follows_leader_leo():
    p = make_leader(isr=(1,), leo=100, hw=50)
    assert p.hw == 100  # become_leader already advanced it
    assert p.maybe_increment_hw(130) is True
    assert p.hw == 130
    assert p.maybe_increment_hw(130) is False


def test_follower_fetch_beyond_leader_leo_is_out_of_range():
    p = make_leader()
    with pytest.raises(OffsetOutOfRangeError):
        p.update_follower_fetch(2, 101, 100, 0)


def test_unknown_replica_fetch_refused():
    p = make_leader()
    with pytest.raises(NotLeaderOrFollowerError):
        p.update_follower_fetch(9, 10, 100, 0)


def test_follower_fetch_on_non_leader_refused():
    p = PartitionReplicaState("t", 0, 1)
    p.become_follower(LeaderAndIsrState(2, 1, (1, 2), 0, (1, 2)), 0)
    with pytest.raises(NotLeaderOrFollowerError):
        p.update_follower_fetch(2, 0, 0, 0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([2, 3]), st.integers(0, 100), st.integers(0, 30)), max_size=40))
def test_hw_never_decreases_and_stays_within_leo(fetches):
    leo = 100
    p = make_leader(isr=(1, 2), replicas=(1, 2, 3), leo=leo, hw=0)
    now = 0
    last_hw = p.hw
    for replica, offset, step in fetches:
        now += step
        result = p.update_follower_fetch(replica, offset, leo, now)
        if result.alter_isr is not None:
            p.on_alter_isr_response(
                ErrorCode.NONE,
                LeaderAndIsrState(1, 5, result.alter_isr.new_isr, p.partition_epoch + 1, (1, 2, 3)),
            )
        p.maybe_shrink_isr(now, 50, leo)
        if p.pending is not None and now % 2:
            p.on_alter_isr_response(
                ErrorCode.NONE,
                LeaderAndIsrState(1, 5, p.pending.sent.new_isr, p.partition_epoch + 1, (1, 2, 3)),
            )
        assert p.hw >= last_hw
        assert p.hw <= leo
        last_hw = p.hw
        ok(p)


# --------------------------------------------------------------- expand


def test_expand_when_follower_reaches_hw_and_epoch_start():
    p = make_leader(isr=(1, 2), replicas=(1, 2, 3), leo=100, hw=50)
    # below the leader epoch's start offset (100): not yet
    assert p.update_follower_fetch(3, 60, 100, 1).alter_isr is None
    result = p.update_follower_fetch(3, 100, 100, 2, follower_broker_epoch=77)
    # Each member's broker epoch as its last fetch said (KIP-903): the leader's own and
    # broker 2's (no fetch yet) are unknown.
    assert result.alter_isr == AlterIsrItem("t", 0, 1, 5, (1, 2, 3), 10, (-1, -1, 77))
    assert isinstance(p.pending, PendingExpandIsr)
    assert p.isr == (1, 2)  # committed unchanged
    assert p.maximal_isr == (1, 2, 3)  # counted at once for the HW
    ok(p)


def test_a_fetch_of_an_earlier_incarnation_moves_nothing():
    """A follower's request parked before it restarted is read again after its new
    incarnation fetched: the old request's offset (what the old process had, perhaps an
    unflushed suffix the new one lost) must neither raise the follower's LEO, so the HW,
    nor propose it for the ISR (KIP-903)."""
    p = make_leader(isr=(1, 2), replicas=(1, 2, 3), leo=100, hw=100)
    p.update_follower_fetch(2, 100, 100, 1, follower_broker_epoch=20)
    # Broker 3 restarted (epoch 30) and lost its log: it fetches from 40.
    assert p.update_follower_fetch(3, 40, 120, 2, follower_broker_epoch=30).alter_isr is None
    # Its old incarnation's fetch (epoch 29) at 120, read again: nothing moves.
    result = p.update_follower_fetch(3, 120, 120, 3, follower_broker_epoch=29)
    assert result.alter_isr is None and not result.hw_changed
    assert p.pending is None and p.isr == (1, 2)
    # The current incarnation, caught up, is proposed with its own epoch.
    result = p.update_follower_fetch(3, 120, 120, 4, follower_broker_epoch=30)
    assert result.alter_isr is not None and result.alter_isr.new_isr_epochs == (-1, 20, 30)
    ok(p)


def test_pending_expand_holds_hw_back_for_the_new_member():
    p = make_leader(isr=(1, 2), replicas=(1, 2, 3), leo=100, hw=0)
    p.update_follower_fetch(3, 100, 100, 1)  # expansion (HW 0 <= 100)
    p.maybe_increment_hw(120)
    p.update_follower_fetch(2, 120, 120, 2)
    assert p.hw == 100  # 3 is in the maximal ISR at LEO 100
    p.update_follower_fetch(3, 120, 120, 3)
    assert p.hw == 120


def test_one_change_in_flight():
    p = make_leader(isr=(1,), replicas=(1, 2, 3), leo=100, hw=100)
    assert p.update_follower_fetch(2, 100, 100, 1).alter_isr is not None
    assert p.update_follower_fetch(3, 100, 100, 1).alter_isr is None  # 2's change in flight
    assert p.maybe_shrink_isr(10**9, LAG_MS, 200) is None
    with pytest.raises(IllegalTransitionError):
        p._transition(IsrEvent.PROPOSE_SHRINK)


# --------------------------------------------------------------- shrink


def test_shrink_out_of_sync_follower_after_lag_time():
    p = make_leader(isr=(1, 2, 3), leo=100, hw=100, now_ms=0)
    p.update_follower_fetch(2, 100, 100, 5_000)
    p.update_follower_fetch(3, 100, 100, 5_000)
    p.maybe_increment_hw(150)  # leader appended to 150
    p.update_follower_fetch(2, 150, 150, 14_000)  # 2 keeps up, 3 stops fetching
    assert p.maybe_shrink_isr(15_000, LAG_MS, 150) is None  # 3 caught up at 5_000
    item = p.maybe_shrink_isr(15_001, LAG_MS, 150)
    assert item is not None
    assert item.new_isr == (1, 2)
    assert isinstance(p.pending, PendingShrinkIsr)
    assert p.pending.removed == (3,)
    assert p.isr == (1, 2, 3)
    assert p.maximal_isr == (1, 2, 3)  # the old, larger set until confirmed
    ok(p)


def test_pending_shrink_does_not_let_hw_pass_removed_follower():
    p = make_leader(isr=(1, 2, 3), leo=100, hw=100)
    p.update_follower_fetch(3, 100, 100, 0)
    p.update_follower_fetch(2, 150, 150, 20_000)
    assert p.maybe_shrink_isr(20_001, LAG_MS, 150) is not None
    assert p.hw == 100  # 3 still counts
    p.on_alter_isr_response(ErrorCode.NONE, leader_state(isr=(1, 2), partition_epoch=11))
    assert p.isr == (1, 2)
    assert p.maybe_increment_hw(150) is True
    assert p.hw == 150


def test_shrink_never_removes_leader():
    p = make_leader(isr=(1, 2), replicas=(1, 2), leo=100, hw=100)
    item = p.maybe_shrink_isr(10**9, LAG_MS, 200)
    assert item is not None
    assert item.new_isr == (1,)


def test_follower_at_leader_leo_is_never_out_of_sync():
    p = make_leader(isr=(1, 2), replicas=(1, 2), leo=100, hw=100)
    p.update_follower_fetch(2, 100, 100, 0)
    assert p.maybe_shrink_isr(10**9, LAG_MS, 100) is None  # no writes for ages: still in sync


def test_last_caught_up_uses_leader_leo_of_previous_fetch():
    # Kafka's lastCaughtUpTimeMs rule: reaching the LEO the leader had at the previous
    # fetch counts as caught up as of that previous fetch.
    p = make_leader(isr=(1, 2), replicas=(1, 2), leo=100, hw=100, now_ms=0)
    p.update_follower_fetch(2, 90, 100, 1_000)  # behind; previous-fetch LEO now 100
    p.update_follower_fetch(2, 100, 120, 2_000)  # reached 100 (the LEO at 1_000)
    assert p.follower_state(2).last_caught_up_ms == 1_000
    p.update_follower_fetch(2, 120, 120, 3_000)
    assert p.follower_state(2).last_caught_up_ms == 3_000


# ------------------------------------------------------------ AlterIsr responses


def expanding_leader():
    p = make_leader(isr=(1, 2), replicas=(1, 2, 3), leo=100, hw=100)
    item = p.update_follower_fetch(3, 100, 100, 1).alter_isr
    assert item is not None
    return p, item


def test_alter_isr_success_adopts_isr_and_partition_epoch():
    p, item = expanding_leader()
    assert p.on_alter_isr_response(ErrorCode.NONE, leader_state(isr=(1, 2, 3), partition_epoch=11), item)
    assert p.isr == (1, 2, 3)
    assert p.partition_epoch == 11
    assert p.pending is None
    assert p.isr_phase is IsrPhase.COMMITTED
    ok(p)


@pytest.mark.parametrize(
    "code", [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
)
def test_alter_isr_give_up_errors_clear_pending_and_wait_for_leader_and_isr(code):
    p, item = expanding_leader()
    assert p.on_alter_isr_response(code, None, item) is True
    assert p.pending is None
    assert p.retry_alter_isr is None
    assert p.isr == (1, 2)
    assert p.isr_phase is IsrPhase.AWAITING_LEADER_AND_ISR
    # no new proposal until the controller speaks
    assert p.update_follower_fetch(3, 100, 100, 2).alter_isr is None
    assert p.maybe_shrink_isr(10**9, LAG_MS, 100) is None
    assert p.become_leader(leader_state(isr=(1, 2), partition_epoch=12), 100, 100, 3)
    assert p.isr_phase is IsrPhase.COMMITTED
    assert p.update_follower_fetch(3, 100, 100, 4).alter_isr is not None
    ok(p)


def test_a_refused_expansion_still_counts_the_new_member_until_leader_and_isr():
    """Simulator seed 734: the controller wrote the expansion but its answer was lost; a
    later decision kept the new member (3) in the ISR in ZooKeeper. The old leader's retry
    is refused FENCED; acknowledging with the committed ISR (1, 2) would acknowledge
    records 3 lacks, and 3 may be the next leader."""
    p, item = expanding_leader()
    p.on_alter_isr_response(ErrorCode.FENCED_LEADER_EPOCH, None, item)
    assert p.maximal_isr == (1, 2, 3)
    p.update_follower_fetch(2, 150, 150, 2)
    assert p.maybe_increment_hw(150) is False
    assert p.hw == 100
    assert p.check_enough_replicas_reach_offset(150, 2) == (False, ErrorCode.NONE)
    p.become_leader(leader_state(isr=(1, 2), partition_epoch=12), 150, 100, 3)
    assert p.maximal_isr == (1, 2)
    ok(p)


def test_alter_isr_invalid_request_clears_pending_back_to_committed():
    p, item = expanding_leader()
    assert p.on_alter_isr_response(ErrorCode.INVALID_REQUEST, None, item) is True
    assert p.pending is None
    assert p.isr_phase is IsrPhase.COMMITTED
    assert p.maximal_isr == (1, 2)


@pytest.mark.parametrize(
    "code", [ErrorCode.NOT_CONTROLLER, ErrorCode.STALE_BROKER_EPOCH, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_SERVER_ERROR, 9999]
)
def test_alter_isr_retriable_errors_keep_pending_and_signal_retry(code):
    p, item = expanding_leader()
    assert p.on_alter_isr_response(code, None, item) is False
    assert p.pending is not None
    assert p.retry_alter_isr == item
    assert p.maximal_isr == (1, 2, 3)
    # the retry succeeds
    assert p.on_alter_isr_response(ErrorCode.NONE, leader_state(isr=(1, 2, 3), partition_epoch=11))
    assert p.retry_alter_isr is None


def test_alter_isr_success_with_stale_state_is_treated_as_fenced():
    p, item = expanding_leader()
    assert p.on_alter_isr_response(ErrorCode.NONE, leader_state(isr=(1, 2, 3), leader_epoch=4, partition_epoch=11), item)
    assert p.isr == (1, 2)
    assert p.isr_phase is IsrPhase.AWAITING_LEADER_AND_ISR


def test_alter_isr_response_for_another_change_is_ignored():
    p, item = expanding_leader()
    other = AlterIsrItem("t", 0, 1, 5, (1, 2), 9)
    assert p.on_alter_isr_response(ErrorCode.NONE, leader_state(partition_epoch=11), other) is False
    assert p.pending is not None


def test_alter_isr_response_after_leader_and_isr_is_ignored():
    p, item = expanding_leader()
    p.become_leader(leader_state(isr=(1, 2), partition_epoch=11), 100, 100, 2)
    assert p.on_alter_isr_response(ErrorCode.NONE, leader_state(isr=(1, 2, 3), partition_epoch=11), item) is False
    assert p.isr == (1, 2)


# ------------------------------------------------------------------ zombie leader


def test_zombie_leader_cannot_advance_hw_past_new_isr():
    # seed 000 discussion 3: A leads {A,B,C}; controller moves leadership to B. A still
    # thinks it leads, but B no longer fetches from A, so A's HW cannot pass B's LEO,
    # and A's shrink is refused by the controller (FENCED) so it cannot drop B.
    a = make_leader(isr=(1, 2, 3), leo=100, hw=100)
    a.update_follower_fetch(2, 100, 100, 0)
    a.update_follower_fetch(3, 100, 100, 0)
    # B (2) became leader elsewhere and stopped fetching; A appends
    a.maybe_increment_hw(200)
    a.update_follower_fetch(3, 200, 200, 1)
    assert a.hw == 100
    item = a.maybe_shrink_isr(LAG_MS + 1, LAG_MS, 200)
    assert item is not None and item.new_isr == (1, 3)
    assert a.hw == 100  # pending shrink: B still counts
    a.on_alter_isr_response(ErrorCode.FENCED_LEADER_EPOCH, None, item)
    a.maybe_increment_hw(200)
    assert a.hw == 100
    assert not a.hw > 150


# ------------------------------------------------------------------- acks / min ISR


def test_acks_all_and_min_isr_checks():
    p = make_leader(isr=(1, 2), replicas=(1, 2, 3), leo=100, hw=100)
    assert p.hw > 99
    assert not p.hw > 100
    assert not p.under_min_isr(2)
    assert p.under_min_isr(3)
    # pending expansion: maximal has 3 members, committed 2 — before-append check uses committed
    p.update_follower_fetch(3, 100, 100, 1)
    assert p.under_min_isr(3)
    assert p.check_enough_replicas_reach_offset(100, 3) == (True, ErrorCode.NONE)
    assert p.check_enough_replicas_reach_offset(101, 2) == (False, ErrorCode.NONE)


def test_not_enough_replicas_after_append():
    p = make_leader(isr=(1,), replicas=(1, 2), leo=100, hw=100)
    assert p.check_enough_replicas_reach_offset(100, 2) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    p.become_follower(LeaderAndIsrState(2, 6, (2,), 11, (1, 2)), 0)
    assert p.check_enough_replicas_reach_offset(100, 1) == (False, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_validate_leader_epoch():
    p = make_leader(leader_epoch=5)
    assert p.validate_leader_epoch(5) == ErrorCode.NONE
    assert p.validate_leader_epoch(-1) == ErrorCode.NONE
    assert p.validate_leader_epoch(4) == ErrorCode.FENCED_LEADER_EPOCH
    assert p.validate_leader_epoch(6) == ErrorCode.UNKNOWN_LEADER_EPOCH


# ------------------------------------------------------------------- follower side


def test_follower_hw_is_min_of_leader_hw_and_own_leo_never_backwards():
    p = PartitionReplicaState("t", 0, 2)
    p.become_follower(LeaderAndIsrState(1, 1, (1, 2), 0, (1, 2)), 0)
    assert p.follower_update_hw(leader_hw=50, local_leo=40) is True
    assert p.hw == 40
    assert p.follower_update_hw(leader_hw=30, local_leo=60) is False  # would go back
    assert p.hw == 40
    assert p.follower_update_hw(leader_hw=55, local_leo=60) is True
    assert p.hw == 55
    assert p.on_truncate(45) is True  # only truncation lowers it
    assert p.hw == 45
    with pytest.raises(NotLeaderOrFollowerError):
        make_leader().follower_update_hw(1, 1)
