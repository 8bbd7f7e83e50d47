"""Incremental replica fetch sessions (kafkalite.core.fetch_session) and the ISR refresh of
idle session partitions (PartitionReplicaState.follower_still_caught_up)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core.codes import ErrorCode
from kafkalite.core.fetch_session import (
    FetchSessionIdNotFoundError,
    FetchSessions,
    InvalidFetchSessionEpochError,
    SessionPartition,
)
from kafkalite.core.replica_state import LeaderAndIsrState, PartitionReplicaState

A, B, C = ("t", 0), ("t", 1), ("t", 2)


def sp(offset: int, epoch: int = 3, last: int = 3) -> SessionPartition:
    return SessionPartition(offset, epoch, last)


def test_a_full_request_starts_a_session_and_an_incremental_one_reads_only_changes():
    sessions = FetchSessions()
    s = sessions.start(2, {A: sp(10), B: sp(20), C: sp(30)}, now_ms=100)
    assert s.epoch == 1
    assert sessions.get(2, s.session_id, 1) is s
    # nothing changed anywhere: nothing to read
    assert s.apply({}, (), now_ms=200) == []
    assert s.epoch == 2
    assert s.last_request_ms == 200
    # the follower moved on A; the leader appended to C meanwhile
    sessions.mark(C)
    assert s.apply({A: sp(15)}, (), now_ms=300) == [A, C]
    assert s.partitions[A] == sp(15)
    assert s.dirty == set()
    # forgotten partitions leave the session, and their marks with them
    sessions.mark(B)
    assert s.apply({}, [B], now_ms=400) == []
    assert B not in s.partitions


def test_a_mark_reaches_only_the_sessions_holding_the_partition():
    sessions = FetchSessions()
    s2 = sessions.start(2, {A: sp(1)}, 0)
    s3 = sessions.start(3, {B: sp(1)}, 0)
    assert sessions.mark(A) == [s2]
    assert s2.dirty == {A}
    assert s3.dirty == set()
    assert sessions.mark(("other", 0)) == []


def test_unknown_or_replaced_sessions_and_wrong_epochs_are_refused_with_kafkas_codes():
    sessions = FetchSessions()
    old = sessions.start(2, {A: sp(1)}, 0)
    new = sessions.start(2, {A: sp(1)}, 0)  # the follower restarted: its new full request replaces the old
    assert new.session_id != old.session_id
    with pytest.raises(FetchSessionIdNotFoundError) as e:
        sessions.get(2, old.session_id, 1)
    assert e.value.code is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.get(3, new.session_id, 1)  # another follower's id
    with pytest.raises(InvalidFetchSessionEpochError) as e2:
        sessions.get(2, new.session_id, 7)
    assert e2.value.code is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # out of sequence: the session is dropped, the follower must start a new one
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.get(2, new.session_id, 1)


def test_idle_caught_up_lists_clean_partitions_as_of_the_last_request():
    sessions = FetchSessions()
    s = sessions.start(2, {A: sp(10), B: sp(20)}, now_ms=100)
    s.apply({}, (), now_ms=500)
    sessions.mark(B)
    assert list(sessions.idle_caught_up()) == [(2, A, 10, 500)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["req", "mark", "forget"]), st.sampled_from([A, B, C]), st.integers(0, 50)), max_size=40))
def test_the_session_always_holds_what_the_follower_last_said_and_reads_every_change(steps):
    """Model: the follower's view (what it last said per partition) and the set of
    partitions changed on the leader since they were last read. Every change is read at
    the next request, and the session's partitions equal the follower's view."""
    sessions = FetchSessions()
    view = {A: sp(0), B: sp(0), C: sp(0)}
    s = sessions.start(2, dict(view), 0)
    unread: set = set()
    now = 0
    for kind, tp, offset in steps:
        now += 1
        if kind == "mark":
            sessions.mark(tp)
            if tp in view:
                unread.add(tp)
        elif kind == "forget":
            if tp in view:
                del view[tp]
                unread.discard(tp)
            s.apply({}, [tp], now)
            unread.clear()  # the other marked partitions were read by this request
        else:
            view[tp] = sp(offset)
            read = s.apply({tp: sp(offset)}, (), now)
            assert set(read) == unread | {tp}
            unread.clear()
        assert s.partitions == view
        assert s.dirty == unread


def _leader(now_ms: int = 0) -> PartitionReplicaState:
    p = PartitionReplicaState("t", 0, 1)
    p.become_leader(LeaderAndIsrState(1, 5, (1, 2, 3), 10, (1, 2, 3), 1), 100, 100, now_ms)
    return p


def test_an_idle_follower_at_the_leaders_leo_stays_caught_up_as_of_its_last_request():
    p = _leader(now_ms=0)
    for follower in (2, 3):
        p.update_follower_fetch(follower, 100, 100, 1_000)
        p.follower_still_caught_up(follower, 100, 100, as_of_ms=9_000)
    assert p.follower_state(2).last_caught_up_ms == 9_000
    # The leader appends (LEO 120); the followers have not fetched it yet. Caught up 6 s
    # ago: still in sync (without the refresh: 14 s ago, out); 10 s after, out.
    assert p.maybe_shrink_isr(15_000, 10_000, 120) is None
    assert p.maybe_shrink_isr(19_001, 10_000, 120) is not None
    # an older as-of never moves it back
    p.follower_still_caught_up(3, 100, 100, as_of_ms=5_000)
    assert p.follower_state(3).last_caught_up_ms == 9_000


def test_an_idle_refresh_changes_nothing_unless_the_follower_is_at_the_leaders_leo():
    p = _leader(now_ms=0)
    p.update_follower_fetch(2, 100, 100, 1_000)
    p.follower_still_caught_up(2, 90, 100, as_of_ms=9_000)  # not what we know of its LEO
    p.follower_still_caught_up(2, 100, 120, as_of_ms=9_000)  # we have more than it fetched
    p.follower_still_caught_up(3, 100, 100, as_of_ms=9_000)  # 3 never fetched: LEO unknown
    assert p.follower_state(2).last_caught_up_ms == 1_000
    assert p.follower_state(3).last_caught_up_ms == 0
    # a follower that stopped fetching is not refreshed, so it leaves the ISR in time
    item = p.maybe_shrink_isr(12_000, 10_000, 120)
    assert item is not None
    assert 2 not in item.new_isr


def test_an_idle_follower_outside_the_isr_is_read_again_so_it_can_be_added_back():
    p = PartitionReplicaState("t", 0, 1)
    p.become_leader(LeaderAndIsrState(1, 5, (1, 2), 10, (1, 2, 3), 1), 100, 100, 0)
    p.update_follower_fetch(2, 100, 100, 1_000)
    assert p.follower_still_caught_up(2, 100, 100, as_of_ms=2_000) is False  # in the ISR: nothing to read
    assert p.follower_still_caught_up(3, 100, 100, as_of_ms=2_000) is True  # outside it: read, which proposes it
