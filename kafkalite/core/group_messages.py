"""What goes in and out of the group coordinator core (DESIGN.md section 10, issue 10).

Events in: the group APIs' requests (each carries the driver's `reply_to` token), the
leadership of `__consumer_offsets` partitions changing, records read from such a partition,
and the outcome of appends the core asked for. Effects out (`Ready`): answers to reply
tokens, appends of records to an offsets partition (each with an `append_id` whose outcome
the driver reports back, exactly once), loads of a partition, notes, and the next deadline.

Requests are decoded by the shell from the Kafka wire format (kafkalite.protocol.schema);
these types carry only what the coordinator decides with, already normalised by API
version (for example JoinGroup v0's rebalance timeout is its session timeout; KIP-394's
"member id required" applies to JoinGroup v4+ without a group.instance.id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kafkalite.core.codes import ErrorCode
from kafkalite.core.offsets_records import OffsetsRecord

TP = tuple[str, int]

OFFSETS_TOPIC = "__consumer_offsets"  # the groups' records; its partitions' leaders coordinate
UNKNOWN_MEMBER_ID = ""  # JoinGroupRequest.UNKNOWN_MEMBER_ID
NO_GENERATION = -1
NO_LEADER_EPOCH = -1
NO_OFFSET = -1  # OffsetFetchResponse.INVALID_OFFSET
DEFAULT_RETENTION_TIME_MS = -1  # OffsetCommit v2-v4: "use the broker's offsets.retention.minutes"
DEFAULT_TIMESTAMP_MS = -1  # OffsetCommit v1 commit_timestamp: "now"


# ------------------------------------------------------------------ the offsets partition of a group


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, in int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: like Math.abs, but Integer.MIN_VALUE maps to 0 (not to itself)."""
    assert -(1 << 31) <= n < 1 << 31
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group_id: str, offsets_topic_partitions: int) -> int:
    """The `__consumer_offsets` partition of a group, whose leader is its coordinator
    (GroupMetadataManager.partitionFor), so every Kafka tool agrees."""
    assert offsets_topic_partitions > 0
    return kafka_abs(java_string_hash(group_id)) % offsets_topic_partitions


# ------------------------------------------------------------------ requests (events with a reply token)


@dataclass(frozen=True)
class JoinGroupRequest:
    group_id: str
    member_id: str  # UNKNOWN_MEMBER_ID on the first join
    group_instance_id: str | None  # KIP-345 static membership
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's preference order
    session_timeout_ms: int
    rebalance_timeout_ms: int
    require_known_member_id: bool  # KIP-394: JoinGroup v4+ (static members are exempt)
    reply_to: Any
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    assignments: tuple[tuple[str, bytes], ...]  # (member id, assignment): the leader's only
    reply_to: Any
    protocol_type: str | None = None  # SyncGroup v5+; None: not checked
    protocol_name: str | None = None


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    reply_to: Any


@dataclass(frozen=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveGroupRequest:
    """v0-v2 leave with one member id; v3 (KIP-345) with a batch of members."""

    group_id: str
    members: tuple[LeavingMember, ...]
    reply_to: Any


@dataclass(frozen=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    metadata: str | None  # null is stored as ""
    leader_epoch: int = NO_LEADER_EPOCH  # v6+
    commit_timestamp_ms: int = DEFAULT_TIMESTAMP_MS  # v1 only


@dataclass(frozen=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int  # NO_GENERATION: a "simple" consumer that only stores offsets
    member_id: str
    group_instance_id: str | None
    partitions: tuple[OffsetCommitPartition, ...]
    reply_to: Any
    retention_time_ms: int = DEFAULT_RETENTION_TIME_MS  # v2-v4


@dataclass(frozen=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[TP, ...] | None  # None (v2+): every partition the group has an offset for
    reply_to: Any


@dataclass(frozen=True)
class ListGroupsRequest:
    reply_to: Any


@dataclass(frozen=True)
class DescribeGroupsRequest:
    group_ids: tuple[str, ...]
    reply_to: Any


@dataclass(frozen=True)
class DeleteGroupsRequest:
    group_ids: tuple[str, ...]
    reply_to: Any


@dataclass(frozen=True)
class OffsetDeleteRequest:
    group_id: str
    partitions: tuple[TP, ...]
    reply_to: Any


GroupRequest = (
    JoinGroupRequest | SyncGroupRequest | HeartbeatRequest | LeaveGroupRequest | OffsetCommitRequest
    | OffsetFetchRequest | ListGroupsRequest | DescribeGroupsRequest | DeleteGroupsRequest | OffsetDeleteRequest
)


# ------------------------------------------------------------------ other events


@dataclass(frozen=True)
class BecameLeader:
    """This broker leads `__consumer_offsets` partition `partition` in `leader_epoch` (its
    coordinator epoch): load the partition, then coordinate its groups."""

    partition: int
    leader_epoch: int


@dataclass(frozen=True)
class BecameFollower:
    """This broker no longer leads the partition (`leader_epoch` None: it was deleted or the
    replica stopped): unload its groups and answer NOT_COORDINATOR."""

    partition: int
    leader_epoch: int | None


@dataclass(frozen=True)
class LoadedRecord:
    offset: int  # the record's offset in the partition: later offsets win
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class RecordsLoaded:
    """Records read for a LoadPartition, in offset order, any number of events per load;
    the last has `done`. Control batches are left out by the driver."""

    partition: int
    leader_epoch: int
    records: tuple[LoadedRecord, ...]
    done: bool


@dataclass(frozen=True)
class AppendCompleted:
    """The records of `append_id` are committed (replicated to min.insync replicas)."""

    append_id: int
    base_offset: int


@dataclass(frozen=True)
class AppendFailed:
    """The append failed (the log's or replication's error, e.g. NOT_ENOUGH_REPLICAS,
    NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT)."""

    append_id: int
    error: ErrorCode


@dataclass(frozen=True)
class PartitionsDeleted:
    """Topic partitions were deleted: their committed offsets go (Kafka's
    handleDeletedPartitions)."""

    partitions: tuple[TP, ...]


GroupEvent = GroupRequest | BecameLeader | BecameFollower | RecordsLoaded | AppendCompleted | AppendFailed | PartitionsDeleted


# ------------------------------------------------------------------ responses


@dataclass(frozen=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResponse:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinGroupMember, ...] = ()  # the leader's answer only


@dataclass(frozen=True)
class SyncGroupResponse:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class HeartbeatResponse:
    error: ErrorCode


@dataclass(frozen=True)
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True)
class LeaveGroupResponse:
    """v0-v2 answer with `error` when it is set, else with the one member's error."""

    error: ErrorCode
    members: tuple[LeaveMemberResponse, ...] = ()


@dataclass(frozen=True)
class PartitionResult:
    topic: str
    partition: int
    error: ErrorCode


@dataclass(frozen=True)
class OffsetCommitResponse:
    partitions: tuple[PartitionResult, ...]  # in the request's order


@dataclass(frozen=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int  # NO_OFFSET: nothing committed
    leader_epoch: int
    metadata: str
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True)
class OffsetFetchResponse:
    """v0-v1 have no top-level error: the shell puts `error` on every partition."""

    error: ErrorCode
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class ListGroupsResponse:
    error: ErrorCode
    groups: tuple[GroupOverview, ...] = ()


@dataclass(frozen=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # empty unless the group is Stable
    assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str  # "" on error, "Dead" for a group that does not exist
    protocol_type: str = ""
    protocol: str = ""  # the selected protocol, Stable groups only
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True)
class DeleteGroupsResponse:
    results: tuple[tuple[str, ErrorCode], ...]  # (group id, error) in the request's order


@dataclass(frozen=True)
class OffsetDeleteResponse:
    error: ErrorCode
    partitions: tuple[PartitionResult, ...] = ()


GroupResponse = (
    JoinGroupResponse | SyncGroupResponse | HeartbeatResponse | LeaveGroupResponse | OffsetCommitResponse
    | OffsetFetchResponse | ListGroupsResponse | DescribeGroupsResponse | DeleteGroupsResponse | OffsetDeleteResponse
)


# ------------------------------------------------------------------ effects


@dataclass(frozen=True)
class Answer:
    reply_to: Any
    response: GroupResponse


@dataclass(frozen=True)
class AppendRecords:
    """Append `records` to `__consumer_offsets` partition `partition`, as its leader in
    `leader_epoch` (refuse if that is no longer so), with acks=all semantics, timestamp
    `timestamp_ms`; report AppendCompleted or AppendFailed for `append_id`, exactly once.
    `kafkalite.core.offsets_records.encode_record` gives each record's key and value bytes.
    Appends to one partition are written in the order the core emits them (a tombstone must
    land after the commit it deletes); their outcomes may come back in any order."""

    append_id: int
    partition: int
    leader_epoch: int
    records: tuple[OffsetsRecord, ...]
    timestamp_ms: int


@dataclass(frozen=True)
class LoadPartition:
    """Read partition `partition` from its log start to its log end offset and hand the
    records back in RecordsLoaded events (the last with done=True)."""

    partition: int
    leader_epoch: int


@dataclass(frozen=True)
class Note:
    level: str  # "info" | "warning"
    text: str


@dataclass
class Ready:
    answers: list[Answer] = field(default_factory=list)
    appends: list[AppendRecords] = field(default_factory=list)
    loads: list[LoadPartition] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    deadline_ms: int | None = None  # call poll(now_ms) then (None: no timer is armed)
