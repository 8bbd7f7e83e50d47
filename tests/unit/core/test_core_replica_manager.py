"""The core replica manager (kafkalite.core.replica_manager), over an in-memory log port."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from kafkalite.core.codes import CoreError, ErrorCode, NotLeaderOrFollowerError, OffsetOutOfRangeError
from kafkalite.core.messages import AlterIsrPartitionResult, AlterIsrResponse, LeaderAndIsr, PartitionLeadership
from kafkalite.core.replica_manager import (
    FetchErrorAction,
    NotEnoughReplicasError,
    Replica,
    ReplicaManager,
    StaleBrokerEpochError,
    StaleControllerEpochError,
    TopicIdAction,
    after_fetch_error,
    topic_id_action,
)
from kafkalite.core.truncation import assign_epoch, truncate_epochs_from_end

TP = ("t", 0)


@dataclass
class MemLog:
    records: list[int] = field(default_factory=list)  # the leader epoch of each offset
    epochs: list[tuple[int, int]] = field(default_factory=list)
    topic_id: str | None = None

    def assign_topic_id(self, topic_id):
        assert self.topic_id in (None, topic_id)
        self.topic_id = topic_id

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    start: int = 0  # the log start (retention, DeleteRecords)

    @property
    def log_start_offset(self) -> int:
        return self.start

    def epoch_entries(self):
        return self.epochs

    def assign_epoch(self, epoch, start_offset):
        assign_epoch(self.epochs, epoch, start_offset)

    def truncate_to(self, offset):
        del self.records[offset:]
        truncate_epochs_from_end(self.epochs, offset)

    def append(self, epoch: int, n: int = 1) -> None:
        self.assign_epoch(epoch, len(self.records))
        self.records += [epoch] * n


def manager(broker_id: int = 1) -> tuple[ReplicaManager, dict]:
    logs: dict = {}

    def open_replica(tp, config, fresh):
        if fresh:
            logs[tp] = MemLog()
        return Replica(tp[0], tp[1], broker_id, logs.setdefault(tp, MemLog()), 0)

    rm = ReplicaManager(broker_id, open_replica)
    rm.broker_epoch = 10
    return rm, logs


def lai(leader, epoch, isr=(1, 2, 3), version=0, *, controller_epoch=1, broker_epoch=10, init=False, tp=TP):
    return LeaderAndIsr(9, controller_epoch, broker_epoch,
                        (PartitionLeadership(tp[0], tp[1], leader, epoch, tuple(isr), version, (1, 2, 3)),), init)


def test_fencing_by_controller_and_broker_epoch():
    rm, _ = manager()
    rm.on_leader_and_isr(lai(1, 0, controller_epoch=5), 0)
    with pytest.raises(StaleControllerEpochError):
        rm.on_leader_and_isr(lai(1, 1, controller_epoch=4), 0)
    with pytest.raises(StaleBrokerEpochError):
        rm.on_leader_and_isr(lai(1, 1, controller_epoch=5, broker_epoch=9), 0)
    rm.on_leader_and_isr(lai(1, 1, controller_epoch=5, broker_epoch=11), 0)  # our own newer registration (KIP-380)
    assert rm.replicas[TP].leader_epoch == 1


def test_leading_assigns_the_epoch_at_the_leo_and_following_starts_one_fetch():
    rm, logs = manager()
    changes = rm.on_leader_and_isr(lai(1, 3), 0)
    assert changes.new_leaderships == [(TP, 3)] and logs[TP].epochs == [(3, 0)]
    changes = rm.on_leader_and_isr(lai(2, 4, version=1), 0)
    assert {tp: (f.leader, f.leader_epoch) for tp, f in changes.fetch.items()} == {TP: (2, 4)} and changes.codes == [(TP, 0)]
    again = rm.on_leader_and_isr(lai(2, 4, version=1), 0)  # re-delivered: already fetching from 2 at 4
    assert again.fetch == {}
    back = rm.on_leader_and_isr(lai(1, 5, version=2), 0)
    assert back.stop_fetching == [TP] and rm.fetching == {}


def test_an_older_leader_epoch_is_fenced_per_partition():
    rm, _ = manager()
    rm.on_leader_and_isr(lai(1, 5), 0)
    assert rm.on_leader_and_isr(lai(2, 4), 0).codes == [(TP, int(ErrorCode.FENCED_LEADER_EPOCH))]
    assert rm.replicas[TP].is_leader


def test_an_init_leader_and_isr_removes_what_it_does_not_list():
    rm, _ = manager()
    rm.on_leader_and_isr(lai(2, 0, tp=("gone", 0)), 0)
    changes = rm.on_leader_and_isr(lai(1, 0, init=True), 0)
    assert changes.removed == [("gone", 0)] and changes.delete and changes.stop_fetching == [("gone", 0)]
    assert set(rm.replicas) == {TP} and rm.last_init_controller_epoch == 1


def lai_with_id(leader, epoch, topic_id, **kw):
    return replace(lai(leader, epoch, **kw), topic_ids={} if topic_id is None else {kw.get("tp", TP)[0]: topic_id})


@pytest.mark.parametrize(("local", "requested", "action"), [
    (None, None, TopicIdAction.KEEP), ("A", None, TopicIdAction.KEEP), ("A", "A", TopicIdAction.KEEP),
    (None, "B", TopicIdAction.RECORD), ("A", "B", TopicIdAction.REPLACE),
])
def test_topic_id_action(local, requested, action):
    assert topic_id_action(local, requested) is action


def test_a_local_log_of_another_topic_id_is_replaced_by_a_fresh_one():
    """KIP-516: t was deleted while this broker was down and created again; the old t-0
    (records, epochs up to 7) must not become the new topic's replica."""
    rm, logs = manager()
    old = logs[TP] = MemLog(topic_id="A")
    old.append(3, 4)
    old.append(7, 2)
    rm.add(Replica(TP[0], TP[1], 1, old, 6))  # found at start-up, no role yet
    rm.on_leader_and_isr(lai_with_id(2, 8, "A"), 0)  # the old topic still: followed, fetching
    assert rm.replicas[TP].replica_log is old and TP in rm.fetching
    changes = rm.on_leader_and_isr(lai_with_id(2, 0, "B", version=0), 0)  # the new topic, epoch 0 < 8
    fresh = rm.replicas[TP]
    assert changes.codes == [(TP, 0)]  # not fenced by the old topic's epochs
    assert changes.replaced == [(TP, "A", "B")]
    assert fresh.replica_log is not old and logs[TP] is fresh.replica_log
    assert fresh.leo == 0 and fresh.hw == 0 and fresh.topic_id == "B" and fresh.replica_log.epochs == []
    assert TP in changes.stop_fetching and changes.fetch[TP].replica is fresh and rm.fetching[TP].replica is fresh
    assert changes.removed == [] and not changes.delete
    # the same id again changes nothing
    again = rm.on_leader_and_isr(lai_with_id(2, 0, "B", version=0), 0)
    assert again.replaced == [] and rm.replicas[TP] is fresh


@pytest.mark.parametrize(("local", "requested"), [("A", "A"), ("A", None), (None, None)])
def test_a_local_log_of_the_same_or_an_unknown_topic_id_is_kept(local, requested):
    rm, logs = manager()
    kept = logs[TP] = MemLog(topic_id=local)
    kept.append(3, 4)
    rm.add(Replica(TP[0], TP[1], 1, kept, 4))
    changes = rm.on_leader_and_isr(lai_with_id(1, 5, requested), 0)
    assert changes.replaced == [] and rm.replicas[TP].replica_log is kept and kept.records == [3] * 4
    assert kept.topic_id == local


def test_a_local_log_without_a_topic_id_is_told_the_requests_and_a_new_one_gets_it():
    rm, logs = manager()
    unlabelled = logs[TP] = MemLog()
    unlabelled.append(3, 4)
    rm.add(Replica(TP[0], TP[1], 1, unlabelled, 4))
    changes = rm.on_leader_and_isr(lai_with_id(1, 5, "A"), 0)
    assert changes.replaced == [] and rm.replicas[TP].replica_log is unlabelled and unlabelled.topic_id == "A"
    assert unlabelled.records == [3] * 4
    rm.on_leader_and_isr(lai_with_id(1, 0, "C", tp=("u", 0)), 0)  # created by the LeaderAndIsr
    assert logs[("u", 0)].topic_id == "C"


def test_the_leader_side_of_a_follower_fetch():
    rm, logs = manager()
    logs[TP] = MemLog()
    logs[TP].append(0, 5)
    rm.on_leader_and_isr(lai(1, 1, isr=(1, 2)), 0)
    logs[TP].append(1, 3)  # offsets 5..7 at epoch 1
    read = rm.follower_fetch(TP, 2, 4, 1, 0, 10)
    assert read.diverging is None and read.upper == 8
    assert read.hw_changed  # HW 0 -> 4
    again = rm.follower_fetch(TP, 2, 4, 1, 0, 11)
    assert not again.hw_changed
    diverged = rm.follower_fetch(TP, 2, 7, 1, 2, 10)  # claims epoch 2, which we never had
    assert diverged.diverging is not None
    with pytest.raises(OffsetOutOfRangeError):
        rm.follower_fetch(TP, 2, 9, 1, -1, 10)  # (with its epoch it would be told DIVERGING_EPOCH)
    with pytest.raises(CoreError) as fenced:
        rm.follower_fetch(TP, 2, 8, 0, 1, 10)
    assert fenced.value.code == ErrorCode.FENCED_LEADER_EPOCH
    assert rm.offsets_for_leader_epoch(TP, 1, 0).end_offset == 5


def test_a_follower_fetch_read_again_after_its_wait_is_fenced_but_updates_nothing():
    """Kafka's DelayedFetch: an in-sync follower's state is updated at the request's first
    read, not again when the woken fetch reads once more; the read again still checks the
    leadership and epoch, and that the offset is still in the log."""
    rm, logs = manager()
    logs[TP] = MemLog()
    logs[TP].append(0, 5)
    rm.on_leader_and_isr(lai(1, 1, isr=(1, 2, 3)), 0)
    rm.follower_fetch(TP, 2, 5, 1, 0, 10)
    state = rm.replicas[TP].state
    before = state.follower_state(2)  # (a copy)
    hw = rm.replicas[TP].hw
    logs[TP].append(1, 2)  # the append that wakes the waiting fetch
    read = rm.follower_fetch(TP, 2, 5, 1, 0, 20, read_again=True)
    assert read.diverging is None and read.upper == 7 and not read.hw_changed
    assert state.follower_state(2) == before and rm.replicas[TP].hw == hw
    with pytest.raises(OffsetOutOfRangeError):
        rm.follower_fetch(TP, 2, 8, 1, 0, 20, read_again=True)
    logs[TP].start = 6  # retention or DeleteRecords moved the log start past it meanwhile
    with pytest.raises(OffsetOutOfRangeError):
        rm.follower_fetch(TP, 2, 5, 1, 0, 20, read_again=True)
    logs[TP].start = 0
    with pytest.raises(CoreError) as fenced:
        rm.follower_fetch(TP, 2, 5, 0, 0, 20, read_again=True)
    assert fenced.value.code == ErrorCode.FENCED_LEADER_EPOCH
    rm.on_leader_and_isr(lai(1, 2, isr=(1, 2, 3)), 30)  # this broker again, in a new epoch
    with pytest.raises(CoreError) as newer:
        rm.follower_fetch(TP, 2, 5, 1, 0, 40, read_again=True)
    assert newer.value.code == ErrorCode.FENCED_LEADER_EPOCH
    rm.on_leader_and_isr(lai(2, 3, isr=(1, 2, 3)), 50)  # leadership went to 2
    with pytest.raises(NotLeaderOrFollowerError):
        rm.follower_fetch(TP, 2, 5, 3, 0, 60, read_again=True)


def test_a_read_again_decides_in_full_for_a_follower_outside_the_isr():
    """The read again may be the one that proposes a caught-up follower back into the ISR
    (the broker's idle-partition check marks a partition for exactly that), and a follower
    reassigned away in the same leader epoch is no replica any more: neither skips the
    decision."""
    rm, logs = manager()
    logs[TP] = MemLog()
    logs[TP].append(0, 5)
    rm.on_leader_and_isr(lai(1, 1, isr=(1, 2)), 0)
    rm.follower_fetch(TP, 3, 5, 1, 0, 10, read_again=True)  # 3 at the log end, outside the ISR
    assert [i.new_isr for i in rm.alter_isr_to_send()] == [(1, 2, 3)]
    gone = LeaderAndIsr(9, 1, 10, (PartitionLeadership(TP[0], TP[1], 1, 1, (1, 2), 1, (1, 2)),), False)
    rm.on_leader_and_isr(gone, 20)  # 3 reassigned away, same leader epoch
    with pytest.raises(CoreError):
        rm.follower_fetch(TP, 3, 5, 1, 0, 30, read_again=True)


def test_alter_isr_one_in_flight_per_partition_retried_until_answered():
    rm, logs = manager()
    rm.on_leader_and_isr(lai(1, 1, isr=(1, 2)), 0)
    rm.follower_fetch(TP, 3, 0, 1, -1, 10)  # 3 caught up: expand
    items = rm.alter_isr_to_send()
    assert [i.new_isr for i in items] == [(1, 2, 3)]
    assert rm.alter_isr_to_send() == []  # in flight
    rm.on_alter_isr_answer(items, None)  # no answer: due again
    retry = rm.alter_isr_to_send()
    assert retry == items
    answer = AlterIsrResponse(0, (AlterIsrPartitionResult("t", 0, 0, 1, 1, (1, 2, 3), 1),))
    rm.on_alter_isr_answer(retry, answer)
    assert rm.replicas[TP].state.isr == (1, 2, 3) and rm.replicas[TP].state.partition_epoch == 1
    assert rm.alter_isr_to_send() == [] and not rm.alter_isr_pending


def test_a_refused_expansion_frees_the_hw_its_new_member_held_back():
    """Broker 3 caught up and was proposed; then it died, records 8-9 reached broker 2 and
    the controller refused the expansion (3 is not live): the committed ISR {1, 2} holds
    them all, so the HW moves at the answer, not at some later append, and the partition is
    reported as moved (its waiting acks=all produces complete)."""
    rm, logs = manager()
    logs[TP] = MemLog()
    logs[TP].append(0, 8)
    rm.on_leader_and_isr(lai(1, 1, isr=(1, 2)), 0)
    rm.follower_fetch(TP, 2, 8, 1, 0, 10)
    rm.follower_fetch(TP, 3, 8, 1, 0, 11)  # caught up: expand
    items = rm.alter_isr_to_send()
    assert [i.new_isr for i in items] == [(1, 2, 3)]
    logs[TP].append(1, 2)
    rm.replicas[TP].leader_appended()
    rm.follower_fetch(TP, 2, 10, 1, 1, 12)
    assert rm.replicas[TP].state.hw == 8  # 3, in the maximal ISR, is at 8
    refused = AlterIsrResponse(0, (AlterIsrPartitionResult("t", 0, int(ErrorCode.INVALID_REQUEST), 1, 1, (1, 2), 0),))
    assert rm.on_alter_isr_answer(items, refused) == [TP]
    assert rm.replicas[TP].state.hw == 10 and rm.replicas[TP].state.isr == (1, 2)


def test_append_checks():
    rm, _ = manager()
    with pytest.raises(CoreError) as unknown:
        rm.check_append(TP, -1, 2)
    assert unknown.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    rm.on_leader_and_isr(lai(2, 0), 0)
    with pytest.raises(NotLeaderOrFollowerError):
        rm.check_append(TP, 1, 1)
    rm.on_leader_and_isr(lai(1, 1, isr=(1,), version=1), 0)
    assert rm.check_append(TP, 1, 2).is_leader  # acks=1 ignores min.insync
    with pytest.raises(NotEnoughReplicasError):
        rm.check_append(TP, -1, 2)


def test_a_follow_truncates_by_epoch_then_fetches_and_backs_off_after_errors():
    rm, logs = manager()
    logs[TP] = MemLog()
    logs[TP].append(0, 3)
    logs[TP].append(1, 2)
    (follow,) = rm.on_leader_and_isr(lai(2, 2), 0).fetch.values()
    assert follow.truncating and follow.ready(0) and follow.latest_epoch() == 1
    follow.in_flight = True
    assert not follow.ready(0)
    follow.on_leader_epoch_end((0, 3))  # the leader's epoch 0 ended at 3: our epoch-1 records go
    assert not follow.truncating and not follow.in_flight and follow.replica.leo == 3
    follow.in_flight = True
    assert follow.on_error(int(ErrorCode.FENCED_LEADER_EPOCH), 100, backoff_ms=10, await_leader_and_isr_ms=1000) is FetchErrorAction.AWAIT_LEADER_AND_ISR
    assert not follow.ready(500) and follow.ready(1100)
    follow.on_error(int(ErrorCode.OFFSET_OUT_OF_RANGE), 1100, backoff_ms=10, await_leader_and_isr_ms=1000, leader_leo=1)
    assert follow.truncating  # we are ahead of the leader: the epoch round again
    again = rm.on_leader_and_isr(lai(3, 3, version=1), 0).fetch[TP]
    assert again is not follow and rm.fetching[TP] is again  # answers to the old one are dropped


def test_follower_truncation_by_epoch_and_fetch_errors():
    rm, logs = manager()
    logs[TP] = MemLog()
    logs[TP].append(0, 3)
    logs[TP].append(1, 2)  # the follower has epoch 1 at 3..4, which the leader never wrote
    rm.on_leader_and_isr(lai(2, 2), 0)
    replica = rm.replicas[TP]
    assert replica.truncate_by_epoch((0, 3)) is True
    assert replica.leo == 3 and logs[TP].epochs == [(0, 0)]
    assert after_fetch_error(replica, ErrorCode.OFFSET_OUT_OF_RANGE, leader_log_start=10) is FetchErrorAction.RESTART_AT_LEADER_LOG_START
    assert after_fetch_error(replica, ErrorCode.OFFSET_OUT_OF_RANGE, 0, leader_leo=2) is FetchErrorAction.TRUNCATE_AGAIN
    assert after_fetch_error(replica, ErrorCode.FENCED_LEADER_EPOCH) is FetchErrorAction.AWAIT_LEADER_AND_ISR
    assert after_fetch_error(replica, ErrorCode.REQUEST_TIMED_OUT) is FetchErrorAction.BACK_OFF


def test_a_replica_whose_log_dir_failed_is_offline_and_never_reopened():
    """Issue 14 (KIP-112): mark_offline drops the replica and its fetcher without deleting
    its log; produce, fetch and a later LeaderAndIsr for it get KAFKA_STORAGE_ERROR, and the
    LeaderAndIsr does not open a new (empty) log for it."""
    rm, logs = manager()
    other = ("t", 1)
    rm.on_leader_and_isr(lai(2, 0), 0)  # following TP
    rm.on_leader_and_isr(lai(1, 0, tp=other), 0)
    changes = rm.mark_offline([TP])
    assert changes.removed == [TP] and not changes.delete and changes.stop_fetching == [TP]
    assert TP not in rm.replicas and TP not in rm.fetching and rm.offline == {TP}
    opened_before = len(logs)
    for call in (lambda: rm.check_append(TP, -1, 1), lambda: rm.leader(TP),
                 lambda: rm.follower_fetch(TP, 2, 0, -1, -1, 0)):
        with pytest.raises(CoreError) as caught:
            call()
        assert caught.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    again = rm.on_leader_and_isr(lai(1, 1, version=1), 0)
    assert again.codes == [(TP, int(ErrorCode.KAFKA_STORAGE_ERROR))] and TP not in rm.replicas
    assert len(logs) == opened_before
    assert rm.check_append(other, -1, 1).tp == other  # the other partition serves on
