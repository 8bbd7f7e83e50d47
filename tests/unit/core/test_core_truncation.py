"""KIP-101: truncation by leader epoch keeps logs consistent where truncate-to-HW does not.

Logs are modelled as lists indexed by offset of (leader epoch, payload) records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core.invariants import check_acked_not_lost, check_replicas_identical_below_hw
from kafkalite.core.truncation import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    assign_epoch,
    diverging_epoch_check,
    end_offset_for_epoch,
    follower_truncation_state,
    latest_epoch,
    truncate_epochs_from_end,
)


def truncation_offset(*args):
    return follower_truncation_state(*args).truncate_to


def epochs_of(log):
    """The leader-epoch checkpoint a replica would hold for `log`."""
    entries = []
    for offset, (epoch, _) in enumerate(log):
        if not entries or entries[-1][0] != epoch:
            entries.append((epoch, offset))
    return entries


def truncate_by_epoch(follower_log, leader_log, follower_hw=0):
    """The follower side of OffsetsForLeaderEpoch, repeated until completed."""
    log = list(follower_log)
    while True:
        entries = epochs_of(log)
        answer = end_offset_for_epoch(epochs_of(leader_log), len(leader_log), latest_epoch(entries))
        state = follower_truncation_state(entries, len(log), answer, local_hw=min(follower_hw, len(log)))
        del log[state.truncate_to:]
        if state.completed:
            return log


def catch_up(follower_log, leader_log):
    assert follower_log == leader_log[: len(follower_log)]
    return follower_log + leader_log[len(follower_log):]


# ---------------------------------------------------------- KIP-101 scenario 1


def test_kip101_scenario1_truncate_to_hw_loses_acknowledged_write():
    # A leads epoch 0; m1, m2 replicated to B; A's HW = 2 so m2 was acknowledged (acks=all);
    # B learns HW 2 only on its next fetch, so B's HW is 1. B restarts.
    m1, m2 = (0, "m1"), (0, "m2")
    a_log, b_log = [m1, m2], [m1, m2]
    acked = {0: m1, 1: m2}
    b_hw = 1
    # seed 000 section C: truncate to HW, then A dies and B becomes leader.
    b_after_hw_truncation = b_log[:b_hw]
    assert check_acked_not_lost(acked, b_after_hw_truncation) != []  # m2 is gone
    # KIP-101: B asks A for the end of epoch 0 (A still leads at that point).
    b_after_epoch_truncation = truncate_by_epoch(b_log, a_log, follower_hw=b_hw)
    assert b_after_epoch_truncation == [m1, m2]
    assert check_acked_not_lost(acked, b_after_epoch_truncation) == []


def test_kip101_scenario1_offset_function_directly():
    answer = end_offset_for_epoch([(0, 0)], 2, requested_epoch=0)
    assert answer == EpochEndOffset(0, 2)
    assert truncation_offset([(0, 0)], 2, answer) == 2


# ---------------------------------------------------------- KIP-101 scenario 2


def test_kip101_scenario2_truncate_to_hw_lets_replicas_diverge():
    # A (leader, epoch 0) has m1, m2 and HW 2; B has only m1 and HW 1. Both crash. B comes
    # back first, becomes leader (epoch 1) and appends m3 at offset 1. Then A comes back.
    m1, m2, m3 = (0, "m1"), (0, "m2"), (1, "m3")
    a_log, a_hw = [m1, m2], 2
    b_log = [m1, m3]  # B as the new leader, HW 2 (ISR {B})
    hw = 2
    a_hw_truncated = catch_up_unchecked(a_log[:a_hw], b_log)
    assert check_replicas_identical_below_hw({1: a_hw_truncated, 2: b_log}, hw) != []
    a_epoch_truncated = truncate_by_epoch(a_log, b_log, follower_hw=a_hw)
    assert a_epoch_truncated == [m1]
    a_caught_up = catch_up(a_epoch_truncated, b_log)
    assert check_replicas_identical_below_hw({1: a_caught_up, 2: b_log}, hw) == []


def catch_up_unchecked(follower_log, leader_log):
    """What the seed's fetcher does: fetch from its LEO, no questions asked."""
    return follower_log + leader_log[len(follower_log):]


def test_kip101_scenario2_offset_function_directly():
    leader_entries = [(0, 0), (1, 1)]
    answer = end_offset_for_epoch(leader_entries, 2, requested_epoch=0)
    assert answer == EpochEndOffset(0, 1)
    assert truncation_offset([(0, 0)], 2, answer) == 1


# -------------------------------------------------- OffsetsForLeaderEpoch semantics


def test_end_offset_for_epoch_cases():
    entries = [(1, 0), (3, 10), (6, 25)]
    leo = 40
    assert end_offset_for_epoch(entries, leo, 6) == EpochEndOffset(6, 40)  # latest: LEO
    assert end_offset_for_epoch(entries, leo, 3) == EpochEndOffset(3, 25)
    assert end_offset_for_epoch(entries, leo, 4) == EpochEndOffset(3, 25)  # floor epoch
    assert end_offset_for_epoch(entries, leo, 0) == EpochEndOffset(0, 0)  # before the first
    assert end_offset_for_epoch(entries, leo, 7) == EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert end_offset_for_epoch(entries, leo, UNDEFINED_EPOCH) == EpochEndOffset(-1, -1)
    assert end_offset_for_epoch([], 0, 3) == EpochEndOffset(-1, -1)


def test_follower_truncation_needs_another_round_for_unknown_epoch():
    # follower knows epochs 0 and 2; leader answered epoch 1 (which follower never saw)
    state = follower_truncation_state([(0, 0), (2, 5)], 8, (1, 4))
    assert state.truncate_to == 5  # end of follower's epoch 0 (start of its epoch 2)
    assert state.completed is False


def test_follower_truncation_undefined_answer_falls_back_to_hw():
    state = follower_truncation_state([(0, 0)], 8, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), local_hw=3)
    assert state.truncate_to == 3
    assert state.completed
    assert truncation_offset([(0, 0)], 8, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)) == 0


def test_follower_truncation_never_beyond_own_leo():
    assert truncation_offset([(0, 0)], 2, (0, 9)) == 2


def test_assign_and_truncate_epochs():
    entries = []
    assert assign_epoch(entries, 0, 0)
    assert assign_epoch(entries, 2, 5)
    assert not assign_epoch(entries, 2, 7)  # already known
    truncate_epochs_from_end(entries, 5)
    assert entries == [(0, 0)]
    assert assign_epoch(entries, 3, 4)
    assert entries == [(0, 0), (3, 4)]


def test_diverging_epoch_check():
    leader = [(0, 0), (1, 1)]
    assert diverging_epoch_check(leader, 2, fetch_offset=1, last_fetched_epoch=0) is None
    assert diverging_epoch_check(leader, 2, fetch_offset=2, last_fetched_epoch=0) == EpochEndOffset(0, 1)
    assert diverging_epoch_check(leader, 2, fetch_offset=2, last_fetched_epoch=1) is None


# ----------------------------------------------------------- property: consistency


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 3)),
            st.tuples(st.just("replicate"), st.integers(0, 2), st.integers(1, 4)),
            st.tuples(st.just("elect"), st.integers(0, 2)),
        ),
        max_size=40,
    )
)
def test_truncation_by_epoch_makes_every_follower_a_prefix_of_the_leader(actions):
    """Any history of appends, partial replication and (even unclean) elections: after a
    follower truncates by epoch, its log is a prefix of the new leader's."""
    logs = {0: [], 1: [], 2: []}
    leader, epoch, counter = 0, 0, 0
    for action in actions:
        if action[0] == "append":
            for _ in range(action[1]):
                counter += 1
                logs[leader].append((epoch, counter))
        elif action[0] == "replicate":
            follower = action[1]
            if follower != leader:
                logs[follower] = catch_up(logs[follower], logs[leader][: len(logs[follower]) + action[2]])
        else:
            leader, epoch = action[1], epoch + 1
            for follower in logs:
                if follower != leader:
                    logs[follower] = truncate_by_epoch(logs[follower], logs[leader])
                    assert logs[follower] == logs[leader][: len(logs[follower])]
