"""The group APIs' wire bodies <-> the group coordinator core's typed messages, per version.

Pure functions, not yet called by the broker (issue 10, second part: the driver in
kafkalite.broker and the KafkaApis handlers use them). Request bodies are what
kafkalite.protocol.codec decodes (fields absent at a version hold their defaults); response
bodies are what it encodes. What differs between versions is settled here, as Kafka's
request and response classes settle it:

- JoinGroup v0 has no rebalance timeout: it is the session timeout. v4+ requires a known
  member id from dynamic members (KIP-394); protocol_name is a non-null string up to v5.
- LeaveGroup v0-v2 name one member (member_id) and answer with one error code: the
  top-level error, else that member's.
- OffsetCommit v0-v1 carry no retention, v1 a commit timestamp, v6+ a leader epoch, v7 a
  group.instance.id. Partitions of unknown topics are answered UNKNOWN_TOPIC_OR_PARTITION
  without reaching the coordinator (KafkaApis does this against its metadata cache).
- OffsetFetch v0-v1 have no top-level error: an error goes on every requested partition;
  v2+ may ask for all partitions (null topics) and answer an error with no partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_messages import (
    NO_LEADER_EPOCH,
    NO_OFFSET,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    ListGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupRequest,
    SyncGroupResponse,
)

TP = tuple[str, int]
E = ErrorCode


def _by_topic(items: Iterable[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """[(topic, partition entry)] -> [{"name", "partitions": [...]}], topics in first-seen order."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, entry in items:
        topics.setdefault(topic, []).append(entry)
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


# ------------------------------------------------------------------ JoinGroup


def join_group_request(version: int, body: dict[str, Any], *, reply_to: Any, client_id: str | None,
                       client_host: str) -> JoinGroupRequest:
    session_timeout_ms = body["session_timeout_ms"]
    rebalance_timeout_ms = session_timeout_ms if version == 0 else body["rebalance_timeout_ms"]
    return JoinGroupRequest(
        body["group_id"], body["member_id"], body.get("group_instance_id"), body["protocol_type"],
        tuple((p["name"], p["metadata"]) for p in body["protocols"]), session_timeout_ms, rebalance_timeout_ms,
        require_known_member_id=version >= 4, reply_to=reply_to, client_id=client_id or "", client_host=client_host)


def join_group_response(resp: JoinGroupResponse) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0, "error_code": int(resp.error), "generation_id": resp.generation_id,
        "protocol_name": resp.protocol_name or "", "leader": resp.leader, "member_id": resp.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                    for m in resp.members],
    }


# ------------------------------------------------------------------ SyncGroup / Heartbeat / LeaveGroup


def sync_group_request(body: dict[str, Any], *, reply_to: Any) -> SyncGroupRequest:
    return SyncGroupRequest(body["group_id"], body["generation_id"], body["member_id"], body.get("group_instance_id"),
                            tuple((a["member_id"], a["assignment"]) for a in body["assignments"]), reply_to)


def sync_group_response(resp: SyncGroupResponse) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": int(resp.error), "assignment": resp.assignment}


def heartbeat_request(body: dict[str, Any], *, reply_to: Any) -> HeartbeatRequest:
    return HeartbeatRequest(body["group_id"], body["generation_id"], body["member_id"], body.get("group_instance_id"), reply_to)


def heartbeat_response(resp: HeartbeatResponse) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": int(resp.error)}


def leave_group_request(version: int, body: dict[str, Any], *, reply_to: Any) -> LeaveGroupRequest:
    if version < 3:
        members: tuple[LeavingMember, ...] = (LeavingMember(body["member_id"]),)
    else:
        members = tuple(LeavingMember(m["member_id"], m.get("group_instance_id")) for m in body["members"])
    return LeaveGroupRequest(body["group_id"], members, reply_to)


def leave_group_response(version: int, resp: LeaveGroupResponse) -> dict[str, Any]:
    if version < 3:
        error = resp.error
        if error is E.NONE and resp.members:
            error = resp.members[0].error
        return {"throttle_time_ms": 0, "error_code": int(error)}
    return {"throttle_time_ms": 0, "error_code": int(resp.error), "members": [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": int(m.error)}
        for m in resp.members]}


# ------------------------------------------------------------------ OffsetCommit / OffsetFetch


def offset_commit_request(version: int, body: dict[str, Any], *, reply_to: Any,
                          known: Callable[[TP], bool]) -> tuple[OffsetCommitRequest | None, tuple[PartitionResult, ...]]:
    """The request for the coordinator (None if every partition is unknown) and the answers
    for partitions of topics this broker does not know."""
    partitions, unknown = [], []
    for topic in body["topics"]:
        for p in topic["partitions"]:
            tp = (topic["name"], p["partition_index"])
            if not known(tp):
                unknown.append(PartitionResult(tp[0], tp[1], E.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partitions.append(OffsetCommitPartition(
                tp[0], tp[1], p["committed_offset"], p["committed_metadata"],
                p["committed_leader_epoch"] if version >= 6 else NO_LEADER_EPOCH,
                p["commit_timestamp"] if version == 1 else -1))
    if not partitions:
        return None, tuple(unknown)
    generation = body["generation_id_or_member_epoch"] if version >= 1 else -1
    member_id = body["member_id"] if version >= 1 else ""
    retention_ms = body["retention_time_ms"] if 2 <= version <= 4 else -1
    request = OffsetCommitRequest(body["group_id"], generation, member_id, body.get("group_instance_id"),
                                  tuple(partitions), reply_to, retention_ms)
    return request, tuple(unknown)


def offset_commit_response(resp: OffsetCommitResponse | None, unknown: tuple[PartitionResult, ...]) -> dict[str, Any]:
    results = [*(resp.partitions if resp is not None else ()), *unknown]
    return {"throttle_time_ms": 0, "topics": _by_topic(
        (r.topic, {"partition_index": r.partition, "error_code": int(r.error)}) for r in results)}


def offset_fetch_request(body: dict[str, Any], *, reply_to: Any) -> OffsetFetchRequest:
    topics = body["topics"]
    partitions = None if topics is None else tuple((t["name"], p) for t in topics for p in t["partition_indexes"])
    return OffsetFetchRequest(body["group_id"], partitions, reply_to)


def offset_fetch_response(version: int, resp: OffsetFetchResponse, request: OffsetFetchRequest) -> dict[str, Any]:
    if resp.error is not E.NONE:
        if version >= 2:
            return {"throttle_time_ms": 0, "topics": [], "error_code": int(resp.error)}
        rows = [(t, {"partition_index": p, "committed_offset": NO_OFFSET, "committed_leader_epoch": NO_LEADER_EPOCH,
                     "metadata": "", "error_code": int(resp.error)}) for t, p in request.partitions or ()]
        return {"throttle_time_ms": 0, "topics": _by_topic(rows)}
    rows = [(f.topic, {"partition_index": f.partition, "committed_offset": f.offset, "committed_leader_epoch": f.leader_epoch,
                       "metadata": f.metadata, "error_code": int(f.error)}) for f in resp.partitions]
    return {"throttle_time_ms": 0, "topics": _by_topic(rows), "error_code": 0}


# ------------------------------------------------------------------ ListGroups / DescribeGroups / DeleteGroups / OffsetDelete


def list_groups_response(resp: ListGroupsResponse) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": int(resp.error),
            "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type} for g in resp.groups]}


def describe_groups_request(body: dict[str, Any], *, reply_to: Any) -> DescribeGroupsRequest:
    return DescribeGroupsRequest(tuple(body["groups"]), reply_to)


def describe_groups_response(resp: DescribeGroupsResponse) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "groups": [{
        "error_code": int(g.error), "group_id": g.group_id, "group_state": g.state, "protocol_type": g.protocol_type,
        "protocol_data": g.protocol, "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "member_metadata": m.metadata, "member_assignment": m.assignment}
            for m in g.members],
    } for g in resp.groups]}


def delete_groups_request(body: dict[str, Any], *, reply_to: Any) -> DeleteGroupsRequest:
    return DeleteGroupsRequest(tuple(body["groups_names"]), reply_to)


def delete_groups_response(resp: DeleteGroupsResponse) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": int(e)} for g, e in resp.results]}


def offset_delete_request(body: dict[str, Any], *, reply_to: Any) -> OffsetDeleteRequest:
    return OffsetDeleteRequest(body["group_id"], tuple((t["name"], p["partition_index"]) for t in body["topics"]
                                                       for p in t["partitions"]), reply_to)


def offset_delete_response(resp: OffsetDeleteResponse) -> dict[str, Any]:
    return {"error_code": int(resp.error), "throttle_time_ms": 0, "topics": _by_topic(
        (r.topic, {"partition_index": r.partition, "error_code": int(r.error)}) for r in resp.partitions)}
