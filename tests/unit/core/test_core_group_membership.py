"""The group state machine's membership protocol: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, the rebalance/session/initial-delay timeouts, static membership, group.max.size,
and the errors Kafka's GroupCoordinator answers with."""

from __future__ import annotations

from dataclasses import replace

import pytest
from group_harness import PROTOCOLS, SUB_T, Harness

from kafkalite.core.codes import ErrorCode, IllegalTransitionError
from kafkalite.core.consumer_protocol import encode_subscription
from kafkalite.core.group_state import Group, GroupState
from kafkalite.core.offsets_records import GroupMetadataKey, GroupMetadataValue, OffsetsRecord, decode_record, encode_record

E = ErrorCode
DELAY = 3_000  # group.initial.rebalance.delay.ms


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.lead()
    return harness


# ------------------------------------------------------------------ joining


def test_join_v4_without_member_id_gets_member_id_required_then_joins_with_it(h):
    first = h.join(require_known=True, client_id="app")
    resp = h.answer(first)
    assert resp.error is E.MEMBER_ID_REQUIRED
    assert resp.member_id == "app-u1"
    assert h.state() == "Empty"  # a pending member is not a member yet
    second = h.join(member_id="app-u1", require_known=True)
    assert h.answer(second) is None  # parked: the initial rebalance delay
    assert h.state() == "PreparingRebalance"
    h.settle_all()
    resp = h.answer(second)
    assert (resp.error, resp.member_id, resp.generation_id, resp.leader, resp.protocol_name) == (E.NONE, "app-u1", 1, "app-u1", "range")
    assert [m.member_id for m in resp.members] == ["app-u1"]
    assert h.state() == "CompletingRebalance"


@pytest.mark.parametrize("client_id", ["c" * 32767, "x" + "é" * 16383])
def test_member_ids_of_the_longest_client_ids_still_fit_an_int16_string(h, client_id):
    # Kafka's "<client id>-<uuid>" of a 32767-byte client id cannot be written: its answer
    # failed to encode and a group with such a member could never store its record.
    member, t = h.join_new(client_id=client_id)
    assert len(member.encode()) <= 32767
    assert member.endswith("-u1")
    assert client_id.startswith(member[: -len("-u1")])  # cut between characters
    h.settle_all()
    assert h.answer(t).error is E.NONE
    synced = h.sync("g", 1, member, [(member, b"A")])
    h.complete()  # the group's record encodes
    assert h.answer(synced).error is E.NONE
    assert h.state() == "Stable"


def test_pending_member_expires_after_its_session_timeout(h):
    resp = h.answer(h.join(require_known=True, session_ms=10_000))
    h.tick(10_000)
    late = h.join(member_id=resp.member_id, require_known=True)
    assert h.answer(late).error is E.UNKNOWN_MEMBER_ID


def test_old_protocol_join_without_member_id_is_added_at_once(h):
    t = h.join(require_known=False)
    assert h.state() == "PreparingRebalance"
    h.settle_all()
    assert h.answer(t).error is E.NONE


def test_initial_rebalance_delay_waits_for_more_members_within_the_rebalance_timeout(h):
    a = h.join(rebalance_ms=10_000)
    h.tick(2_000)
    b = h.join(rebalance_ms=10_000)
    h.tick(1_000)  # the first delay ends at 3000: b arrived, wait another delay
    assert h.answer(a) is None
    h.tick(2_999)
    assert h.answer(a) is None
    h.tick(1)  # 6000: nobody new since 3000
    assert h.answer(a).error is E.NONE
    assert h.answer(b).error is E.NONE
    assert h.answer(a).generation_id == h.answer(b).generation_id == 1


def test_initial_delay_is_extended_by_new_members_but_not_past_the_rebalance_timeout(h):
    first = h.join(rebalance_ms=5_000)
    for _ in range(4):  # a new member every second keeps asking for more delay
        h.tick(1_000)
        h.join(rebalance_ms=5_000)
    h.tick(999)
    assert h.answer(first) is None
    h.tick(1)  # 5000: the rebalance timeout
    resp = h.answer(first)
    assert (resp.error, resp.generation_id, len(resp.members)) == (E.NONE, 1, 5)


def test_leader_gets_members_followers_do_not(h):
    (a, ta), (b, tb) = h.join_new(), h.join_new()
    h.tick(DELAY)
    assert h.answer(ta) is None  # b joined during the initial delay: wait one more (KIP-134)
    h.tick(DELAY)
    ra, rb = h.answer(ta), h.answer(tb)
    assert ra.leader == rb.leader == a
    assert sorted(m.member_id for m in ra.members) == [a, b]
    assert all(m.metadata == SUB_T for m in ra.members)
    assert rb.members == ()


def test_protocol_is_the_most_voted_among_those_all_members_support(h):
    p1 = (("roundrobin", b"r"), ("range", b"g"))
    p2 = (("range", b"g"), ("sticky", b"s"), ("roundrobin", b"r"))
    p3 = (("sticky", b"s"), ("range", b"g"))
    tokens = [h.join(protocols=p) for p in (p1, p2, p3)]
    h.settle_all()
    assert {h.answer(t).protocol_name for t in tokens} == {"range"}  # the only one all three support


@pytest.mark.parametrize("protocol_type, protocols", [("other", PROTOCOLS), ("consumer", (("sticky", b""),)), ("consumer", ())])
def test_inconsistent_group_protocol(h, protocol_type, protocols):
    h.join()
    t = h.join(protocol_type=protocol_type, protocols=protocols)
    assert h.answer(t).error is E.INCONSISTENT_GROUP_PROTOCOL


def test_first_member_needs_a_protocol_type_and_protocols(h):
    assert h.answer(h.join(protocol_type="")).error is E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.join(group="g2", protocols=())).error is E.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("session_ms", [5_999, 1_800_001])
def test_session_timeout_outside_the_broker_bounds(h, session_ms):
    assert h.answer(h.join(session_ms=session_ms)).error is E.INVALID_SESSION_TIMEOUT


def test_empty_group_id_is_invalid_for_membership_apis(h):
    assert h.answer(h.join(group="")).error is E.INVALID_GROUP_ID
    assert h.heartbeat("", 1, "m") is E.INVALID_GROUP_ID
    assert h.answer(h.sync("", 1, "m")).error is E.INVALID_GROUP_ID
    assert h.leave("", ("m", None)).error is E.INVALID_GROUP_ID


def test_join_with_a_member_id_of_a_group_that_does_not_exist(h):
    assert h.answer(h.join(group="nope", member_id="c-u9")).error is E.UNKNOWN_MEMBER_ID
    assert "nope" not in h.gc.groups


def test_join_with_an_unknown_member_id_of_an_existing_group(h):
    h.stable_group(1)
    assert h.answer(h.join(member_id="c-u999")).error is E.UNKNOWN_MEMBER_ID


def test_a_retried_join_answers_the_parked_one_rebalance_in_progress(h):
    m, first = h.join_new()
    second = h.join(member_id=m, require_known=True)
    assert h.answer(first).error is E.REBALANCE_IN_PROGRESS
    h.settle_all()
    assert h.answer(second).error is E.NONE


# ------------------------------------------------------------------ syncing


def test_sync_is_answered_only_once_the_group_record_is_committed(h):
    (a, _), (b, _) = h.join_new(), h.join_new()
    h.settle_all()
    sb = h.sync("g", 1, b)
    assert h.answer(sb) is None  # followers wait for the leader
    sa = h.sync("g", 1, a, [(a, b"A"), (b, b"B")])
    assert h.answer(sa) is None and h.answer(sb) is None
    assert h.state() == "CompletingRebalance"
    (append,) = h.pending.values()
    (record,) = append.records
    assert record.key == GroupMetadataKey("g")
    assert isinstance(record.value, GroupMetadataValue)
    assert {m.member_id: m.assignment for m in record.value.members} == {a: b"A", b: b"B"}
    assert (record.value.generation, record.value.leader, record.value.protocol) == (1, a, "range")
    h.complete()
    assert (h.answer(sa).error, h.answer(sa).assignment) == (E.NONE, b"A")
    assert (h.answer(sb).error, h.answer(sb).assignment) == (E.NONE, b"B")
    assert h.state() == "Stable"


def test_members_missing_from_the_leaders_assignment_get_an_empty_one(h):
    (a, _), (b, _) = h.join_new(), h.join_new()
    h.settle_all()
    sb = h.sync("g", 1, b)
    h.sync("g", 1, a, [(a, b"A"), ("stranger", b"X")])
    h.complete()
    assert (h.answer(sb).error, h.answer(sb).assignment) == (E.NONE, b"")


@pytest.mark.parametrize("append_error, answered", [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.REQUEST_TIMED_OUT, E.REBALANCE_IN_PROGRESS),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
])
def test_failed_group_record_fails_the_sync_and_rebalances(h, append_error, answered):
    (a, _), (b, _) = h.join_new(), h.join_new()
    h.settle_all()
    sb = h.sync("g", 1, b)
    sa = h.sync("g", 1, a, [(a, b"A"), (b, b"B")])
    h.fail(append_error)
    assert h.answer(sa).error is answered
    assert h.answer(sb).error is answered
    assert h.state() == "PreparingRebalance"
    assert all(m.assignment == b"" for m in h.gc.groups["g"].members.values())


def test_sync_errors(h):
    (a, b), gen = h.stable_group(2)
    assert h.answer(h.sync("g", gen, "c-u999")).error is E.UNKNOWN_MEMBER_ID
    assert h.answer(h.sync("g", gen + 1, a)).error is E.ILLEGAL_GENERATION
    assert h.answer(h.sync("nope", gen, a)).error is E.UNKNOWN_MEMBER_ID
    # Stable: any member gets its current assignment back.
    resp = h.answer(h.sync("g", gen, b))
    assert (resp.error, resp.assignment) == (E.NONE, b.encode())
    h.join(member_id=a)  # the leader rejoins: rebalance
    assert h.answer(h.sync("g", gen, b)).error is E.REBALANCE_IN_PROGRESS


def test_sync_with_protocol_checks_of_v5(h):
    from kafkalite.core.group_messages import SyncGroupRequest

    (a,), gen = h.stable_group(1)
    h.step(SyncGroupRequest("g", gen, a, None, (), "s-type", protocol_type="connect"))
    h.step(SyncGroupRequest("g", gen, a, None, (), "s-name", protocol_name="roundrobin"))
    h.step(SyncGroupRequest("g", gen, a, None, (), "s-ok", protocol_type="consumer", protocol_name="range"))
    assert h.answer("s-type").error is E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer("s-name").error is E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer("s-ok").error is E.NONE


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout(h):
    (a, _), (b, tb) = h.join_new(rebalance_ms=20_000), h.join_new(rebalance_ms=20_000)
    h.settle_all()
    gen = h.answer(tb).generation_id
    sa = h.sync("g", gen, a, [(a, b"A"), (b, b"B")])
    h.complete()
    assert h.answer(sa).error is E.NONE  # Stable, but b never asked for its assignment
    for _ in range(3):  # a heartbeats; b is silent (its session timer is 10 s)
        h.tick(6_000)
        h.heartbeat("g", gen, a)
    h.tick(2_000)  # 20 s after the generation started
    group = h.gc.groups["g"]
    assert b not in group.members
    assert h.heartbeat("g", gen, a) is E.REBALANCE_IN_PROGRESS


def test_negative_rebalance_timeout_expires_the_rebalance_deadlines_at_once(h):
    # A client's garbage must not be a programmer error: the coordinator used to assert a
    # non-negative deadline when arming the sync deadline, and exited (issue 10 faults).
    member, t = h.join_new(rebalance_ms=-1)
    h.settle_all()
    assert (h.answer(t).error, h.answer(t).generation_id) == (E.NONE, 1)
    # Its sync deadline passed at once: removed, and the group, empty, is Empty again.
    assert member not in h.gc.groups["g"].members
    assert h.state() == "Empty"
    assert h.answer(h.sync("g", 1, member)).error is E.UNKNOWN_MEMBER_ID
    joins = [h.join_new()[1] for _ in range(2)]  # a well-behaved group goes on
    h.settle_all()
    assert [h.answer(t).error for t in joins] == [E.NONE, E.NONE]
    assert h.state() == "CompletingRebalance"


def test_group_loaded_with_negative_rebalance_timeouts_rebalances_at_once():
    h = Harness()
    h.lead()
    members, gen = h.stable_group(2)
    (offset, key, value), = [r for r in h.log[0] if isinstance(decode_record(r[1], r[2]).key, GroupMetadataKey)][-1:]
    record = decode_record(key, value)
    negative = replace(record.value, members=tuple(replace(m, rebalance_timeout_ms=-1) for m in record.value.members))
    key, value = encode_record(OffsetsRecord(record.key, negative))
    h.log[0].append((len(h.log[0]), key, value))
    h2 = Harness(config={"group_max_size": 1})  # loaded over the limit: a rebalance on load
    h2.log = h.log
    h2.lead()
    assert h2.state() == "PreparingRebalance"
    h2.tick(0)  # its deadline is now: nobody rejoined, so nobody is left
    assert h2.state() == "Empty"
    assert h2.answer(h2.join(member_id=members[0])).error is E.UNKNOWN_MEMBER_ID


def test_a_retried_sync_answers_the_parked_one(h):
    (a, _), (b, _) = h.join_new(), h.join_new()
    h.settle_all()
    first = h.sync("g", 1, b)
    second = h.sync("g", 1, b)
    assert h.answer(first).error is E.REBALANCE_IN_PROGRESS
    h.sync("g", 1, a, [(a, b"A"), (b, b"B")])
    h.complete()
    assert h.answer(second).assignment == b"B"


def test_assignment_changes_only_from_completing_to_stable(h):
    (a, b), gen = h.stable_group(2)
    group = h.gc.groups["g"]
    before = {m.member_id: m.assignment for m in group.members.values()}
    h.sync("g", gen, a, [(a, b"other"), (b, b"other")])  # Stable: a leader's assignment is ignored
    assert not h.pending
    assert {m.member_id: m.assignment for m in group.members.values()} == before


# ------------------------------------------------------------------ heartbeats and timeouts


def test_heartbeat_answers_by_state(h):
    (a, _), (b, tb) = h.join_new(), h.join_new()
    assert h.heartbeat("g", 0, a) is E.REBALANCE_IN_PROGRESS  # preparing, generation 0
    h.settle_all()
    gen = h.answer(tb).generation_id
    assert h.heartbeat("g", gen, b) is E.NONE  # completing
    assert h.heartbeat("g", gen - 1, b) is E.ILLEGAL_GENERATION
    assert h.heartbeat("g", gen, "c-u999") is E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("nope", gen, b) is E.UNKNOWN_MEMBER_ID
    h.sync("g", gen, a, [(a, b"A"), (b, b"B")])
    h.complete()
    assert h.heartbeat("g", gen, b) is E.NONE  # stable


def test_session_timeout_removes_a_silent_member_and_the_others_rebalance(h):
    (a, b), gen = h.stable_group(2)
    for _ in range(2):
        h.tick(4_000)
        assert h.heartbeat("g", gen, a) is E.NONE
    assert b in h.gc.groups["g"].members
    h.tick(2_000)  # b has been silent for its whole 10 s session timeout
    assert b not in h.gc.groups["g"].members
    assert h.heartbeat("g", gen, a) is E.REBALANCE_IN_PROGRESS
    t = h.join(member_id=a)
    resp = h.answer(t)  # the only member rejoined: the rebalance completes at once
    assert (resp.error, resp.generation_id, resp.leader, [m.member_id for m in resp.members]) == (E.NONE, gen + 1, a, [a])


def test_rebalance_timeout_drops_members_that_did_not_rejoin(h):
    (a, b), gen = h.stable_group(2, rebalance_ms=20_000, session_ms=30_000)
    ta = h.join(member_id=a, rebalance_ms=20_000, session_ms=30_000)
    assert h.state() == "PreparingRebalance"
    h.tick(19_999)
    assert h.answer(ta) is None
    h.tick(1)
    resp = h.answer(ta)
    assert (resp.error, resp.generation_id, [m.member_id for m in resp.members]) == (E.NONE, gen + 1, [a])
    assert h.heartbeat("g", gen, b) is E.UNKNOWN_MEMBER_ID


def test_leader_that_does_not_rejoin_is_replaced_by_one_that_did(h):
    (a, b), gen = h.stable_group(2, rebalance_ms=20_000, session_ms=30_000)
    tb = h.join(member_id=b, protocols=(("range", encode_subscription(["t", "u"])),), rebalance_ms=20_000, session_ms=30_000)
    h.tick(20_000)
    resp = h.answer(tb)
    assert (resp.leader, resp.generation_id) == (b, gen + 1)
    assert h.gc.groups["g"].leader_id == b


def test_new_member_stuck_in_a_long_rebalance_is_removed_after_the_new_member_timeout():
    h = Harness(config={"new_member_join_timeout_ms": 60_000, "group_max_session_timeout_ms": 600_000})
    h.lead()
    (a,), gen = h.stable_group(1, rebalance_ms=300_000, session_ms=300_000)
    newcomer = h.join(rebalance_ms=300_000, session_ms=300_000)  # a is busy and does not rejoin yet
    h.tick(60_000)
    assert h.answer(newcomer).error is E.UNKNOWN_MEMBER_ID
    assert len(h.gc.groups["g"].members) == 1


def test_follower_rejoining_unchanged_in_stable_gets_the_generation_without_rebalance(h):
    (a, b), gen = h.stable_group(2)
    resp = h.answer(h.join(member_id=b))
    assert (resp.error, resp.generation_id, resp.leader, resp.members) == (E.NONE, gen, a, ())
    assert h.state() == "Stable"


def test_follower_rejoining_with_new_metadata_rebalances(h):
    (a, b), gen = h.stable_group(2)
    t = h.join(member_id=b, protocols=(("range", encode_subscription(["t", "new"])),))
    assert h.answer(t) is None
    assert h.state() == "PreparingRebalance"


def test_rejoin_during_completing_with_same_metadata_resends_the_generation(h):
    (a, _), (b, _) = h.join_new(), h.join_new()
    h.settle_all()
    again = h.join(member_id=a, require_known=True)
    resp = h.answer(again)
    assert (resp.error, resp.generation_id, resp.leader) == (E.NONE, 1, a)
    assert sorted(m.member_id for m in resp.members) == [a, b]
    assert h.state() == "CompletingRebalance"


def test_rejoin_during_completing_with_new_metadata_cancels_the_syncs(h):
    (a, _), (b, _) = h.join_new(), h.join_new()
    h.settle_all()
    sb = h.sync("g", 1, b)
    h.join(member_id=a, protocols=(("range", b"changed"),), require_known=True)
    assert h.answer(sb).error is E.REBALANCE_IN_PROGRESS
    assert h.state() == "PreparingRebalance"


# ------------------------------------------------------------------ leaving


def test_leave_group_rebalances_the_rest(h):
    (a, b), gen = h.stable_group(2)
    resp = h.leave("g", (b, None))
    assert resp.error is E.NONE
    assert [(m.member_id, m.error) for m in resp.members] == [(b, E.NONE)]
    assert h.state() == "PreparingRebalance"
    t = h.join(member_id=a)
    assert h.answer(t).generation_id == gen + 1


def test_leave_batch_reports_each_member(h):
    (a, b), gen = h.stable_group(2)
    resp = h.leave("g", (a, None), ("c-u999", None), (b, None))
    assert [(m.member_id, m.error) for m in resp.members] == [(a, E.NONE), ("c-u999", E.UNKNOWN_MEMBER_ID), (b, E.NONE)]
    h.tick(30_000)  # nobody left to rejoin: the rebalance ends Empty
    assert h.state() == "Empty"
    assert h.gc.groups["g"].generation_id == gen + 1


def test_leave_of_an_unknown_group_answers_per_member(h):
    resp = h.leave("nope", ("m", None))
    assert (resp.error, resp.members[0].error) == (E.NONE, E.UNKNOWN_MEMBER_ID)


def test_leave_of_a_pending_member_lets_the_rebalance_complete(h):
    a = h.join()
    pending = h.answer(h.join(require_known=True)).member_id
    h.settle_all()
    assert h.answer(a).error is E.NONE  # the initial delay ignores pending members
    (member,) = h.gc.groups["g"].members
    h.join(member_id=member, protocols=(("range", b"new"),))  # a rebalance; the pending member holds it up
    assert h.state() == "PreparingRebalance"
    resp = h.leave("g", (pending, None))
    assert resp.members[0].error is E.NONE
    assert h.state() == "CompletingRebalance"


def test_everyone_leaving_during_the_rebalance_ends_empty_and_writes_the_empty_generation(h):
    (a, b), gen = h.stable_group(2)
    h.join(member_id=a)
    h.leave("g", (a, None), (b, None))
    assert h.state() == "Empty"
    (append,) = h.pending.values()
    (record,) = append.records
    assert record.value.members == () and record.value.generation == gen + 1 and record.value.protocol is None


# ------------------------------------------------------------------ static membership (KIP-345)


def static_group(h: Harness, instances=("i-a", "i-b")) -> tuple[dict[str, str], int]:
    tokens = {i: h.join(instance=i, require_known=True) for i in instances}  # static members never get MEMBER_ID_REQUIRED
    h.settle_all()
    ids = {i: h.answer(t).member_id for i, t in tokens.items()}
    gen = h.answer(tokens[instances[0]]).generation_id
    leader = h.answer(tokens[instances[0]]).leader
    for i, m in ids.items():
        h.sync("g", gen, m, [(x, x.encode()) for x in ids.values()] if m == leader else (), instance=i)
    h.complete()
    assert h.state() == "Stable"
    return ids, gen


def test_static_member_restart_within_the_session_timeout_causes_no_rebalance(h):
    ids, gen = static_group(h)
    old_b = ids["i-b"]
    h.tick(5_000)
    h.heartbeat("g", gen, ids["i-a"], instance="i-a")
    t = h.join(instance="i-b", require_known=True)  # i-b restarted: no member id
    assert h.answer(t) is None  # answered once the new member id is in the log
    (append,) = h.pending.values()
    assert {m.group_instance_id: m.member_id for m in append.records[0].value.members}["i-b"] != old_b
    h.complete()
    resp = h.answer(t)
    assert resp.error is E.NONE
    assert resp.generation_id == gen
    assert resp.member_id != old_b
    assert resp.leader == ids["i-a"]  # the old leader: i-b must not think it leads
    assert h.state() == "Stable"
    # The old incarnation is fenced everywhere.
    assert h.heartbeat("g", gen, old_b, instance="i-b") is E.FENCED_INSTANCE_ID
    assert h.answer(h.sync("g", gen, old_b, instance="i-b")).error is E.FENCED_INSTANCE_ID
    assert h.answer(h.commit("g", gen, old_b, {("t", 0): 1}, instance="i-b")).partitions[0].error is E.FENCED_INSTANCE_ID
    assert h.answer(h.join(member_id=old_b, instance="i-b")).error is E.FENCED_INSTANCE_ID
    # The new one keeps the assignment.
    sync = h.answer(h.sync("g", gen, resp.member_id, instance="i-b"))
    assert (sync.error, sync.assignment) == (E.NONE, old_b.encode())
    assert h.heartbeat("g", gen, resp.member_id, instance="i-b") is E.NONE


def test_static_member_restart_not_persisted_restores_the_old_member_id(h):
    ids, gen = static_group(h)
    t = h.join(instance="i-b", require_known=True)
    h.fail(E.NOT_ENOUGH_REPLICAS)
    resp = h.answer(t)
    assert (resp.error, resp.member_id) == (E.COORDINATOR_NOT_AVAILABLE, "")
    assert h.gc.groups["g"].static_members["i-b"] == ids["i-b"]
    assert h.heartbeat("g", gen, ids["i-b"], instance="i-b") is E.NONE


def test_static_member_restart_with_another_protocol_rebalances(h):
    ids, gen = static_group(h)
    h.join(instance="i-b", protocols=(("roundrobin", b"r"), ("range", SUB_T)), require_known=True)
    assert h.state() == "Stable"  # range still wins the vote: no rebalance
    h.complete()
    h2 = Harness()
    h2.lead()
    ids, gen = static_group(h2, instances=("i-a",))
    t = h2.join(instance="i-a", protocols=(("roundrobin", b"r"), ("range", SUB_T)), require_known=True)
    # The only member now votes another protocol: a rebalance, which it completes at once.
    assert (h2.answer(t).generation_id, h2.answer(t).protocol_name) == (gen + 1, "roundrobin")
    assert h2.state() == "CompletingRebalance"


def test_static_member_restart_while_completing_rebalances(h):
    ta = h.join(instance="i-a")
    tb = h.join(instance="i-b")
    h.settle_all()
    old_b = h.answer(tb).member_id
    sa = h.sync("g", 1, h.answer(ta).member_id, instance="i-a")
    assert h.answer(sa) is None
    t = h.join(instance="i-b")
    assert h.answer(sa).error is E.REBALANCE_IN_PROGRESS  # the leader may have assigned to the old id
    assert h.state() == "PreparingRebalance"
    assert h.answer(t) is None
    assert old_b not in h.gc.groups["g"].members


def test_static_member_replaced_while_waiting_in_join_is_fenced(h):
    ids, gen = static_group(h)
    parked = h.join(member_id=ids["i-b"], instance="i-b", protocols=(("range", b"new"),))  # rebalance
    assert h.answer(parked) is None
    newer = h.join(instance="i-b")
    assert h.answer(parked).error is E.FENCED_INSTANCE_ID
    assert h.answer(newer) is None
    h.join(member_id=ids["i-a"], instance="i-a")
    assert h.answer(newer).error is E.NONE  # everyone rejoined: the rebalance completes
    assert h.answer(newer).member_id != ids["i-b"]


def test_static_member_leaves_by_instance_id(h):
    ids, gen = static_group(h)
    resp = h.leave("g", ("", "i-b"))
    assert resp.members[0].error is E.NONE
    assert "i-b" not in h.gc.groups["g"].static_members
    assert h.state() == "PreparingRebalance"


def test_static_member_with_unknown_instance_and_member_id(h):
    ids, gen = static_group(h)
    assert h.answer(h.join(member_id=ids["i-a"], instance="i-zzz")).error is E.UNKNOWN_MEMBER_ID
    resp = h.leave("g", (ids["i-a"], "i-b"))
    assert resp.members[0].error is E.FENCED_INSTANCE_ID


def test_static_member_that_does_not_rejoin_keeps_its_place_until_its_session_times_out(h):
    ids, gen = static_group(h)
    ta = h.join(member_id=ids["i-a"], instance="i-a", rebalance_ms=30_000)
    h.tick(9_999)  # i-b's session (10 s) still runs: it is neither dropped nor rejoined
    assert h.answer(ta) is None
    h.tick(1)
    resp = h.answer(ta)  # its session timed out: removed, the rebalance completes
    assert (resp.error, [m.member_id for m in resp.members]) == (E.NONE, [ids["i-a"]])


# ------------------------------------------------------------------ group.max.size


def test_group_max_size_refuses_the_member_too_many():
    h = Harness(config={"group_max_size": 2})
    h.lead()
    a, b, c = h.join(), h.join(), h.join()
    assert (h.answer(c).error, h.answer(c).member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
    h.settle_all()
    assert h.answer(a).error is E.NONE and h.answer(b).error is E.NONE
    assert h.answer(h.join()).error is E.GROUP_MAX_SIZE_REACHED  # completing: full
    assert len(h.gc.groups["g"].members) == 2


def test_group_loaded_over_a_lowered_max_size_rebalances_and_refuses_the_last():
    h = Harness()
    h.lead()
    members, gen = h.stable_group(3)
    h2 = Harness(config={"group_max_size": 2})
    h2.log = h.log
    h2.lead()
    assert h2.state() == "PreparingRebalance"
    t = [h2.join(member_id=m) for m in members]
    assert h2.answer(t[2]).error is E.GROUP_MAX_SIZE_REACHED
    assert len(h2.gc.groups["g"].members) == 2
    assert h2.state() == "CompletingRebalance"


# ------------------------------------------------------------------ the transition table


def test_illegal_transition_raises():
    group = Group("g", GroupState.EMPTY, 0)
    with pytest.raises(IllegalTransitionError):
        group.transition_to(GroupState.STABLE, 1)
    with pytest.raises(IllegalTransitionError):
        group.transition_to(GroupState.COMPLETING_REBALANCE, 1)
    group.transition_to(GroupState.PREPARING_REBALANCE, 1)
    with pytest.raises(IllegalTransitionError):
        group.transition_to(GroupState.STABLE, 2)
    group.transition_to(GroupState.DEAD, 2)
    group.transition_to(GroupState.DEAD, 3)


def test_generation_grows_by_one_per_rebalance(h):
    (a, b), gen = h.stable_group(2)
    generations = [gen]
    for _ in range(3):
        ta = h.join(member_id=a)
        tb = h.join(member_id=b)
        generations.append(h.answer(ta).generation_id)
        assert h.answer(tb).generation_id == generations[-1]
        h.sync("g", generations[-1], a, [(a, b""), (b, b"")])
        h.complete()
    assert generations == [gen, gen + 1, gen + 2, gen + 3]


def test_heartbeats_do_not_pile_up_timers(h):
    (a, b), gen = h.stable_group(2, session_ms=30_000)
    for _ in range(5_000):
        h.tick(1)
        assert h.heartbeat("g", gen, a) is E.NONE
        assert h.heartbeat("g", gen, b) is E.NONE
    assert len(h.gc._timers) < 2_100  # two live session deadlines and the retention check, plus unswept stale ones
    assert h.gc.next_deadline_ms == h.now + 30_000


def test_a_heartbeat_after_the_session_ended_finds_the_member_gone_even_if_the_driver_polled_late(h):
    (a,), gen = h.stable_group(1)
    h.now += 10_001  # the driver never polled at the deadline
    assert h.heartbeat("g", gen, a) is E.UNKNOWN_MEMBER_ID
    assert h.state() == "Empty"


@pytest.mark.timeout(20)
def test_static_members_alone_with_a_rebalance_timeout_of_0_do_not_hang_the_coordinator(h):
    """A rebalance in which only static members are left and none rejoined waits again for
    them. With a rebalance timeout of 0 (a client may send it) that wait was armed at the
    same instant, fired, re-armed, for ever: `poll` never returned, and a broker's loop
    would have hung (found by the property test; this is its shrunk example). It now waits
    until the first of their sessions ends."""
    a = h.join(instance="i-a", require_known=True, session_ms=10_000, rebalance_ms=0)
    b = h.join(session_ms=6_000, rebalance_ms=6_000)
    h.settle_all()  # t = 3 s: generation 1 with both; neither sends SyncGroup
    assert h.answer(a).error is E.NONE and h.answer(b).error is E.NONE
    a_id = h.answer(a).member_id
    h.tick(6_000)  # t = 9 s: b's session ends; only i-a is left, rebalance timeout 0
    g = h.gc.groups["g"]
    assert h.state() == "PreparingRebalance" and list(g.members) == [a_id]
    assert g.join is not None and g.join.deadline.at_ms == 13_000  # i-a's session deadline
    h.tick(3_999)  # i-a neither rejoined nor timed out: still waited for
    assert h.state() == "PreparingRebalance"
    h.tick(1)  # its session ended: removed, the rebalance completes, the group is empty
    assert h.state() == "Empty" and not g.members
