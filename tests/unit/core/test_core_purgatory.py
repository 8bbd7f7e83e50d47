"""Purgatory: complete exactly once, expire, bounded; DelayedProduce / DelayedFetch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core.codes import ErrorCode, PurgatoryFullError
from kafkalite.core.purgatory import (
    DelayedFetch,
    DelayedProduce,
    FetchPartitionStatus,
    FetchProbe,
    ProducePartitionStatus,
    Purgatory,
)
from kafkalite.core.replica_state import LeaderAndIsrState, PartitionReplicaState

A, B = ("t", 0), ("t", 1)


def test_add_completes_immediately_when_check_is_true():
    purgatory = Purgatory()
    assert purgatory.add("op", [A], 100, lambda: True) is True
    assert purgatory.size == 0


def test_check_and_complete_completes_once_and_removes_from_every_key():
    purgatory = Purgatory()
    ready = {"flag": False}
    assert purgatory.add("op", [A, B], 100, lambda: ready["flag"]) is False
    assert purgatory.check_and_complete(A) == []
    ready["flag"] = True
    assert purgatory.check_and_complete(A) == ["op"]
    assert purgatory.check_and_complete(B) == []  # gone from B too
    assert purgatory.poll(1_000) == []  # and never expires
    assert purgatory.size == 0
    assert purgatory.next_deadline_ms is None


def test_expiry_removes_from_every_key_and_never_completes_after():
    purgatory = Purgatory()
    purgatory.add("slow", [A, B], 100, lambda: False)
    purgatory.add("later", [A], 200, lambda: False)
    assert purgatory.next_deadline_ms == 100
    assert purgatory.poll(99) == []
    assert purgatory.poll(100) == ["slow"]
    assert purgatory.next_deadline_ms == 200
    assert "slow" not in purgatory
    assert purgatory.check_and_complete(B) == []


def test_bounded_size():
    purgatory = Purgatory(size_max=2)
    purgatory.add(1, [A], 10, lambda: False)
    purgatory.add(2, [A], 10, lambda: False)
    with pytest.raises(PurgatoryFullError):
        purgatory.add(3, [A], 10, lambda: False)
    with pytest.raises(ValueError):
        purgatory.add(1, [A], 10, lambda: False)


def test_cancel():
    purgatory = Purgatory()
    purgatory.add(1, [A], 10, lambda: False)
    purgatory.add(2, [A], 10, lambda: False)
    assert purgatory.cancel(1) is True
    assert purgatory.cancel(1) is False
    assert purgatory.poll(100) == [2]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 3), st.integers(0, 50)),
            st.tuples(st.just("ready"), st.integers(0, 3)),
            st.tuples(st.just("poll"), st.integers(0, 60)),
        ),
        max_size=60,
    )
)
def test_every_operation_ends_exactly_once(steps):
    purgatory: Purgatory[int] = Purgatory()
    ready: set[int] = set()
    ended: list[int] = []
    next_id = 0
    now = 0
    for step in steps:
        if step[0] == "add":
            key, deadline = step[1], now + step[2]
            op_id = next_id
            next_id += 1
            if purgatory.add(op_id, [key, (key + 1) % 4], deadline, lambda k=key: k in ready):
                ended.append(op_id)
        elif step[0] == "ready":
            ready.add(step[1])
            ended.extend(purgatory.check_and_complete(step[1]))
        else:
            now += step[1]
            ended.extend(purgatory.poll(now))
        assert len(ended) == len(set(ended))
    ended.extend(purgatory.poll(10**9))
    assert sorted(ended) == list(range(next_id))
    assert purgatory.size == 0


# ----------------------------------------------------------------- DelayedProduce


class Replica:
    """A PartitionLookup: the core replica state plus the epoch of each offset in the log."""

    def __init__(self, state: PartitionReplicaState, epochs: list[int]):
        self.state = state
        self.epochs = epochs  # epochs[offset] = the leader epoch of the batch at offset

    @property
    def is_leader(self) -> bool:
        return self.state.is_leader

    def epoch_at(self, offset: int) -> int:
        return self.epochs[offset] if 0 <= offset < len(self.epochs) else -1

    def check_enough_replicas_reach_offset(self, required_offset: int, min_insync_replicas: int):
        return self.state.check_enough_replicas_reach_offset(required_offset, min_insync_replicas)


def leader(isr=(1, 2), leo=10, hw=0, epoch=3, replicas=(1, 2)):
    p = PartitionReplicaState("t", 0, 1)
    p.become_leader(LeaderAndIsrState(1, epoch, isr, 0, replicas), leo, hw, 0)
    return Replica(p, [epoch] * leo)


def test_delayed_produce_completes_when_hw_passes_last_offset():
    partition = leader()
    produce = DelayedProduce({A: ProducePartitionStatus(last_offset=9, leader_epoch=3, min_insync_replicas=2)})
    purgatory = Purgatory()
    check = lambda: produce.try_complete({A: partition}.get)  # noqa: E731
    assert purgatory.add("p", [A], 1_000, check) is False
    partition.state.update_follower_fetch(2, 5, 10, 1)
    assert purgatory.check_and_complete(A) == []
    partition.state.update_follower_fetch(2, 10, 10, 2)
    assert purgatory.check_and_complete(A) == ["p"]
    assert produce.result() == {A: ErrorCode.NONE}


def test_delayed_produce_fails_when_leadership_lost_or_batch_not_held_as_appended():
    partition = leader()
    produce = DelayedProduce({A: ProducePartitionStatus(9, 3, 2), B: ProducePartitionStatus(9, 2, 1)})
    assert produce.try_complete({A: partition, B: partition}.get) is False  # B: offset 9 holds epoch 3, not 2
    assert produce.partitions[B].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    partition.state.become_follower(LeaderAndIsrState(2, 4, (2,), 1, (1, 2)), 5)
    assert produce.try_complete({A: partition}.get) is True
    assert produce.result() == {A: ErrorCode.NOT_LEADER_OR_FOLLOWER, B: ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_delayed_produce_survives_an_epoch_bump_of_a_leader_that_kept_the_batch():
    """The controller shrank the ISR after a follower died and bumped the leader epoch: the
    leader still holds the batch, so it acknowledges once the HW passes (issue 7: failing
    here made librdkafka report later batches' predecessors delivered without offsets)."""
    partition = leader(isr=(1, 2, 3), leo=10, epoch=3, replicas=(1, 2, 3))
    produce = DelayedProduce({A: ProducePartitionStatus(9, 3, 2)})
    assert produce.try_complete({A: partition}.get) is False
    partition.state.become_leader(LeaderAndIsrState(1, 4, (1, 2), 1, (1, 2, 3)), 10, 0, 1)
    assert produce.try_complete({A: partition}.get) is False  # still waiting for the HW
    partition.state.update_follower_fetch(2, 10, 10, 2)
    assert produce.try_complete({A: partition}.get) is True
    assert produce.result() == {A: ErrorCode.NONE}


def test_delayed_produce_fails_when_a_returning_leader_rewrote_the_offsets():
    """Deposed, truncated, re-fetched the new leader's epoch-4 batches, leads again at 5:
    offset 9 now holds another batch, so the old append must not be acknowledged."""
    partition = leader(isr=(1, 2), leo=10, epoch=3)
    produce = DelayedProduce({A: ProducePartitionStatus(9, 3, 2)})
    assert produce.try_complete({A: partition}.get) is False
    partition.epochs[5:] = [4] * 5
    partition.state.become_leader(LeaderAndIsrState(1, 5, (1, 2), 2, (1, 2)), 10, 0, 3)
    partition.state.update_follower_fetch(2, 10, 10, 4)
    assert produce.try_complete({A: partition}.get) is True
    assert produce.result() == {A: ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_delayed_produce_expiry_times_out_pending_partitions():
    partition = leader(isr=(1, 2), leo=60)
    partition.state.update_follower_fetch(2, 10, 60, 1)  # HW 10
    produce = DelayedProduce({A: ProducePartitionStatus(9, 3, 1), B: ProducePartitionStatus(50, 3, 1)})
    assert produce.try_complete({A: partition, B: partition}.get) is False
    produce.on_expiration()
    assert produce.result() == {A: ErrorCode.NONE, B: ErrorCode.REQUEST_TIMED_OUT}


# ------------------------------------------------------------------- DelayedFetch


def test_delayed_fetch_min_bytes_and_leadership_change():
    fetch = DelayedFetch({A: FetchPartitionStatus(5, 3), B: FetchPartitionStatus(0, -1)}, min_bytes=100)
    probes = {A: FetchProbe(3, 10, 40), B: FetchProbe(7, 10, 50)}
    assert fetch.try_complete(lambda key, offset: probes[key]) is False
    probes[B] = FetchProbe(7, 12, 60)
    assert fetch.try_complete(lambda key, offset: probes[key]) is True
    fetch2 = DelayedFetch({A: FetchPartitionStatus(5, 3)}, min_bytes=100)
    assert fetch2.try_complete(lambda key, offset: FetchProbe(4, 10, 0)) is True
    assert fetch2.error_partitions == {A}
    fetch3 = DelayedFetch({A: FetchPartitionStatus(5, 3)}, min_bytes=100)
    assert fetch3.try_complete(lambda key, offset: None) is True
    fetch4 = DelayedFetch({A: FetchPartitionStatus(50, 3)}, min_bytes=100)
    assert fetch4.try_complete(lambda key, offset: FetchProbe(3, 10, 0)) is True  # truncated below


def test_delayed_fetch_of_a_consumer_ahead_of_the_hw_waits_until_beyond_the_log_end():
    """A consumer whose offset is above the serving replica's HW but within its log (a
    follower that learns the HW one fetch late, a new leader) waits for the HW, as Kafka's
    delayed fetch does; one beyond the log end is answered at once (it is an error)."""
    ahead = DelayedFetch({A: FetchPartitionStatus(12, 3)}, min_bytes=1)
    assert ahead.try_complete(lambda key, offset: FetchProbe(3, 10, 0, log_end_offset=15)) is False
    assert ahead.try_complete(lambda key, offset: FetchProbe(3, 13, 40, log_end_offset=15)) is True  # the HW moved past it
    beyond = DelayedFetch({A: FetchPartitionStatus(16, 3)}, min_bytes=1)
    assert beyond.try_complete(lambda key, offset: FetchProbe(3, 10, 0, log_end_offset=15)) is True
    assert beyond.error_partitions == set()


def test_delayed_fetch_below_the_log_start_is_answered_at_once():
    """Retention or DeleteRecords moved the log start past a waiting consumer's offset: it
    is answered now (OFFSET_OUT_OF_RANGE, Kafka's DelayedFetch case F), not at max_wait."""
    below = DelayedFetch({A: FetchPartitionStatus(5, 3)}, min_bytes=1)
    assert below.try_complete(lambda key, offset: FetchProbe(3, 10, 0, log_start_offset=5)) is False
    assert below.try_complete(lambda key, offset: FetchProbe(3, 10, 0, log_start_offset=6)) is True


def test_delayed_fetch_of_a_follower_at_the_log_end_waits_for_records():
    """A follower's fetch at the leader's log end completes on records (or max wait), not
    on the HW moving (Kafka since KAFKA-9952)."""
    fetch = DelayedFetch({A: FetchPartitionStatus(10, 3)}, min_bytes=1)
    assert fetch.try_complete(lambda key, offset: FetchProbe(3, 10, 0)) is False
    assert fetch.try_complete(lambda key, offset: FetchProbe(3, 11, 70)) is True
    assert fetch.error_partitions == set()
