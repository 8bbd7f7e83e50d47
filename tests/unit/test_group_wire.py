"""The group APIs' wire bodies <-> the core's typed messages, per version, through the real
codec (encode_request/decode_request, encode_response/decode_response)."""

from __future__ import annotations

import pytest

from kafkalite.broker import group_wire as w
from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_messages import (
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsResponse,
    FetchedOffset,
    GroupOverview,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeaveMemberResponse,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupResponse,
)
from kafkalite.protocol import codec
from kafkalite.protocol.codec import RequestHeader
from kafkalite.protocol.schema import ApiKey

E = ErrorCode


def wire_request(api: ApiKey, version: int, body: dict) -> dict:
    """A body as the broker sees it: encoded by a client at `version`, decoded by us."""
    _, decoded = codec.decode_request(codec.encode_request(api, version, 1, "client", body)[4:])
    return decoded


def wire_response(api: ApiKey, version: int, body: dict) -> dict:
    frame = codec.encode_response(RequestHeader(api, version, 1, None), body)
    return codec.decode_response(api, version, frame[4:])[1]


JOIN = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 60_000, "member_id": "",
        "group_instance_id": "inst", "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"m"}]}


@pytest.mark.parametrize("version", range(6))
def test_join_group_request_per_version(version):
    req = w.join_group_request(version, wire_request(ApiKey.JOIN_GROUP, version, JOIN), reply_to="r", client_id="cid",
                               client_host="/1.2.3.4")
    assert req.rebalance_timeout_ms == (10_000 if version == 0 else 60_000)  # v0 has none: the session timeout
    assert req.require_known_member_id is (version >= 4)
    assert req.group_instance_id == ("inst" if version >= 5 else None)
    assert (req.protocols, req.client_id, req.client_host) == ((("range", b"m"),), "cid", "/1.2.3.4")


@pytest.mark.parametrize("version", range(6))
def test_join_group_response_per_version(version):
    resp = JoinGroupResponse(E.NONE, "m1", 3, "consumer", "range", "m1", (JoinGroupMember("m1", "inst", b"meta"),))
    body = wire_response(ApiKey.JOIN_GROUP, version, w.join_group_response(resp))
    assert (body["error_code"], body["generation_id"], body["protocol_name"], body["leader"], body["member_id"]) == (0, 3, "range", "m1", "m1")
    assert body["members"][0]["metadata"] == b"meta"
    error = wire_response(ApiKey.JOIN_GROUP, version, w.join_group_response(JoinGroupResponse(E.MEMBER_ID_REQUIRED, "m2")))
    assert (error["error_code"], error["member_id"], error["generation_id"], error["protocol_name"]) == (79, "m2", -1, "")


@pytest.mark.parametrize("version", range(4))
def test_leave_group_per_version(version):
    body = {"group_id": "g", "member_id": "m1", "members": [{"member_id": "m1", "group_instance_id": None},
                                                            {"member_id": "", "group_instance_id": "i2"}]}
    req = w.leave_group_request(version, wire_request(ApiKey.LEAVE_GROUP, version, body), reply_to="r")
    assert [(m.member_id, m.group_instance_id) for m in req.members] == ([("m1", None)] if version < 3 else [("m1", None), ("", "i2")])
    resp = LeaveGroupResponse(E.NONE, (LeaveMemberResponse("m1", None, E.UNKNOWN_MEMBER_ID),))
    out = wire_response(ApiKey.LEAVE_GROUP, version, w.leave_group_response(version, resp))
    if version < 3:
        assert out["error_code"] == 25  # the one member's error is the answer
    else:
        assert (out["error_code"], out["members"][0]["error_code"]) == (0, 25)


def test_sync_group_and_heartbeat():
    body = {"group_id": "g", "generation_id": 4, "member_id": "m", "group_instance_id": None,
            "assignments": [{"member_id": "m", "assignment": b"A"}]}
    req = w.sync_group_request(wire_request(ApiKey.SYNC_GROUP, 3, body), reply_to="r")
    assert (req.generation_id, req.assignments, req.protocol_type) == (4, (("m", b"A"),), None)
    out = wire_response(ApiKey.SYNC_GROUP, 0, w.sync_group_response(SyncGroupResponse(E.NONE, b"A", "consumer", "range")))
    assert (out["error_code"], out["assignment"]) == (0, b"A")
    hb = w.heartbeat_request(wire_request(ApiKey.HEARTBEAT, 3, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                                                "group_instance_id": "i"}), reply_to="r")
    assert (hb.generation_id, hb.group_instance_id) == (1, "i")


COMMIT = {"group_id": "g", "generation_id_or_member_epoch": 5, "member_id": "m", "group_instance_id": "i",
          "retention_time_ms": 1000, "topics": [{"name": "t", "partitions": [
              {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 3, "commit_timestamp": 77,
               "committed_metadata": None},
              {"partition_index": 9, "committed_offset": 11, "committed_leader_epoch": 3, "commit_timestamp": 77,
               "committed_metadata": "x"}]}]}


@pytest.mark.parametrize("version", range(8))
def test_offset_commit_per_version(version):
    req, unknown = w.offset_commit_request(version, wire_request(ApiKey.OFFSET_COMMIT, version, COMMIT), reply_to="r",
                                           known=lambda tp: tp != ("t", 9))
    assert req is not None
    assert (req.generation_id, req.member_id) == ((-1, "") if version == 0 else (5, "m"))
    assert req.retention_time_ms == (1000 if 2 <= version <= 4 else -1)
    assert req.group_instance_id == ("i" if version >= 7 else None)
    (p,) = req.partitions
    assert (p.offset, p.leader_epoch, p.commit_timestamp_ms, p.metadata) == (
        10, 3 if version >= 6 else -1, 77 if version == 1 else -1, None)
    assert unknown == (PartitionResult("t", 9, E.UNKNOWN_TOPIC_OR_PARTITION),)
    out = wire_response(ApiKey.OFFSET_COMMIT, version, w.offset_commit_response(
        OffsetCommitResponse((PartitionResult("t", 0, E.NONE),)), unknown))
    assert out["topics"] == [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0},
                                                          {"partition_index": 9, "error_code": 3}]}]


def test_offset_commit_of_only_unknown_partitions_never_reaches_the_coordinator():
    req, unknown = w.offset_commit_request(2, wire_request(ApiKey.OFFSET_COMMIT, 2, COMMIT), reply_to="r", known=lambda tp: False)
    assert req is None and len(unknown) == 2
    assert [p["error_code"] for p in w.offset_commit_response(None, unknown)["topics"][0]["partitions"]] == [3, 3]


@pytest.mark.parametrize("version", range(6))
def test_offset_fetch_per_version(version):
    body = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    req = w.offset_fetch_request(wire_request(ApiKey.OFFSET_FETCH, version, body), reply_to="r")
    assert req.partitions == (("t", 0), ("t", 1))
    ok = OffsetFetchResponse(E.NONE, (FetchedOffset("t", 0, 42, 7, "md"), FetchedOffset("t", 1, -1, -1, "")))
    out = wire_response(ApiKey.OFFSET_FETCH, version, w.offset_fetch_response(version, ok, req))
    first = out["topics"][0]["partitions"][0]
    assert (first["committed_offset"], first["metadata"], first["committed_leader_epoch"]) == (42, "md", 7 if version >= 5 else -1)
    failed = wire_response(ApiKey.OFFSET_FETCH, version, w.offset_fetch_response(
        version, OffsetFetchResponse(E.NOT_COORDINATOR), req))
    if version >= 2:
        assert (failed["error_code"], failed["topics"]) == (16, [])
    else:  # no top-level error: it goes on every partition asked for
        assert [p["error_code"] for p in failed["topics"][0]["partitions"]] == [16, 16]


def test_offset_fetch_of_all_partitions_v2():
    req = w.offset_fetch_request(wire_request(ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": None}), reply_to="r")
    assert req.partitions is None


@pytest.mark.parametrize("version", range(5))
def test_describe_and_list_groups(version):
    req = w.describe_groups_request(wire_request(ApiKey.DESCRIBE_GROUPS, version, {"groups": ["a", "b"]}), reply_to="r")
    assert req.group_ids == ("a", "b")
    resp = DescribeGroupsResponse((
        DescribedGroup("a", E.NONE, "Stable", "consumer", "range", (DescribedMember("m", "i", "c", "/h", b"M", b"A"),)),
        DescribedGroup("b", E.NONE, "Dead")))
    out = wire_response(ApiKey.DESCRIBE_GROUPS, version, w.describe_groups_response(resp))
    assert [(g["group_id"], g["group_state"], g["protocol_data"]) for g in out["groups"]] == [("a", "Stable", "range"), ("b", "Dead", "")]
    assert out["groups"][0]["members"][0]["member_assignment"] == b"A"
    listed = wire_response(ApiKey.LIST_GROUPS, min(version, 2), w.list_groups_response(
        ListGroupsResponse(E.NONE, (GroupOverview("a", "consumer", "Stable"),))))
    assert listed["groups"] == [{"group_id": "a", "protocol_type": "consumer"}]


def test_delete_groups_and_offset_delete():
    req = w.delete_groups_request(wire_request(ApiKey.DELETE_GROUPS, 1, {"groups_names": ["a", "b"]}), reply_to="r")
    assert req.group_ids == ("a", "b")
    out = wire_response(ApiKey.DELETE_GROUPS, 1, w.delete_groups_response(
        DeleteGroupsResponse((("a", E.NONE), ("b", E.NON_EMPTY_GROUP)))))
    assert out["results"] == [{"group_id": "a", "error_code": 0}, {"group_id": "b", "error_code": 68}]
    body = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]}
    req2 = w.offset_delete_request(wire_request(ApiKey.OFFSET_DELETE, 0, body), reply_to="r")
    assert req2.partitions == (("t", 0), ("t", 1))
    out2 = wire_response(ApiKey.OFFSET_DELETE, 0, w.offset_delete_response(OffsetDeleteResponse(E.NONE, (
        PartitionResult("t", 0, E.NONE), PartitionResult("t", 1, E.GROUP_SUBSCRIBED_TO_TOPIC)))))
    assert out2["topics"][0]["partitions"] == [{"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 86}]


def test_a_consumer_through_the_wire_formats_and_the_core():
    """JoinGroup v4 twice (KIP-394), SyncGroup v3, OffsetCommit v2 with retention, OffsetFetch
    v1: the bodies a client sends, the core's decisions, the bodies it reads back."""
    import itertools

    from kafkalite.core.group_coordinator import GroupCoordinator, GroupCoordinatorConfig
    from kafkalite.core.group_messages import AppendCompleted, BecameLeader, RecordsLoaded

    ids = itertools.count()
    gc = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_partitions=1, group_initial_rebalance_delay_ms=0),
                          new_member_uuid=lambda: f"u{next(ids)}")
    gc.handle(BecameLeader(0, 1), 0)
    gc.handle(RecordsLoaded(0, 1, (), True), 0)

    def answer(ready, reply_to):
        (a,) = [a for a in ready.answers if a.reply_to == reply_to]
        return a.response

    join = {**JOIN, "group_instance_id": None}
    first = answer(gc.handle(w.join_group_request(4, wire_request(ApiKey.JOIN_GROUP, 4, join), reply_to=1, client_id="app",
                                                  client_host="/h"), 0), 1)
    member_id = wire_response(ApiKey.JOIN_GROUP, 4, w.join_group_response(first))["member_id"]
    assert (first.error, member_id) == (E.MEMBER_ID_REQUIRED, "app-u0")
    gc.handle(w.join_group_request(4, wire_request(ApiKey.JOIN_GROUP, 4, {**join, "member_id": member_id}), reply_to=2,
                                   client_id="app", client_host="/h"), 0)
    joined = wire_response(ApiKey.JOIN_GROUP, 4, w.join_group_response(answer(gc.poll(0), 2)))
    assert (joined["error_code"], joined["generation_id"], joined["leader"]) == (0, 1, member_id)
    sync = {"group_id": "g", "generation_id": 1, "member_id": member_id, "group_instance_id": None,
            "assignments": [{"member_id": member_id, "assignment": b"A"}]}
    ready = gc.handle(w.sync_group_request(wire_request(ApiKey.SYNC_GROUP, 3, sync), reply_to=3), 1)
    ready = gc.handle(AppendCompleted(ready.appends[0].append_id, 0), 2)
    assert wire_response(ApiKey.SYNC_GROUP, 3, w.sync_group_response(answer(ready, 3)))["assignment"] == b"A"
    commit = {**COMMIT, "generation_id_or_member_epoch": 1, "member_id": member_id}
    req, unknown = w.offset_commit_request(2, wire_request(ApiKey.OFFSET_COMMIT, 2, commit), reply_to=4, known=lambda tp: True)
    ready = gc.handle(req, 3)
    assert [r.value.expire_timestamp_ms for r in ready.appends[0].records] == [1003, 1003]  # retention 1000 ms from now
    ready = gc.handle(AppendCompleted(ready.appends[0].append_id, 1), 4)
    committed = wire_response(ApiKey.OFFSET_COMMIT, 2, w.offset_commit_response(answer(ready, 4), unknown))
    assert [p["error_code"] for p in committed["topics"][0]["partitions"]] == [0, 0]
    fetch = w.offset_fetch_request(wire_request(ApiKey.OFFSET_FETCH, 1, {"group_id": "g", "topics": [
        {"name": "t", "partition_indexes": [0, 9, 5]}]}), reply_to=5)
    out = wire_response(ApiKey.OFFSET_FETCH, 1, w.offset_fetch_response(1, answer(gc.handle(fetch, 5), 5), fetch))
    assert [(p["partition_index"], p["committed_offset"], p["metadata"]) for p in out["topics"][0]["partitions"]] == [
        (0, 10, ""), (9, 11, "x"), (5, -1, "")]
