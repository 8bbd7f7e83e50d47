"""Idempotent producer de-duplication (Kafka ProducerStateManager semantics)."""

from __future__ import annotations

from kafkalite.core.codes import ErrorCode
from kafkalite.core.producer_state import (
    APPEND,
    SEQUENCE_MAX,
    BatchHeader,
    ProducerStateTable,
    VerdictKind,
    duplicate,
    last_sequence,
)


def check_and_record(table, producer_id, producer_epoch, base_sequence, last_sequence, first_offset, last_offset):
    """check, then record if APPEND: what the broker does around its append."""
    verdict = table.check(producer_id, producer_epoch, base_sequence, last_sequence)
    if verdict.is_append:
        table.record(producer_id, producer_epoch, base_sequence, last_sequence, first_offset, last_offset)
    return verdict

PID = 1000


def test_non_idempotent_always_appends():
    table = ProducerStateTable()
    for _ in range(3):
        assert check_and_record(table, -1, -1, -1, -1, 0, 0) == APPEND
    assert len(table) == 0


def test_in_order_batches_append():
    table = ProducerStateTable()
    assert check_and_record(table, PID, 0, 0, 9, 0, 9) == APPEND
    assert check_and_record(table, PID, 0, 10, 19, 10, 19) == APPEND


def test_retry_of_recent_batch_is_duplicate_with_original_offsets():
    table = ProducerStateTable()
    check_and_record(table, PID, 0, 0, 4, 100, 104)
    check_and_record(table, PID, 0, 5, 9, 105, 109)
    assert table.check(PID, 0, 0, 4) == duplicate(100, 104)
    assert table.check(PID, 0, 5, 9) == duplicate(105, 109)


def test_only_last_five_batches_are_remembered():
    table = ProducerStateTable()
    for i in range(6):
        check_and_record(table, PID, 0, i, i, 10 + i, 10 + i)
    assert table.check(PID, 0, 0, 0).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert table.check(PID, 0, 1, 1) == duplicate(11, 11)


def test_gap_is_out_of_order():
    table = ProducerStateTable()
    check_and_record(table, PID, 0, 0, 4, 0, 4)
    verdict = table.check(PID, 0, 6, 8)
    assert verdict.kind is VerdictKind.ERROR
    assert verdict.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_older_epoch_is_fenced():
    table = ProducerStateTable()
    check_and_record(table, PID, 3, 0, 0, 0, 0)
    assert table.check(PID, 2, 1, 1).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_replicated_data_at_an_older_epoch_replaces_the_entry():
    """The leader forgot the producer (its last batch went below the log start) and then
    took a zombie's batch at an older epoch; a follower whose own log start has not followed
    yet still holds the newer epoch. Recording what the log holds never fails (it ended the
    broker through an assertion): the older epoch replaces the entry, as on the leader."""
    table = ProducerStateTable()
    check_and_record(table, PID, 1, 0, 4, 0, 4)
    table.record(PID, 0, 0, 0, 9, 9)
    assert table.check(PID, 0, 1, 1) == APPEND
    assert table.check(PID, 0, 0, 0) == duplicate(9, 9)


def test_new_epoch_must_start_at_zero():
    table = ProducerStateTable()
    check_and_record(table, PID, 0, 0, 4, 0, 4)
    assert table.check(PID, 1, 5, 5).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert check_and_record(table, PID, 1, 0, 0, 5, 5) == APPEND
    # the old epoch's batches are forgotten with it
    assert table.check(PID, 1, 0, 0) == duplicate(5, 5)
    assert table.check(PID, 0, 0, 4).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_unknown_producer_accepted_at_any_sequence():
    table = ProducerStateTable()
    assert table.check(PID, 0, 42, 43) == APPEND


def test_sequence_wraps_at_int32_max():
    table = ProducerStateTable()
    check_and_record(table, PID, 0, SEQUENCE_MAX - 1, SEQUENCE_MAX, 0, 1)
    assert table.check(PID, 0, 0, 2) == APPEND
    assert last_sequence(SEQUENCE_MAX - 1, 4) == 1
    assert last_sequence(0, 3) == 2


def test_split_check_then_record_and_rebuild():
    table = ProducerStateTable()
    assert table.check(PID, 0, 0, 2) == APPEND
    table.record(PID, 0, 0, 2, 7, 9)
    headers = [
        BatchHeader(PID, 0, 0, 2, 7, 9),
        BatchHeader(-1, -1, -1, -1, 10, 10),
        BatchHeader(PID, 0, 3, 3, 11, 11),
    ]
    rebuilt = ProducerStateTable.rebuild(headers)
    assert rebuilt.check(PID, 0, 3, 3) == duplicate(11, 11)
    assert rebuilt.check(PID, 0, 4, 4) == APPEND


def test_invalid_sequence_input():
    table = ProducerStateTable()
    assert table.check(PID, 0, -5, 0).error == ErrorCode.INVALID_REQUEST
