"""The error-code table: Kafka's numbers, one class per code, both directions."""

from __future__ import annotations

from kafkalite.protocol.errors import (
    ERROR_FOR_CODE,
    ErrorCode,
    FencedLeaderEpochError,
    InvalidIsrVersionError,
    KafkaliteError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    code_for_error,
    error_from_code,
)


def test_kafka_numbers_for_codes_the_brokers_rely_on():
    expected = {
        "UNKNOWN_SERVER_ERROR": -1, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2,
        "UNKNOWN_TOPIC_OR_PARTITION": 3, "NOT_LEADER_OR_FOLLOWER": 6, "REQUEST_TIMED_OUT": 7,
        "MESSAGE_TOO_LARGE": 10, "STALE_CONTROLLER_EPOCH": 11, "COORDINATOR_NOT_AVAILABLE": 15,
        "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
        "INVALID_REQUIRED_ACKS": 21, "INVALID_TIMESTAMP": 32, "UNSUPPORTED_VERSION": 35,
        "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37, "INVALID_REPLICATION_FACTOR": 38,
        "INVALID_CONFIG": 40, "NOT_CONTROLLER": 41, "INVALID_REQUEST": 42,
        "POLICY_VIOLATION": 44, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
        "DUPLICATE_SEQUENCE_NUMBER": 46, "INVALID_PRODUCER_EPOCH": 47,
        "KAFKA_STORAGE_ERROR": 56, "UNKNOWN_PRODUCER_ID": 59, "TOPIC_DELETION_DISABLED": 73,
        "FENCED_LEADER_EPOCH": 74, "UNKNOWN_LEADER_EPOCH": 75, "STALE_BROKER_EPOCH": 77,
        "OFFSET_NOT_AVAILABLE": 78, "FENCED_INSTANCE_ID": 82, "INVALID_RECORD": 87,
        "THROTTLING_QUOTA_EXCEEDED": 89, "PRODUCER_FENCED": 90, "INVALID_UPDATE_VERSION": 95,
    }
    assert {name: int(ErrorCode[name]) for name in expected} == expected


def test_table_maps_both_ways():
    for code, cls in ERROR_FOR_CODE.items():
        assert cls.code == code
        error = error_from_code(code, "why")
        assert type(error) is cls
        assert code_for_error(error) == code
        assert str(error) == "why"


def test_retriable_flags_follow_kafka():
    assert NotLeaderOrFollowerError.retriable
    assert FencedLeaderEpochError.retriable
    assert not OffsetOutOfRangeError.retriable
    assert not InvalidIsrVersionError.retriable
    assert InvalidIsrVersionError.code == ErrorCode.INVALID_ISR_VERSION == 95


def test_unmapped_and_foreign_codes_stay_typed():
    error = error_from_code(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    assert isinstance(error, KafkaliteError)
    assert error.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert error_from_code(12345).code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert code_for_error(ValueError()) == ErrorCode.UNKNOWN_SERVER_ERROR


def test_the_cores_codes_are_the_protocols_numbers():
    """The core keeps its own subset of Kafka's table (it may not import the protocol
    layer); every name there must carry the protocol's number."""
    from kafkalite.core.codes import ErrorCode as CoreErrorCode

    for code in CoreErrorCode:
        assert int(ErrorCode[code.name]) == int(code), code.name
