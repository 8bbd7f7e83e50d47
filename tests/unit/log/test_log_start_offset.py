"""The log start moved by DeleteRecords: inside a segment, the segments wholly below it
deleted through retention's path, reads and timestamp lookups never below it, the epoch
cache and the cleaner's first dirty offset following it, retention bounded by the HW, and
log-start-offset-checkpoint carrying it across a restart."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.log import checkpoint
from kafkalite.log.config import LogConfig
from kafkalite.log.errors import OffsetOutOfRangeError
from kafkalite.log.log import Log
from kafkalite.log.log_manager import LogManager
from kafkalite.log.records import encode_batch, validate_batches

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)
RECORDS_PER_BATCH = 5


def build(path: str, batches: int = 40, epoch_every: int = 10) -> Log:
    """`batches` batches of 5 records (offsets 5i..5i+4, timestamp i), a new leader epoch
    every `epoch_every` batches, over many small segments."""
    log = Log.open(path, CONFIG, now_ms=0)
    for i in range(batches):
        log.append_as_leader(encode_batch([(None, b"x" * 20, ())] * RECORDS_PER_BATCH, base_timestamp=i), i // epoch_every, i)
    assert len(log.segments) > 5
    return log


def first_offset_read(log: Log, offset: int) -> int:
    data = log.read(offset, 10_000)
    [(_, header), *_] = validate_batches(data, from_client=False)
    return header.base_offset


def test_log_start_inside_a_segment_deletes_only_the_segments_wholly_below_it(tmp_path):
    log = build(str(tmp_path / "t-0"))
    bases = [s.base_offset for s in log.segments]
    target = bases[3] + 7  # inside the fourth segment
    assert log.maybe_increment_log_start_offset(target)
    assert log.log_start_offset == target
    assert [s.base_offset for s in log.segments] == bases[3:]
    assert sorted(n for n in os.listdir(log.dir) if n.endswith(".log")) == [f"{b:020d}.log" for b in bases[3:]]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 1000)
    assert first_offset_read(log, target) <= target  # the batch holding it, as Kafka serves it
    assert not log.maybe_increment_log_start_offset(target)  # never backwards, nothing new
    assert not log.maybe_increment_log_start_offset(5)
    assert log.first_dirty_offset >= target
    assert log.recovery_point >= target
    log.close()


def test_epoch_cache_starts_at_the_log_start(tmp_path):
    log = build(str(tmp_path / "t-0"))
    assert log.leader_epoch_cache.epoch_entries()[:2] == [(0, 0), (1, 50)]
    log.maybe_increment_log_start_offset(73)
    assert log.leader_epoch_cache.epoch_entries()[:2] == [(1, 73), (2, 100)]
    log.close()


def test_log_start_at_the_end_keeps_the_active_segment(tmp_path):
    log = build(str(tmp_path / "t-0"))
    leo = log.log_end_offset
    assert log.maybe_increment_log_start_offset(leo)
    assert len(log.segments) == 1
    assert log.read(leo, 1000) == b""
    with pytest.raises(AssertionError):
        log.maybe_increment_log_start_offset(leo + 1)  # the caller bounds it by the HW
    log.close()


def test_timestamp_lookup_never_answers_below_the_log_start(tmp_path):
    log = build(str(tmp_path / "t-0"))
    log.maybe_increment_log_start_offset(52)  # inside batch 10 (offsets 50..54, timestamp 10)
    assert log.offset_for_timestamp(0) == (52, 10)
    assert log.offset_for_timestamp(12) == (60, 12)
    log.close()


def test_timestamp_lookup_skips_a_batch_whose_qualifying_records_are_below_the_log_start(tmp_path):
    """Batch 0-4 has timestamps [100, 1, 1, 1, 1]: its max timestamp (100) is record 0's.
    After DeleteRecords(2) no record of it at or above the log start has a timestamp >= 50,
    and the answer is the next batch's first record (Kafka's LogSegment.findOffsetByTimestamp),
    not (2, 100): a consumer seeking by time read records older than it asked for."""
    log = Log.open(str(tmp_path / "t-0"), CONFIG, now_ms=0)
    log.append_as_leader(encode_batch([(None, b"a", ())] * 5, timestamps=[100, 1, 1, 1, 1]), 0, 0)
    log.append_as_leader(encode_batch([(None, b"b", ())] * 5, timestamps=[200, 201, 202, 203, 204]), 0, 0)
    assert log.offset_for_timestamp(50) == (0, 100)
    log.maybe_increment_log_start_offset(2)
    assert log.offset_for_timestamp(50) == (5, 200)
    assert log.offset_for_timestamp(205) is None
    log.close()


def test_truncating_into_the_batch_holding_the_log_start_restarts_the_log_there(tmp_path):
    log = build(str(tmp_path / "t-0"))
    log.maybe_increment_log_start_offset(52)
    log.truncate_to(200)
    assert log.log_end_offset == 200
    log.truncate_to(53)  # the whole batch 50..54 goes, and it started below the log start
    assert (log.log_start_offset, log.log_end_offset) == (52, 52)
    log.close()


def test_retention_never_deletes_a_segment_holding_offsets_at_or_above_the_hw(tmp_path):
    log = build(str(tmp_path / "t-0"))
    log.config = LogConfig(**{**CONFIG.__dict__, "retention_bytes": 0})
    hw = log.segments[2].base_offset + 1
    assert log.delete_retained_segments(now_ms=100, upper_offset=hw) == 2
    assert log.log_start_offset == log.segments[0].base_offset < hw
    remaining = len(log.segments)
    assert log.delete_retained_segments(now_ms=100) == remaining - 1  # unbounded: all but the active one
    log.close()


def test_log_start_survives_a_restart_through_its_checkpoint(tmp_path):
    log_dir = str(tmp_path / "dir")
    manager = LogManager([log_dir], CONFIG)
    manager.open_all(now_ms=0)
    log = manager.get_or_create("t", 0, now_ms=0)
    for i in range(40):
        log.append_as_leader(encode_batch([(None, b"x" * 20, ())] * RECORDS_PER_BATCH, base_timestamp=i), 0, i)
    other = manager.get_or_create("u", 0, now_ms=0)
    other.append_as_leader(encode_batch([(None, b"u", ())]), 0, 0)
    target = log.segments[2].base_offset + 3
    log.maybe_increment_log_start_offset(target)
    assert manager.log_start_offsets() == {("t", 0): target}  # a log starting at its first segment needs no entry
    manager.close()
    assert checkpoint.read_offsets(os.path.join(log_dir, checkpoint.LOG_START_OFFSET_CHECKPOINT)) == {("t", 0): target}
    reopened = LogManager([log_dir], CONFIG)
    reopened.open_all(now_ms=0)
    assert reopened.get("t", 0).log_start_offset == target
    assert reopened.get("u", 0).log_start_offset == other.log_start_offset == 0
    reopened.close()


def test_a_checkpointed_log_start_past_a_lost_tail_is_clamped_to_the_end(tmp_path):
    log_dir = str(tmp_path / "dir")
    manager = LogManager([log_dir], CONFIG)
    manager.open_all(now_ms=0)
    log = manager.get_or_create("t", 0, now_ms=0)
    for i in range(10):
        log.append_as_leader(encode_batch([(None, b"x" * 20, ())] * RECORDS_PER_BATCH, base_timestamp=i), 0, i)
    manager.close()
    checkpoint.write_offsets(os.path.join(log_dir, checkpoint.LOG_START_OFFSET_CHECKPOINT), {("t", 0): 10_000})
    reopened = LogManager([log_dir], CONFIG)
    reopened.open_all(now_ms=0)
    assert reopened.get("t", 0).log_start_offset == reopened.get("t", 0).log_end_offset == 50
    reopened.close()


# ------------------------------------------------------------------ property

def read_from(log: Log, start: int) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch from the one holding `start` to the LEO."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, 300)
        assert data
        for pos, header in validate_batches(data, from_client=False):
            out.append((header.base_offset, data[pos : pos + header.size_bytes]))
            offset = header.last_offset + 1
    return out


delete_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("delete_records"), st.integers(0, 1000)),
        st.tuples(st.just("retention"), st.integers(0, 3000)),
        st.tuples(st.just("truncate"), st.integers(0, 1000)),
        st.tuples(st.just("restart"), st.just(0)),
        st.tuples(st.just("epoch"), st.just(0)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=50, deadline=None)
@given(delete_ops)
def test_random_deletes_appends_retention_truncations_and_restarts_against_a_model(operations):
    """The log start only moves up (but for a truncation below it), reads from it return
    exactly the appended batches from the one holding it, only the first segment reaches
    below it, the epoch cache starts at or after it, and a restart keeps it."""
    with tempfile.TemporaryDirectory() as tmp:
        manager = LogManager([tmp], CONFIG)
        manager.open_all(now_ms=0)
        log = manager.get_or_create("p", 0, now_ms=0)
        batches: list[tuple[int, int, bytes]] = []  # (base, last, bytes)
        start = leo = epoch = 0
        for now_ms, (op, a) in enumerate(operations, start=1):
            if op == "append":
                result = log.append_as_leader(encode_batch([(None, b"r" * 30, ())] * a, base_timestamp=now_ms), epoch, now_ms)
                [(base, data)] = read_from(log, result.first_offset)
                batches.append((base, result.last_offset, data))
                leo = result.last_offset + 1
            elif op == "delete_records":
                target = start + a % (leo - start + 1)
                assert log.maybe_increment_log_start_offset(target) == (target > start)
                start = max(start, target)
            elif op == "retention":
                log.config = LogConfig(**{**CONFIG.__dict__, "retention_bytes": a})
                log.delete_retained_segments(now_ms, upper_offset=leo)
                log.config = CONFIG
                assert log.log_start_offset >= start
                start = log.log_start_offset
            elif op == "truncate":
                target = start + a % (leo - start + 1)
                if target < leo:
                    log.truncate_to(target)
                    batches = [x for x in batches if x[1] < target]
                    live = [x for x in batches if x[1] >= start]
                    leo = live[-1][1] + 1 if live else start
            elif op == "restart":
                manager.close()
                manager = LogManager([tmp], CONFIG)
                manager.open_all(now_ms=now_ms)
                # A log never appended to has no directory to reopen: the broker makes it
                # again from the next LeaderAndIsr.
                log = manager.get("p", 0) or manager.get_or_create("p", 0, now_ms=now_ms)
            else:
                epoch += 1
            assert (log.log_start_offset, log.log_end_offset) == (start, leo)
            assert read_from(log, start) == [(b, data) for b, last, data in batches if last >= start]
            bases = [s.base_offset for s in log.segments]
            assert bases[0] <= start
            # (A segment rolled at the log start, after a DeleteRecords up to the LEO, starts at
            # it: the first then lies wholly below it until retention deletes it, as in Kafka.)
            assert all(b >= start for b in bases[1:])
            assert all(offset >= start for _, offset in log.leader_epoch_cache.epoch_entries())
        manager.close()
