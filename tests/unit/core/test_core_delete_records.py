"""DeleteRecords' pure parts: the leader's decision, the low watermark over the ISR, the
delayed operation behind the acks, and the producer state following the log start."""

from __future__ import annotations

import pytest

from kafkalite.core.codes import ErrorCode, NotLeaderOrFollowerError, OffsetOutOfRangeError, PolicyViolationError
from kafkalite.core.delete_records import (
    HIGH_WATERMARK,
    DelayedDeleteRecords,
    DeleteRecordsPartitionStatus,
    decide_log_start,
)
from kafkalite.core.producer_state import ProducerStateTable
from kafkalite.core.purgatory import Purgatory
from kafkalite.core.replica_state import LeaderAndIsrState, PartitionReplicaState

TP = ("t", 0)


def test_decide_log_start_takes_the_offset_or_the_hw_for_minus_one():
    assert decide_log_start(TP, 30, is_leader=True, hw=50) == 30
    assert decide_log_start(TP, 50, is_leader=True, hw=50) == 50
    assert decide_log_start(TP, HIGH_WATERMARK, is_leader=True, hw=50) == 50
    assert decide_log_start(TP, 0, is_leader=True, hw=50) == 0  # at or below the log start: nothing new


def test_decide_log_start_refuses_above_the_hw_negative_offsets_and_followers():
    with pytest.raises(OffsetOutOfRangeError, match="above the high watermark 50"):
        decide_log_start(TP, 51, is_leader=True, hw=50)
    with pytest.raises(OffsetOutOfRangeError, match="not valid"):
        decide_log_start(TP, -2, is_leader=True, hw=50)
    with pytest.raises(NotLeaderOrFollowerError):
        decide_log_start(TP, 10, is_leader=False, hw=50)
    with pytest.raises(PolicyViolationError, match="compact"):
        decide_log_start(TP, 10, is_leader=True, hw=50, deletion_allowed=False)


def leader(isr=(1, 2, 3), leo=100, hw=100, log_start=0) -> PartitionReplicaState:
    p = PartitionReplicaState("t", 0, 1)
    assert p.become_leader(LeaderAndIsrState(1, 5, tuple(isr), 10, (1, 2, 3), 1), leo, hw, 0, log_start)
    return p


def test_low_watermark_is_the_least_log_start_over_the_isr():
    p = leader()
    assert p.low_watermark() == -1  # the followers have not said theirs yet
    p.update_follower_fetch(2, 100, 100, 1, follower_log_start=0)
    p.update_follower_fetch(3, 100, 100, 1, follower_log_start=0)
    assert p.low_watermark() == 0
    assert p.maybe_update_log_start_offset(60)
    assert p.low_watermark() == 0
    r = p.update_follower_fetch(2, 100, 100, 2, follower_log_start=60)
    assert r.log_start_changed
    assert not p.update_follower_fetch(2, 100, 100, 3, follower_log_start=60).log_start_changed
    assert p.low_watermark() == 0
    p.update_follower_fetch(3, 100, 100, 3, follower_log_start=60)
    assert p.low_watermark() == 60


def test_a_follower_outside_the_isr_does_not_hold_the_low_watermark_back():
    p = leader(isr=(1, 2))
    p.update_follower_fetch(2, 100, 100, 1, follower_log_start=40)
    p.maybe_update_log_start_offset(40)
    assert p.low_watermark() == 40  # 3 is out of the ISR, its log start (unknown) does not count


def test_leader_log_start_never_passes_its_hw():
    p = leader(hw=50)
    with pytest.raises(AssertionError):
        p.maybe_update_log_start_offset(51)


class FakeReplica:
    def __init__(self, low: int, is_leader: bool = True) -> None:
        self.low = low
        self.is_leader = is_leader

    def low_watermark(self) -> int:
        return self.low


def test_delayed_delete_records_completes_when_the_low_watermark_reaches_the_new_log_start():
    a, b = ("t", 0), ("t", 1)
    replicas = {a: FakeReplica(10), b: FakeReplica(5)}
    op = DelayedDeleteRecords({a: DeleteRecordsPartitionStatus(20), b: DeleteRecordsPartitionStatus(5)})
    purgatory = Purgatory[str]()
    assert purgatory.add("op", [a, b], 1000, lambda: op.try_complete(replicas.get)) is False
    assert op.partitions[b].done  # already there
    assert purgatory.check_and_complete(a) == []
    replicas[a].low = 20
    assert purgatory.check_and_complete(a) == ["op"]
    assert op.result() == {a: (ErrorCode.NONE, 20), b: (ErrorCode.NONE, 5)}


def test_delayed_delete_records_fails_partitions_that_lost_leadership_or_their_replica():
    a, b = ("t", 0), ("t", 1)
    replicas = {a: FakeReplica(0, is_leader=False)}
    op = DelayedDeleteRecords({a: DeleteRecordsPartitionStatus(20), b: DeleteRecordsPartitionStatus(5)})
    assert op.try_complete(replicas.get)
    assert op.result() == {a: (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1), b: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}


def test_delayed_delete_records_expires_with_the_low_watermark_reached_so_far():
    replicas = {TP: FakeReplica(7)}
    op = DelayedDeleteRecords({TP: DeleteRecordsPartitionStatus(20)})
    purgatory = Purgatory[str]()
    assert purgatory.add("op", [TP], 1000, lambda: op.try_complete(replicas.get)) is False
    assert purgatory.poll(999) == []
    assert purgatory.poll(1000) == ["op"]
    op.on_expiration()
    assert op.result() == {TP: (ErrorCode.REQUEST_TIMED_OUT, 7)}


def test_producer_state_forgets_producers_wholly_below_the_log_start():
    table = ProducerStateTable()
    table.record(1, 0, 0, 4, 0, 4)
    table.record(2, 0, 0, 4, 5, 9)
    table.record(1, 0, 5, 9, 10, 14)
    assert table.evict_below(10) == 1  # producer 2's last batch ends at 9; producer 1's at 14
    assert table.entry(2) is None
    assert table.entry(1) is not None
    assert table.evict_below(15) == 1
    assert len(table) == 0
