"""Offsets and persistence of the group coordinator: commits answered only once their records
are committed, OffsetFetch, retention and expiry of empty groups, DeleteGroups, OffsetDelete,
ListGroups/DescribeGroups, and the load/unload of `__consumer_offsets` partitions."""

from __future__ import annotations

import pytest
from group_harness import SUB_T, Harness

from kafkalite.core.codes import ErrorCode
from kafkalite.core.consumer_protocol import encode_subscription
from kafkalite.core.group_messages import (
    AppendCompleted,
    BecameFollower,
    BecameLeader,
    FetchedOffset,
    LoadedRecord,
    OffsetCommitPartition,
    OffsetCommitRequest,
    PartitionsDeleted,
    RecordsLoaded,
    partition_for,
)
from kafkalite.core.offsets_records import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue, OffsetsRecord, encode_record

E = ErrorCode
DAY_MS = 24 * 3600 * 1000
T0, T1 = ("t", 0), ("t", 1)


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.lead()
    return harness


# ------------------------------------------------------------------ OffsetCommit


def test_commit_is_answered_and_visible_only_once_its_record_is_committed(h):
    (a, b), gen = h.stable_group(2)
    t = h.commit("g", gen, a, {T0: 10, T1: 20}, metadata="m")
    assert h.answer(t) is None
    assert h.offsets("g") == {}  # not before it is replicated
    (append,) = h.pending.values()
    assert [r.key for r in append.records] == [OffsetCommitKey("g", "t", 0), OffsetCommitKey("g", "t", 1)]
    assert append.records[0].value == OffsetCommitValue(10, "m", h.now)
    h.complete()
    assert [(p.topic, p.partition, p.error) for p in h.answer(t).partitions] == [("t", 0, E.NONE), ("t", 1, E.NONE)]
    assert h.offsets("g") == {T0: 10, T1: 20}
    fetched = h.fetch("g", [T0, ("other", 3)])
    assert [(p.offset, p.metadata, p.error) for p in fetched.partitions] == [(10, "m", E.NONE), (-1, "", E.NONE)]


@pytest.mark.parametrize("append_error, answered", [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.MESSAGE_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
    (E.RECORD_LIST_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
    (E.REQUEST_TIMED_OUT, E.REQUEST_TIMED_OUT),
])
def test_failed_commit_is_answered_with_kafkas_code_and_changes_nothing(h, append_error, answered):
    (a,), gen = h.stable_group(1)
    t = h.commit("g", gen, a, {T0: 10})
    h.fail(append_error)
    assert h.answer(t).partitions[0].error is answered
    assert h.offsets("g") == {}
    assert not h.gc.groups["g"].pending_offset_commits


def test_later_record_wins_whatever_order_the_outcomes_arrive_in(h):
    (a,), gen = h.stable_group(1)
    h.commit("g", gen, a, {T0: 1})
    h.commit("g", gen, a, {T0: 2})
    first, second = sorted(h.pending)
    h.complete(first)
    h.complete(second)
    assert h.offsets("g") == {T0: 2}
    h.commit("g", gen, a, {T0: 3})
    h.commit("g", gen, a, {T0: 4})
    first, second = sorted(h.pending)
    log = h.log[0]
    # The second is written to the log after the first, but its outcome arrives first.
    bases = {}
    for append_id in (first, second):
        bases[append_id] = len(log)
        log.extend((len(log) + i, *encode_record(r)) for i, r in enumerate(h.pending.pop(append_id).records))
    h.step(AppendCompleted(second, bases[second]))
    h.step(AppendCompleted(first, bases[first]))
    assert h.offsets("g") == {T0: 4}


def test_commit_errors_of_group_members(h):
    (a, b), gen = h.stable_group(2)
    assert h.answer(h.commit("g", gen, "c-u999", {T0: 1})).partitions[0].error is E.UNKNOWN_MEMBER_ID
    assert h.answer(h.commit("g", gen - 1, a, {T0: 1})).partitions[0].error is E.ILLEGAL_GENERATION
    assert h.answer(h.commit("g", -1, "", {T0: 1})).partitions[0].error is E.UNKNOWN_MEMBER_ID  # not Empty
    assert h.answer(h.commit("gone", 3, a, {T0: 1})).partitions[0].error is E.ILLEGAL_GENERATION
    assert not h.pending


def test_commit_while_preparing_is_allowed_while_completing_is_not(h):
    (a, b), gen = h.stable_group(2)
    h.join(member_id=a)  # rebalance
    t = h.commit("g", gen, b, {T0: 5})
    h.complete()
    assert h.answer(t).partitions[0].error is E.NONE
    h.join(member_id=b)  # everyone rejoined: completing, generation gen + 1
    assert h.state() == "CompletingRebalance"
    assert h.answer(h.commit("g", gen + 1, b, {T0: 6})).partitions[0].error is E.REBALANCE_IN_PROGRESS


def test_a_commit_is_a_heartbeat(h):
    (a, b), gen = h.stable_group(2)
    for _ in range(4):
        h.tick(5_000)
        h.heartbeat("g", gen, a)
        h.commit("g", gen, b, {T0: 1})
        h.complete()
    assert h.state() == "Stable"
    assert set(h.gc.groups["g"].members) == {a, b}


def test_simple_consumer_commits_create_an_empty_group_that_only_stores_offsets(h):
    t = h.commit("simple", -1, "", {T0: 7})
    h.complete()
    assert h.answer(t).partitions[0].error is E.NONE
    assert h.state("simple") == "Empty"
    assert h.offsets("simple") == {T0: 7}
    assert h.answer(h.commit("", -1, "", {T0: 1})) is None  # the empty group id is legal for commits
    h.complete()
    assert h.offsets("") == {T0: 1}


def test_metadata_too_large_is_refused_per_partition():
    h = Harness(config={"offset_metadata_max_bytes": 5})
    h.lead()
    t = "c1"
    parts = (OffsetCommitPartition("t", 0, 1, "short"), OffsetCommitPartition("t", 1, 2, "too long"))
    h.step(OffsetCommitRequest("s", -1, "", None, parts, t))
    h.complete()
    assert [p.error for p in h.answer(t).partitions] == [E.NONE, E.OFFSET_METADATA_TOO_LARGE]
    assert h.offsets("s") == {T0: 1}
    h.step(OffsetCommitRequest("s", -1, "", None, parts[1:], "c2"))
    assert [p.error for p in h.answer("c2").partitions] == [E.OFFSET_METADATA_TOO_LARGE]
    assert not h.pending


def test_leader_epoch_and_commit_timestamp_are_kept(h):
    parts = (OffsetCommitPartition("t", 0, 100, None, leader_epoch=7, commit_timestamp_ms=1234),)
    h.step(OffsetCommitRequest("s", -1, "", None, parts, "c"))
    (append,) = h.pending.values()
    assert append.records[0].value == OffsetCommitValue(100, "", 1234, 7)
    h.complete()
    (p,) = h.fetch("s").partitions
    assert (p.offset, p.leader_epoch, p.metadata) == (100, 7, "")


# ------------------------------------------------------------------ retention and expiry


def test_offsets_of_an_empty_group_expire_then_the_group_is_deleted():
    h = Harness(config={"offsets_retention_ms": DAY_MS, "offsets_retention_check_interval_ms": 60_000,
                        "group_max_session_timeout_ms": DAY_MS})
    h.lead()
    (a,), gen = h.stable_group(1, session_ms=DAY_MS)
    h.commit("g", gen, a, {T0: 5})
    h.complete()
    for _ in range(3):  # offsets of a Stable group's subscribed topics never expire
        h.tick(DAY_MS // 2)
        assert h.heartbeat("g", gen, a) is E.NONE
    assert h.offsets("g") == {T0: 5}
    h.leave("g", (a, None))  # nobody left: the rebalance ends at once, Empty, generation gen + 1
    assert h.state() == "Empty"
    h.complete()
    h.tick(DAY_MS - 60_000)  # retention counts from when the group became Empty
    assert h.offsets("g") == {T0: 5}
    h.tick(120_000)  # at least one retention check a day after it became Empty
    assert h.state() is None  # Dead and gone
    (append,) = h.pending.values()
    assert {r.key: r.value for r in append.records} == {OffsetCommitKey("g", "t", 0): None, GroupMetadataKey("g"): None}
    h.complete()
    assert h.fetch("g").partitions == ()


def test_stable_consumer_group_expires_only_offsets_of_topics_it_no_longer_subscribes():
    h = Harness(config={"offsets_retention_ms": DAY_MS, "offsets_retention_check_interval_ms": 60_000,
                        "group_max_session_timeout_ms": 3 * DAY_MS})
    h.lead()
    (a,), gen = h.stable_group(1, session_ms=3 * DAY_MS)
    h.commit("g", gen, a, {T0: 5, ("old-topic", 0): 9})
    h.complete()
    h.tick(DAY_MS + 60_000)
    assert h.offsets("g") == {T0: 5}  # "t" is in the subscription (SUB_T), "old-topic" is not
    assert h.state() == "Stable"


def test_simple_consumer_offsets_expire_from_their_commit_and_explicit_retention_wins():
    h = Harness(config={"offsets_retention_ms": DAY_MS, "offsets_retention_check_interval_ms": 60_000})
    h.lead()
    h.commit("s", -1, "", {T0: 1})
    h.commit("s", -1, "", {T1: 2}, retention_ms=3 * DAY_MS)  # OffsetCommit v2-v4 retention_time_ms
    h.complete()
    (keep,) = [ap for ap in h.decoded_log() if ap.key == OffsetCommitKey("s", "t", 1)]
    assert keep.value.expire_timestamp_ms == 3 * DAY_MS  # written as OffsetCommitValue v1
    h.tick(DAY_MS + 60_000)
    assert h.offsets("s") == {T1: 2}
    h.complete()
    h.tick(2 * DAY_MS)
    assert h.state("s") is None  # no offsets left and never a real group: gone, no group tombstone
    h.complete()
    assert GroupMetadataKey("s") not in [r.key for r in h.decoded_log()]


@pytest.mark.parametrize("retention_ms, expire_ms, kept", [(2**63 - 1, 2**63 - 1, True), (-(2**63), 0, False), (-2, 998, False)])
def test_any_int64_retention_is_written_and_answered(retention_ms, expire_ms, kept):
    # now + retention_time_ms used to overflow the record's int64: the driver could not
    # encode the record and the commit was never answered (issue 10 faults).
    h = Harness(config={"offsets_retention_ms": DAY_MS, "offsets_retention_check_interval_ms": 60_000})
    h.lead()
    h.tick(1_000)
    t = h.commit("s", -1, "", {T0: 7}, retention_ms=retention_ms)
    h.complete()  # encodes the records, as the driver does
    assert [p.error for p in h.answer(t).partitions] == [E.NONE]
    (written,) = [r for r in h.decoded_log() if r.key == OffsetCommitKey("s", "t", 0)]
    assert written.value.expire_timestamp_ms == expire_ms
    h.tick(10 * DAY_MS)
    h.complete()
    assert h.fetch("s").partitions == ((FetchedOffset("t", 0, 7, -1, ""),) if kept else ())


def test_offset_with_a_commit_in_flight_does_not_expire():
    h = Harness(config={"offsets_retention_ms": DAY_MS, "offsets_retention_check_interval_ms": 60_000})
    h.lead()
    h.commit("s", -1, "", {T0: 1})
    h.complete()
    h.tick(DAY_MS - 1_000)
    h.commit("s", -1, "", {T0: 2})  # in flight across the next check
    h.tick(60_000)
    assert h.state("s") == "Empty"
    h.complete()
    assert h.offsets("s") == {T0: 2}


def test_a_group_created_by_a_failed_join_is_dropped_at_the_next_check(h):
    assert h.answer(h.join(group="x", protocol_type="")).error is E.INCONSISTENT_GROUP_PROTOCOL
    assert h.state("x") == "Empty"
    h.tick(600_000)
    assert h.state("x") is None
    assert not h.pending  # generation 0, no offsets: nothing to write


# ------------------------------------------------------------------ DeleteGroups / OffsetDelete


def test_delete_groups(h):
    (a,), gen = h.stable_group(1)
    h.commit("s", -1, "", {T0: 1})
    h.complete()
    t = h.delete_groups("g", "s", "missing", "s")
    assert h.answer(t) is None  # the tombstones of "s" first
    (append,) = h.pending.values()
    assert [r.key for r in append.records] == [OffsetCommitKey("s", "t", 0)]  # generation 0: no group tombstone
    h.complete()
    assert h.answer(t).results == (("g", E.NON_EMPTY_GROUP), ("s", E.NONE), ("missing", E.GROUP_ID_NOT_FOUND))
    assert h.state("s") is None and h.state("g") == "Stable"


@pytest.mark.parametrize("append_error, answered", [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.REQUEST_TIMED_OUT, E.REQUEST_TIMED_OUT),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
])
def test_delete_group_failing_to_write_reports_the_error(h, append_error, answered):
    h.commit("s", -1, "", {T0: 1})
    h.complete()
    t = h.delete_groups("s")
    h.fail(append_error)
    assert h.answer(t).results == (("s", answered),)


def test_delete_of_a_group_that_had_generations_writes_its_tombstone(h):
    (a,), gen = h.stable_group(1)
    h.leave("g", (a, None))
    h.tick(3_000)
    h.complete()
    t = h.delete_groups("g")
    (append,) = h.pending.values()
    assert [r for r in append.records] == [OffsetsRecord(GroupMetadataKey("g"), None)]
    h.complete()
    assert h.answer(t).results == (("g", E.NONE),)
    h2 = Harness()
    h2.log = h.log
    h2.lead()
    assert h2.state("g") is None  # it does not come back on the next leader


def test_offset_delete(h):
    (a,), gen = h.stable_group(1)
    h.commit("g", gen, a, {T0: 1, ("other", 0): 2})
    h.complete()
    t = h.delete_offsets("g", T0, ("other", 0))
    h.complete()
    assert [(p.topic, p.error) for p in h.answer(t).partitions] == [("t", E.GROUP_SUBSCRIBED_TO_TOPIC), ("other", E.NONE)]
    assert h.offsets("g") == {T0: 1}
    assert h.answer(h.delete_offsets("nope", T0)).error is E.GROUP_ID_NOT_FOUND
    assert h.answer(h.delete_offsets("", T0)).error is E.INVALID_GROUP_ID


def test_offset_delete_of_the_last_offsets_drops_an_empty_group(h):
    h.commit("s", -1, "", {T0: 1})
    h.complete()
    t = h.delete_offsets("s", T0, T1)
    h.complete()
    assert [(p.partition, p.error) for p in h.answer(t).partitions] == [(0, E.NONE), (1, E.NONE)]
    assert h.state("s") is None


def test_offset_delete_of_a_non_consumer_group_with_members(h):
    t = h.join(group="conn", protocol_type="connect")
    h.settle_all("conn")
    assert h.answer(t).error is E.NONE
    assert h.answer(h.delete_offsets("conn", T0)).error is E.NON_EMPTY_GROUP


def test_deleted_topic_partitions_lose_their_offsets(h):
    h.commit("s", -1, "", {T0: 1, T1: 2})
    h.complete()
    h.step(PartitionsDeleted((T0,)))
    assert h.offsets("s") == {T1: 2}
    (append,) = h.pending.values()
    assert [r.key for r in append.records] == [OffsetCommitKey("s", "t", 0)]


# ------------------------------------------------------------------ ListGroups / DescribeGroups


def test_list_and_describe_groups(h):
    (a, b), gen = h.stable_group(2)
    h.commit("s", -1, "", {T0: 1})
    h.complete()
    listed = h.list_groups()
    assert listed.error is E.NONE
    assert {(g.group_id, g.protocol_type, g.state) for g in listed.groups} == {("g", "consumer", "Stable"), ("s", "", "Empty")}
    (g, s, missing) = h.describe("g", "s", "missing").groups
    assert (g.error, g.state, g.protocol_type, g.protocol) == (E.NONE, "Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.client_host, m.metadata, m.assignment) for m in g.members] == [
        (a, "c", "/127.0.0.1", SUB_T, a.encode()), (b, "c", "/127.0.0.1", SUB_T, b.encode())]
    assert (s.state, s.members) == ("Empty", ())
    assert (missing.error, missing.state) == (E.NONE, "Dead")
    h.join(member_id=a)
    (g,) = h.describe("g").groups
    assert g.state == "PreparingRebalance" and g.protocol == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in g.members)  # only a Stable group shows them


# ------------------------------------------------------------------ load and unload


def test_a_new_coordinator_loads_groups_members_assignments_and_offsets():
    old = Harness()
    old.lead()
    (a, b), gen = old.stable_group(2)
    old.commit("g", gen, a, {T0: 10, T1: 11})
    old.commit("s", -1, "", {T0: 99})
    old.complete()
    old.commit("g", gen, a, {T0: 12})  # in flight when leadership moves: never acknowledged
    old.follow(epoch=2)
    new = Harness()
    new.log = old.log
    new.lead(epoch=3)
    group = new.gc.groups["g"]
    assert (group.state.value, group.generation_id, group.leader_id, group.protocol_name) == ("Stable", gen, a, "range")
    assert {m.member_id: m.assignment for m in group.members.values()} == {a: a.encode(), b: b.encode()}
    assert new.offsets("g") == {T0: 10, T1: 11}
    assert new.offsets("s") == {T0: 99}
    # The members go on with the new coordinator without a rebalance.
    assert new.heartbeat("g", gen, a) is E.NONE
    assert new.answer(new.sync("g", gen, b)).assignment == b.encode()
    # And a member that does not heartbeat there times out.
    new.tick(5_000)
    new.heartbeat("g", gen, a)
    new.tick(5_000)
    assert b not in new.gc.groups["g"].members


def test_requests_while_loading_and_for_partitions_led_elsewhere():
    h = Harness(partitions=2)
    g0 = next(f"g{i}" for i in range(100) if partition_for(f"g{i}", 2) == 0)
    g1 = next(f"g{i}" for i in range(100) if partition_for(f"g{i}", 2) == 1)
    h.lead(0, finish=False)
    assert h.answer(h.join(group=g0)).error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.answer(h.commit(g0, -1, "", {T0: 1})).partitions[0].error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.fetch(g0).error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.heartbeat(g0, 1, "m") is E.NONE  # answered blindly while loading
    assert h.answer(h.sync(g0, 1, "m")).error is E.REBALANCE_IN_PROGRESS  # the rebalance was lost: rejoin
    assert h.list_groups().error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.describe(g0).groups[0].error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.answer(h.join(group=g1)).error is E.NOT_COORDINATOR
    assert h.heartbeat(g1, 1, "m") is E.NOT_COORDINATOR
    assert h.answer(h.delete_groups(g1)).results == ((g1, E.NOT_COORDINATOR),)
    h.finish_load(0)
    assert h.list_groups().error is E.NONE
    assert h.answer(h.join(group=g0)) is None  # parked in the initial delay: served now


def test_losing_leadership_answers_everything_parked_not_coordinator(h):
    (a, b), gen = h.stable_group(2)
    commit = h.commit("g", gen, a, {T0: 1})
    h.join(member_id=a)  # parked in a rebalance
    parked = h.join(member_id=a)  # (the retry answers the first REBALANCE_IN_PROGRESS)
    h.follow(epoch=2)
    assert h.answer(parked).error is E.NOT_COORDINATOR
    assert h.answer(commit).partitions[0].error is E.NOT_COORDINATOR
    assert h.heartbeat("g", gen, b) is E.NOT_COORDINATOR
    assert h.fetch("g").error is E.NOT_COORDINATOR
    assert h.gc.groups == {}
    assert h.gc.next_deadline_ms is not None  # only the retention check remains
    h.complete()  # the outcome of the unloaded append arrives later and is ignored


def test_losing_leadership_during_sync_answers_not_coordinator(h):
    (a, _), (b, _) = h.join_new(), h.join_new()
    h.settle_all()
    sb = h.sync("g", 1, b)
    sa = h.sync("g", 1, a, [(a, b"A"), (b, b"B")])
    h.follow(epoch=2)
    assert h.answer(sa).error is E.NOT_COORDINATOR
    assert h.answer(sb).error is E.NOT_COORDINATOR


def test_stale_leadership_events_and_loads_are_ignored():
    h = Harness()
    h.step(BecameLeader(0, 5))
    h.step(BecameFollower(0, 4))  # older than the leadership: ignored
    assert 0 in h.gc.partitions
    h.step(BecameLeader(0, 6))  # a newer epoch while loading: the load starts again
    assert [load.leader_epoch for load in h.loads] == [5, 6]
    h.step(RecordsLoaded(0, 5, (), True))  # the old load's answer
    assert h.gc.partitions[0].load is not None
    h.step(RecordsLoaded(0, 6, (), True))
    assert h.gc.partitions[0].load is None
    h.step(BecameLeader(0, 3))  # stale
    assert h.gc.partitions[0].leader_epoch == 6
    h.step(BecameFollower(0, None))  # the replica was stopped: no epoch, unload anyway
    assert h.gc.partitions == {}


def test_loading_in_chunks_and_replaying_tombstones():
    h = Harness()
    records = []
    for i, (key, value) in enumerate([
        (OffsetCommitKey("s", "t", 0), OffsetCommitValue(1, "", 0)),
        (OffsetCommitKey("s", "t", 1), OffsetCommitValue(2, "", 0)),
        (OffsetCommitKey("s", "t", 0), OffsetCommitValue(3, "", 0)),
        (OffsetCommitKey("s", "t", 1), None),
        (OffsetCommitKey("gone", "t", 0), OffsetCommitValue(4, "", 0)),
        (OffsetCommitKey("gone", "t", 0), None),
    ]):
        records.append(LoadedRecord(i, *encode_record(OffsetsRecord(key, value))))
    records.insert(2, LoadedRecord(99, b"\x00\x07junk", b""))  # unreadable: skipped with a warning
    h.step(BecameLeader(0, 1))
    h.step(RecordsLoaded(0, 1, tuple(records[:3]), False))
    assert h.fetch("s").error is E.COORDINATOR_LOAD_IN_PROGRESS
    h.step(RecordsLoaded(0, 1, tuple(records[3:]), True))
    assert h.offsets("s") == {T0: 3}
    assert h.state("gone") is None
    assert any("skipped" in n.text and n.level == "warning" for n in h.notes)


def test_group_record_with_a_leader_that_is_not_a_member_is_repaired():
    from kafkalite.core.offsets_records import GroupMetadataValue, MemberMetadataValue

    value = GroupMetadataValue("consumer", 3, "range", "ghost", (
        MemberMetadataValue("m1", "c", "h", 10_000, 30_000, SUB_T, b"A"),), 0)
    h = Harness()
    h.log[0] = [(0, *encode_record(OffsetsRecord(GroupMetadataKey("g"), value)))]
    h.lead()
    assert h.gc.groups["g"].leader_id == "m1"
    assert h.gc.groups["g"].subscribed_topics == {"t"}


def test_a_group_of_another_partition_in_the_log_is_skipped():
    h = Harness(partitions=2)
    other = next(f"g{i}" for i in range(100) if partition_for(f"g{i}", 2) == 1)
    h.log[0] = [(0, *encode_record(OffsetsRecord(OffsetCommitKey(other, "t", 0), OffsetCommitValue(1, "", 0))))]
    h.lead(0)
    assert other not in h.gc.groups


def test_subscription_change_is_seen_by_offset_expiry_after_a_rebalance():
    h = Harness(config={"offsets_retention_ms": DAY_MS, "offsets_retention_check_interval_ms": 60_000,
                        "group_max_session_timeout_ms": 3 * DAY_MS})
    h.lead()
    (a,), gen = h.stable_group(1, session_ms=3 * DAY_MS)
    h.commit("g", gen, a, {T0: 5})
    h.complete()
    t = h.join(member_id=a, protocols=(("range", encode_subscription(["u"])),), session_ms=3 * DAY_MS)
    h.sync("g", h.answer(t).generation_id, a, [(a, b"")])
    h.complete()
    h.tick(DAY_MS + 60_000)
    assert h.offsets("g") == {}  # "t" is no longer subscribed


def test_deleting_a_group_with_a_commit_in_flight_tombstones_that_offset_too(h):
    h.commit("s", -1, "", {T0: 1})
    h.complete()
    c = h.commit("s", -1, "", {T1: 2})  # in flight
    t = h.delete_groups("s")
    h.complete()  # the commit lands, then the tombstones after it
    assert h.answer(c).partitions[0].error is E.NONE
    assert h.answer(t).results == (("s", E.NONE),)
    assert h.state("s") is None
    h2 = Harness()
    h2.log = h.log
    h2.lead()
    assert h2.state("s") is None  # nothing of it comes back on the next leader
