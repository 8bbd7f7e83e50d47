"""Error codes and typed operating errors of the pure core.

The numbers mirror Apache Kafka's `Errors` table so the shell can put them on the wire
unchanged. The core must not import `kafkalite.protocol` (layering, STYLE habit 12), so the
subset it needs lives here; the protocol layer can check its own table against this one.

Two kinds of error (STYLE habit 7):
- operating errors (a stale epoch, not the leader, bad client input) are `CoreError`
  subclasses carrying the wire `code`; the shell maps them with `error.code`;
- programmer errors (an illegal state transition, a broken invariant) are
  `IllegalTransitionError` / `AssertionError` and are never caught.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka's error numbers (org.apache.kafka.common.protocol.Errors)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    # KIP-497 named it INVALID_ISR_VERSION; Kafka shipped it as INVALID_UPDATE_VERSION (95).
    INVALID_UPDATE_VERSION = 95
    INVALID_ISR_VERSION = 95  # alias, same member as INVALID_UPDATE_VERSION


class CoreError(Exception):
    """An operating error: expected in a distributed system, answered with `code`."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


class NotLeaderOrFollowerError(CoreError):
    """This broker does not lead (or follow) the partition the request names."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class StaleLeaderEpochError(CoreError):
    """A LeaderAndIsr for an older leader epoch (or an older partition epoch in the same
    leader epoch). Kafka answers a stale LeaderAndIsr partition with STALE_CONTROLLER_EPOCH
    (ReplicaManager.becomeLeaderOrFollower); there is no STALE_LEADER_EPOCH number."""

    code = ErrorCode.STALE_CONTROLLER_EPOCH


class FencedLeaderEpochError(CoreError):
    """The request carries a leader epoch older than ours."""

    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(CoreError):
    """The request carries a leader epoch newer than ours (we have not heard of it yet)."""

    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class OffsetOutOfRangeError(CoreError):
    """A fetch offset above the leader's LEO (or below its log start)."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class PolicyViolationError(CoreError):
    """The topic's configuration forbids the request (DeleteRecords on a compacted-only topic)."""

    code = ErrorCode.POLICY_VIOLATION


class OffsetNotAvailableError(CoreError):
    """The offset exists (or will) on the leader but cannot be answered here yet: a follower
    asked for records it has not replicated, or a new leader asked for its latest epoch's
    end before it knows the true HW (KIP-392). Clients back off and retry (at the leader)."""

    code = ErrorCode.OFFSET_NOT_AVAILABLE


class InvalidRequestError(CoreError):
    """A cluster-internal request that contradicts itself (e.g. a LeaderAndIsr whose leader
    is not in its ISR). Answered, never applied half-way."""

    code = ErrorCode.INVALID_REQUEST


class InvalidPartitionsError(CoreError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(CoreError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(CoreError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class PurgatoryFullError(CoreError):
    """The purgatory is at its bound; the shell answers the request at once instead."""

    code = ErrorCode.REQUEST_TIMED_OUT


# ------------------------------------------------------------------ group coordinator
# The group coordinator (kafkalite.core.group_coordinator) answers with these codes as
# values in its typed answers, since a group answer carries data with its error
# (MEMBER_ID_REQUIRED with the new member id, an error per partition or per leaving member);
# only a record it cannot read is an exception.


class OffsetsRecordError(CoreError):
    """A `__consumer_offsets` key or value this codec cannot read (unknown version, short or
    trailing bytes). Kafka throws IllegalStateException; a loader skips the record."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


# The typed error of each code a fencing check returns (PartitionReplicaState's
# validate_leader_epoch / check_current_leader_epoch), so every caller raises the same types.
FENCING_ERRORS: dict[ErrorCode, type[CoreError]] = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: NotLeaderOrFollowerError,
    ErrorCode.FENCED_LEADER_EPOCH: FencedLeaderEpochError,
    ErrorCode.UNKNOWN_LEADER_EPOCH: UnknownLeaderEpochError,
}


class IllegalTransitionError(RuntimeError):
    """Programmer error: an event that the state's transition table does not allow.
    Never caught (STYLE habit 7); like h11's LocalProtocolError it names state and event."""

    def __init__(self, machine: str, state: object, event: object) -> None:
        super().__init__(f"{machine}: illegal event {event!r} in state {state!r}")
        self.machine = machine
        self.state = state
        self.event = event
