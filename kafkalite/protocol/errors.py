"""Kafka error codes and the typed operating errors that carry them.

Shared by the client protocol and the inter-broker RPC layer, so nothing here knows about
either wire format: an error is a code, a retriable flag and a message. Numbers are Apache
Kafka's (``org.apache.kafka.common.protocol.Errors``); retriable flags follow Kafka's
``RetriableException`` hierarchy.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    # KIP-497 calls a stale partition epoch in AlterIsr "INVALID_UPDATE_VERSION" (95; 82 is
    # FENCED_INSTANCE_ID). INVALID_ISR_VERSION is our alias for the same number.
    INVALID_UPDATE_VERSION = 95
    INVALID_ISR_VERSION = 95
    FEATURE_UPDATE_FAILED = 96


class KafkaliteError(Exception):
    """An operating error: expected, typed, and mapped to exactly one wire code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message if message is not None else self.code.name)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


# One class per typed error; `retriable` follows Kafka's RetriableException hierarchy.


class UnknownServerError(KafkaliteError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(KafkaliteError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(KafkaliteError):
    code = ErrorCode.CORRUPT_MESSAGE
    retriable = True


class UnknownTopicOrPartitionError(KafkaliteError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = True


class InvalidFetchSizeError(KafkaliteError):
    code = ErrorCode.INVALID_FETCH_SIZE


class LeaderNotAvailableError(KafkaliteError):
    code = ErrorCode.LEADER_NOT_AVAILABLE
    retriable = True


class NotLeaderOrFollowerError(KafkaliteError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True


class RequestTimedOutError(KafkaliteError):
    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class BrokerNotAvailableError(KafkaliteError):
    code = ErrorCode.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(KafkaliteError):
    code = ErrorCode.REPLICA_NOT_AVAILABLE
    retriable = True


class MessageTooLargeError(KafkaliteError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class StaleControllerEpochError(KafkaliteError):
    code = ErrorCode.STALE_CONTROLLER_EPOCH


class OffsetMetadataTooLargeError(KafkaliteError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class NetworkError(KafkaliteError):
    code = ErrorCode.NETWORK_EXCEPTION
    retriable = True


class CoordinatorLoadInProgressError(KafkaliteError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class CoordinatorNotAvailableError(KafkaliteError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinatorError(KafkaliteError):
    code = ErrorCode.NOT_COORDINATOR
    retriable = True


class InvalidTopicError(KafkaliteError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(KafkaliteError):
    code = ErrorCode.RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(KafkaliteError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(KafkaliteError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class InvalidRequiredAcksError(KafkaliteError):
    code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGenerationError(KafkaliteError):
    code = ErrorCode.ILLEGAL_GENERATION


class UnknownMemberIdError(KafkaliteError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class RebalanceInProgressError(KafkaliteError):
    code = ErrorCode.REBALANCE_IN_PROGRESS


class InvalidTimestampError(KafkaliteError):
    code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedVersionError(KafkaliteError):
    code = ErrorCode.UNSUPPORTED_VERSION
    # The decoded request header when the codec got that far (for answering/logging).
    header: object | None = None


class TopicAlreadyExistsError(KafkaliteError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(KafkaliteError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaliteError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(KafkaliteError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(KafkaliteError):
    code = ErrorCode.INVALID_CONFIG


class NotControllerError(KafkaliteError):
    code = ErrorCode.NOT_CONTROLLER
    retriable = True


class InvalidRequestError(KafkaliteError):
    code = ErrorCode.INVALID_REQUEST
    # The decoded request header when the codec got that far (for answering/logging).
    header: object | None = None


class UnsupportedForMessageFormatError(KafkaliteError):
    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class PolicyViolationError(KafkaliteError):
    code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceError(KafkaliteError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(KafkaliteError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaliteError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class ConcurrentTransactionsError(KafkaliteError):
    code = ErrorCode.CONCURRENT_TRANSACTIONS
    retriable = True


class KafkaStorageError(KafkaliteError):
    code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True


class UnknownProducerIdError(KafkaliteError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class TopicDeletionDisabledError(KafkaliteError):
    code = ErrorCode.TOPIC_DELETION_DISABLED


class FencedLeaderEpochError(KafkaliteError):
    code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True


class UnknownLeaderEpochError(KafkaliteError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    retriable = True


class StaleBrokerEpochError(KafkaliteError):
    code = ErrorCode.STALE_BROKER_EPOCH


class OffsetNotAvailableError(KafkaliteError):
    code = ErrorCode.OFFSET_NOT_AVAILABLE
    retriable = True


class EligibleLeadersNotAvailableError(KafkaliteError):
    code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    retriable = True


class ElectionNotNeededError(KafkaliteError):
    code = ErrorCode.ELECTION_NOT_NEEDED
    retriable = True


class InvalidRecordError(KafkaliteError):
    code = ErrorCode.INVALID_RECORD


class ThrottlingQuotaExceededError(KafkaliteError):
    code = ErrorCode.THROTTLING_QUOTA_EXCEEDED
    retriable = True


class ProducerFencedError(KafkaliteError):
    code = ErrorCode.PRODUCER_FENCED


class InvalidIsrVersionError(KafkaliteError):
    code = ErrorCode.INVALID_UPDATE_VERSION


# The one table, code -> class, built from the classes above so the two cannot disagree.
# (Only direct subclasses: refinements such as FrameTooLargeError keep their parent's code.)
ERROR_FOR_CODE: dict[ErrorCode, type[KafkaliteError]] = {
    cls.code: cls for cls in KafkaliteError.__subclasses__()
}
assert len(ERROR_FOR_CODE) == len(KafkaliteError.__subclasses__()), "two errors share a code"


class _UnmappedError(KafkaliteError):
    """A code with no typed class: keeps the code, stays a KafkaliteError."""


def error_from_code(code: int, message: str | None = None) -> KafkaliteError:
    """The typed error for a wire code (NONE is not an error and is rejected)."""
    assert code != ErrorCode.NONE, "error_from_code(NONE)"
    cls = ERROR_FOR_CODE.get(code)  # type: ignore[call-overload]
    if cls is not None:
        return cls(message)
    try:
        known = ErrorCode(code)
    except ValueError:
        known = ErrorCode.UNKNOWN_SERVER_ERROR
    err = _UnmappedError(message if message is not None else f"{known.name} ({code})")
    err.code = known
    err.retriable = False
    return err


def code_for_error(exc: BaseException) -> ErrorCode:
    """The wire code for any exception: typed errors map to theirs, anything else is -1."""
    if isinstance(exc, KafkaliteError):
        return exc.code
    return ErrorCode.UNKNOWN_SERVER_ERROR


class FrameTooLargeError(InvalidRequestError):
    """A length prefix above the frame limit or negative: the connection must be closed."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds limit {max_frame_bytes}")
        self.size = size
        self.max_frame_bytes = max_frame_bytes

