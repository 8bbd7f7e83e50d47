"""Partition log properties: random append / roll / truncate / retention / restart
sequences keep offsets contiguous and reads equal to what was appended."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.log import records
from kafkalite.log.config import LogConfig
from kafkalite.log.errors import InvalidRecordError, OffsetMismatchError, OffsetOutOfRangeError
from kafkalite.log.log import Log
from kafkalite.log.records import (
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    LOG_OVERHEAD,
    Record,
    decode_records,
    encode_batch,
    validate_batches,
)

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=150, roll_ms=1000, retention_ms=-1)


def read_all(log: Log, start: int, max_bytes: int = 300) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch from `start` to the LEO via repeated reads."""
    out = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes)
        assert data, f"empty read at {offset} below LEO {log.log_end_offset}"
        for pos, header in validate_batches(data, from_client=False):
            out.append((header.base_offset, data[pos : pos + header.size_bytes]))
            offset = header.last_offset + 1
    return out


class Model:
    def __init__(self):
        self.batches: list[tuple[int, int, bytes]] = []  # (base, last, bytes)
        self.start = 0
        self.leo = 0

    def check(self, log: Log) -> None:
        assert log.log_end_offset == self.leo
        assert log.log_start_offset == self.start
        expected = [(b, data) for b, _, data in self.batches if b >= self.start]
        assert read_all(log, self.start) == expected
        # contiguous offsets
        kept = [(base, last) for base, last, _ in self.batches if base >= self.start]
        for (_, last), (base, _) in zip(kept, kept[1:]):
            assert base == last + 1
        check_locate(log, self.start, self.leo)


def scanned(segment) -> list[tuple[int, int, int, int]]:
    """(last offset, position, base offset, size) of every batch, read from the file."""
    return [(f[H_BASE_OFFSET] + f[H_LAST_OFFSET_DELTA], pos, f[H_BASE_OFFSET], f[H_BATCH_LENGTH] + LOG_OVERHEAD)
            for pos, f in segment.iter_headers(0)]


def check_locate(log: Log, start: int, leo: int) -> None:
    """A segment's remembered tail (LogSegment.locate) names the batch a header scan finds
    for every offset, and bytes_available counts the bytes a read returns."""
    for segment in log.segments:
        batches = scanned(segment)
        for offset in range(segment.base_offset, leo + 2):
            expected = next(((pos, base, size) for last, pos, base, size in batches if last >= offset), None)
            assert segment.locate(offset) == expected, (segment.base_offset, offset)
    for offset in range(start, leo):
        for end in (offset + 1, offset + 3, leo):
            got = log.bytes_available(offset, end)
            assert got == sum(size for seg in log.segments for last, _, base, size in scanned(seg)
                              if last >= offset and base < end), (offset, end)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3), st.integers(1, 5)),
        st.tuples(st.just("roll"), st.just(0), st.just(0)),
        st.tuples(st.just("truncate"), st.integers(0, 100), st.just(0)),
        st.tuples(st.just("retention"), st.integers(0, 2000), st.just(0)),
        st.tuples(st.just("restart"), st.booleans(), st.just(0)),
        st.tuples(st.just("epoch"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_random_operations_keep_offsets_contiguous_and_reads_equal_appends(operations):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prop-topic-0")
        log = Log.open(path, CONFIG, now_ms=0)
        model = Model()
        now_ms = 0
        epoch = 0
        counter = 0
        for op, a, b in operations:
            now_ms += 10
            if op == "append":
                payload = b"".join(
                    encode_batch([(None, b"v%d" % (counter + i), ())] * a, base_timestamp=now_ms)
                    for i in range(b)
                )
                counter += b
                result = log.append_as_leader(payload, epoch, now_ms)
                assert result.first_offset == model.leo
                assert result.record_count == a * b
                pos = 0
                stored = read_all(log, result.first_offset)
                for base, data in stored:
                    model.batches.append((base, base + a - 1, data))
                    pos += len(data)
                assert pos == len(payload)
                model.leo = result.last_offset + 1
            elif op == "roll":
                now_ms += CONFIG.roll_ms
                log.maybe_roll(now_ms)
            elif op == "truncate":
                target = model.start + a % (model.leo - model.start + 1)
                log.truncate_to(target)
                if target < model.leo:
                    model.batches = [x for x in model.batches if x[1] < target]
                    live = [x for x in model.batches if x[0] >= model.start]
                    model.leo = live[-1][1] + 1 if live else model.start
            elif op == "retention":
                log.config = LogConfig(**{**CONFIG.__dict__, "retention_bytes": a})
                log.delete_retained_segments(now_ms)
                log.config = CONFIG
                model.start = log.log_start_offset
                assert all(s.base_offset <= model.leo for s in log.segments)
            elif op == "restart":
                recovery_point = log.recovery_point
                if a:
                    log.flush()
                log.close()
                log = Log.open(path, CONFIG, recovery_point=recovery_point,
                               clean_shutdown=a, now_ms=now_ms)
            elif op == "epoch":
                epoch += 1
            model.check(log)
            entries = log.leader_epoch_cache.epoch_entries()
            assert all(start <= model.leo for _, start in entries)
        log.close()


def test_read_semantics_min_one_max_offset_and_range(tmp_path):
    log = Log.open(str(tmp_path / "r-0"), LogConfig(index_interval_bytes=0), now_ms=0)
    big = encode_batch([(None, b"x" * 1000, ())] * 3, base_timestamp=1)
    small = encode_batch([(None, b"y", ())], base_timestamp=2)
    log.append_as_leader(big, 0, 1)  # offsets 0-2
    log.append_as_leader(small, 0, 2)  # offset 3
    log.append_as_leader(small, 0, 3)  # offset 4
    assert len(log.read(1, 10)) == len(big)  # min_one: the whole batch holding offset 1
    assert log.read(1, 10, min_one=False) == b""
    assert [h.base_offset for _, h in validate_batches(log.read(0, 10_000), from_client=False)] == [0, 3, 4]
    assert [h.base_offset for _, h in validate_batches(log.read(0, 10_000, max_offset=4), from_client=False)] == [0, 3]
    assert log.read(3, 10_000, max_offset=3) == b""
    assert log.read(5, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 100)
    log.close()


def test_truncate_inside_a_batch_drops_the_whole_batch(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), CONFIG, now_ms=0)
    log.append_as_leader(encode_batch([(None, b"a", ())] * 3, base_timestamp=1), 0, 1)
    log.append_as_leader(encode_batch([(None, b"b", ())] * 3, base_timestamp=1), 1, 1)
    assert log.leader_epoch_cache.epoch_entries() == [(0, 0), (1, 3)]
    log.truncate_to(4)
    assert log.log_end_offset == 3
    assert log.leader_epoch_cache.epoch_entries() == [(0, 0)]
    log.close()


def test_truncate_to_the_leo_drops_an_epoch_led_without_data(tmp_path):
    """Issue 7: an epoch this replica led without appending starts at the LEO; the next
    leader never heard of it, so truncating to the LEO must drop it (as Kafka does)."""
    log = Log.open(str(tmp_path / "t-0"), CONFIG, now_ms=0)
    log.append_as_leader(encode_batch([(None, b"a", ())] * 3, base_timestamp=1), 0, 1)
    log.leader_epoch_cache.assign(1, log.log_end_offset)  # became leader at epoch 1, appended nothing
    assert log.truncate_to(3) is False
    assert log.log_end_offset == 3
    assert log.leader_epoch_cache.epoch_entries() == [(0, 0)]
    log.close()


def test_follower_append_keeps_offsets_and_learns_epochs(tmp_path):
    log = Log.open(str(tmp_path / "f-0"), CONFIG, now_ms=0)
    batch = encode_batch([(None, b"a", ())] * 2, base_offset=0, partition_leader_epoch=3, base_timestamp=1)
    later = encode_batch([(None, b"b", ())], base_offset=2, partition_leader_epoch=5, base_timestamp=1)
    result = log.append_as_follower(batch + later)
    assert (result.first_offset, result.last_offset) == (0, 2)
    assert log.read(0, 10_000) == batch + later  # byte-identical
    assert log.leader_epoch_cache.epoch_entries() == [(3, 0), (5, 2)]
    with pytest.raises(OffsetMismatchError):  # offsets never go backwards
        log.append_as_follower(encode_batch([(None, b"c", ())], base_offset=2, base_timestamp=1))
    assert log.log_end_offset == 3
    log.close()


def test_follower_append_accepts_offset_gaps_of_a_compacted_leader(tmp_path):
    """A compacted leader serves batches with offsets missing before, between and inside
    them (the cleaner keeps base offsets and last offset deltas); the follower keeps them
    unchanged, and reads step over the gaps."""
    log = Log.open(str(tmp_path / "g-0"), CONFIG, now_ms=0)
    first = encode_batch([Record(4, 1, b"k", b"a"), Record(6, 1, b"j", b"b")], base_offset=3, base_timestamp=1)
    later = encode_batch([(b"k", b"c", ())], base_offset=10, base_timestamp=1)
    result = log.append_as_follower(first + later)
    assert (result.first_offset, result.last_offset, log.log_end_offset) == (3, 10, 11)
    assert log.read(0, 10_000) == first + later
    assert log.read(7, 10_000) == later  # an offset in a gap reads from the next batch
    with pytest.raises(OffsetMismatchError):
        log.append_as_follower(encode_batch([(b"k", b"d", ())], base_offset=10, base_timestamp=1))
    log.close()


def _with_delete_horizon(batch: bytes) -> bytes:
    buf = bytearray(batch)
    buf[21:23] = (int.from_bytes(buf[21:23], "big") | records.DELETE_HORIZON_MASK).to_bytes(2, "big")
    buf[17:21] = records._crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return bytes(buf)


def test_a_delete_horizon_is_refused_from_a_producer_and_kept_from_a_leader(tmp_path):
    """Attribute bit 6 (KIP-534) is set by the cleaner only: a producer's would let the
    cleaner drop its tombstones at once. A follower copies a cleaned leader's batches."""
    log = Log.open(str(tmp_path / "h-0"), CONFIG, now_ms=0)
    stamped = _with_delete_horizon(encode_batch([(b"k", None, ())], base_timestamp=1))
    plain = encode_batch([(b"j", b"v", ())], base_timestamp=1)
    for buffer in (stamped, plain + stamped):  # the one-batch fast path, and the general one
        with pytest.raises(InvalidRecordError, match="delete horizon"):
            log.append_as_leader(buffer, 0, 1)
    assert log.log_end_offset == 0
    log.append_as_follower(stamped)
    assert log.read(0, 10_000) == stamped
    log.close()


def test_offset_for_timestamp(tmp_path):
    log = Log.open(str(tmp_path / "ts-0"), CONFIG, now_ms=0)
    for i in range(20):
        log.append_as_leader(encode_batch([(None, b"v", ())] * 2, timestamps=[100 * i, 100 * i + 50]), 0, 0)
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(510) == (11, 550)
    assert log.offset_for_timestamp(600) == (12, 600)
    assert log.offset_for_timestamp(10_000) is None
    log.close()


def test_retention_by_time_never_deletes_active_segment(tmp_path):
    config = LogConfig(segment_bytes=300, retention_ms=1000)
    log = Log.open(str(tmp_path / "ret-0"), config, now_ms=0)
    for i in range(10):
        log.append_as_leader(encode_batch([(None, b"x" * 50, ())], base_timestamp=i), 0, i)
    segments = len(log.segments)
    assert segments > 2
    assert log.delete_retained_segments(now_ms=500) == 0
    assert log.delete_retained_segments(now_ms=10_000) == segments - 1
    assert log.log_start_offset == log.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log.close()


def test_flush_policy(tmp_path):
    config = LogConfig(flush_interval_messages=3, flush_interval_ms=1000)
    log = Log.open(str(tmp_path / "fl-0"), config, now_ms=0)
    assert not log.needs_flush(0)
    log.append_as_leader(encode_batch([(None, b"x", ())] * 2, base_timestamp=1), 0, 1)
    assert not log.needs_flush(1)
    assert log.needs_flush(1000)
    log.append_as_leader(encode_batch([(None, b"x", ())], base_timestamp=1), 0, 2)
    assert log.needs_flush(2)
    log.flush(now_ms=2)
    assert not log.needs_flush(3)
    assert log.recovery_point == log.log_end_offset
    log.close()


def test_truncate_fully_and_start_at(tmp_path):
    log = Log.open(str(tmp_path / "full-0"), CONFIG, now_ms=0)
    log.append_as_leader(encode_batch([(None, b"x", ())] * 5, base_timestamp=1), 2, 1)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.leader_epoch_cache.epoch_entries() == []
    result = log.append_as_leader(encode_batch([(None, b"y", ())], base_timestamp=1), 3, 1)
    assert result.first_offset == 100
    log.close()
    reopened = Log.open(str(tmp_path / "full-0"), CONFIG, now_ms=0)
    assert [r.offset for r in decode_records(reopened.read(100, 1000))] == [100]
    reopened.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=25), st.data())
def test_bytes_available_is_what_reads_below_the_end_return(sizes, data):
    """A delayed fetch counts Log.bytes_available against min_bytes: it must equal the bytes
    of the whole batches repeated reads from `offset` below `end` return, across segments."""
    with tempfile.TemporaryDirectory() as d:
        log = Log.open(os.path.join(d, "b-0"), CONFIG, now_ms=0)
        for i, n in enumerate(sizes):
            log.append_as_leader(encode_batch([(None, b"v" * (i % 7 + 1), ())] * n, base_timestamp=i), 0, i)
        leo = log.log_end_offset
        offset = data.draw(st.integers(min_value=0, max_value=leo))
        end = data.draw(st.integers(min_value=0, max_value=leo))
        expected = 0
        at = offset
        while at < end:
            chunk = log.read(at, 10_000, max_offset=end)
            if not chunk:
                break
            expected += len(chunk)
            at = [h for _, h in validate_batches(chunk, from_client=False)][-1].last_offset + 1
        assert log.bytes_available(offset, end) == expected
        log.close()


def test_a_read_goes_on_past_segments_that_hold_only_empty_batches(tmp_path):
    """Compaction leaves segments holding only an empty batch (records gone, producer state
    kept) until its next pass merges them. librdkafka gives up after about ten fetch answers
    without a record (it doubles its fetch size up to 1 GiB, then MSG_SIZE_TOO_LARGE), so a
    read goes on into the next segments until it holds a record, within max_bytes and below
    max_offset."""
    from kafkalite.log.batch_filter import empty_batch
    from kafkalite.log.records import check_batch_at

    log = Log.open(str(tmp_path / "e-0"), LogConfig(segment_bytes=100), now_ms=0)  # a 61-byte batch per segment
    for i in range(12):  # offsets 10i..10i+9, one segment each, records all gone
        batch = bytearray(encode_batch([(b"k", b"v", ())] * 10, base_timestamp=1))
        records.set_base_offset(batch, 0, 10 * i)
        log.append_as_follower(empty_batch(check_batch_at(bytes(batch), 0)))
    tail = bytearray(encode_batch([(b"k", b"latest", ())], base_timestamp=1))
    records.set_base_offset(tail, 0, 120)
    log.append_as_follower(bytes(tail))
    assert len(log.segments) >= 12

    def batches(data: bytes) -> list[tuple[int, int]]:
        return [(h.base_offset, h.record_count) for _, h in validate_batches(data, from_client=False)]

    assert batches(log.read(0, 1 << 20)) == [(10 * i, 0) for i in range(12)] + [(120, 1)]
    assert batches(log.read(55, 1 << 20)) == [(10 * i, 0) for i in range(5, 12)] + [(120, 1)]
    assert batches(log.read(0, 1 << 20, max_offset=30)) == [(0, 0), (10, 0), (20, 0)]  # never at or past the HW
    assert batches(log.read(0, 61 * 2)) == [(0, 0), (10, 0)]  # nor past max_bytes (min_one for the first only)
    log.close()
