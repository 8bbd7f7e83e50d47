"""The log cleaner's file work (Kafka's LogCleaner.Cleaner): one cleaning pass over one log.

`clean(job)` reads the segments named in the job (by path, never the live LogSegment
objects, so it can run in another process), builds the offset map of the dirty section,
and writes each group of segments as one `.cleaned` segment, fsynced, holding the records
`kafkalite.log.cleaner_decisions` keeps. It changes nothing else: the swap happens later on
the event-loop thread (Log.swap_in_cleaned, kafkalite.log.segment_swap), which first
checks that the log still holds the segments the job read.

What a pass keeps:
- per key, the latest record among the cleaned segments and those mapped; offsets never
  change, so offsets are missing where records went (consumers and followers step over);
- every batch keeps its base offset and last offset delta; the last batch of each producer
  id stays, as an empty header if its records went, so the producer's epoch and last
  sequence survive for a new leader rebuilding producer state from headers (Kafka keeps
  the last batch of each active producer the same way);
- the last batch of each written segment stays too (as an empty header if need be), so a
  cleaned segment ends at the offset where the segments it replaces ended, and the log's
  segments stay contiguous in offsets (Log.open's check for a lost segment tail holds);
- tombstones stay until their batch's delete horizon passes; a horizon is set only on a
  batch wholly below the offset the pass cleans through, and nothing at or past that
  offset is dropped (the older values of its key may not be gone yet).

Bounded: the offset map holds `map_entries_max` keys; a dirty section with more stops
the map there, the pass cleans up to that offset and the next pass goes on from it. Reads
and writes go through `io(bytes)`, which the caller rate-limits
(log.cleaner.io.max.bytes.per.second) and uses to stop a worker whose broker died.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kafkalite.log import batch_filter, cleaner_decisions, segment_swap
from kafkalite.log.cleaner_decisions import BatchAction, Fate, PassKind, SegmentInfo
from kafkalite.log.config import LogConfig
from kafkalite.log.errors import CorruptRecordError
from kafkalite.log.offset_map import OffsetMap
from kafkalite.log.records import (
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    CRC_START,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_SEQUENCE,
    H_BATCH_LENGTH,
    H_CRC,
    H_LAST_OFFSET_DELTA,
    H_MAX_TIMESTAMP,
    H_PRODUCER_ID,
    H_RECORD_COUNT,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    _crc32c,
)
from kafkalite.log.segment import LogSegment, SegmentState

READ_CHUNK_BYTES = 1 << 20
WRITE_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class SegmentFile:
    """A segment the job reads: its file and how much of it (segments below the active
    one never grow)."""

    path: str
    info: SegmentInfo


@dataclass(frozen=True)
class CleanJob:
    """One pass over one log; picklable, so a worker process can run it."""

    dir: str
    segments: tuple[SegmentFile, ...]  # the cleanable segments, from the log start, in order
    first_dirty_offset: int
    kind: PassKind
    now_ms: int
    segment_bytes: int
    index_interval_bytes: int
    max_index_entries: int
    delete_retention_ms: int
    map_entries_max: int

    def __post_init__(self) -> None:
        assert self.segments
        assert self.map_entries_max >= 1
        for earlier, later in zip(self.segments, self.segments[1:]):
            assert earlier.info.next_offset == later.info.base_offset, "cleanable segments are contiguous"


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    records_superseded: int = 0
    tombstones_removed: int = 0
    batches_emptied: int = 0
    batches_dropped: int = 0
    map_entries: int = 0
    segments_replaced: int = 0
    segments_written: int = 0


@dataclass
class CleanResult:
    cleaned: list[tuple[SegmentState, tuple[int, ...]]]  # each written segment and the base offsets it replaces
    first_dirty_offset: int  # where the next pass starts mapping
    earliest_delete_horizon_ms: int | None  # of the tombstones kept below first_dirty_offset
    stats: CleanerStats = field(default_factory=CleanerStats)


def _no_io(_n: int) -> None:
    pass


def read_batches(path: str, size: int, io: Callable[[int], None] = _no_io) -> Iterator[tuple[tuple, bytes]]:
    """(header fields, batch bytes) of every batch in the first `size` bytes of a segment
    file, read in large chunks. Framing and CRC are checked: a batch the cleaner rewrites
    gets a new CRC, so a bit flipped on disk must stop the pass (CorruptRecordError), not
    be sealed into a valid-looking batch."""
    fd = os.open(path, os.O_RDONLY)
    try:
        position = 0
        chunk = b""
        chunk_start = 0
        while position < size:
            local = position - chunk_start
            if len(chunk) - local < BATCH_HEADER_SIZE:
                chunk = os.pread(fd, min(READ_CHUNK_BYTES, size - position), position)
                io(len(chunk))
                chunk_start, local = position, 0
            if len(chunk) - local < BATCH_HEADER_SIZE:
                raise CorruptRecordError(f"{path}: torn batch header at {position}")
            fields = HEADER_STRUCT.unpack_from(chunk, local)
            batch_size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
            if fields[H_BATCH_LENGTH] < BATCH_HEADER_SIZE - LOG_OVERHEAD or position + batch_size > size:
                raise CorruptRecordError(f"{path}: torn batch at {position}")
            if local + batch_size > len(chunk):
                chunk = os.pread(fd, min(max(READ_CHUNK_BYTES, batch_size), size - position), position)
                io(len(chunk))
                chunk_start, local = position, 0
            batch = chunk[local : local + batch_size]
            if _crc32c(batch[CRC_START:]) != fields[H_CRC]:
                raise CorruptRecordError(f"{path}: batch at {position} (base offset {fields[H_BASE_OFFSET]}) fails its CRC-32C check")
            yield fields, batch
            position += batch_size
    finally:
        os.close(fd)


def _producer_last_batches(job: CleanJob, io: Callable[[int], None]) -> dict[int, int]:
    """Producer id -> last offset of its last batch in the job's segments (headers only)."""
    last: dict[int, int] = {}
    for segment in job.segments:
        fd = os.open(segment.path, os.O_RDONLY)
        try:
            position = 0
            while position < segment.info.size_bytes:
                fields = HEADER_STRUCT.unpack(os.pread(fd, BATCH_HEADER_SIZE, position))
                io(BATCH_HEADER_SIZE)
                if fields[H_PRODUCER_ID] >= 0 and fields[H_BASE_SEQUENCE] >= 0:
                    last[fields[H_PRODUCER_ID]] = fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA]
                position += fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        finally:
            os.close(fd)
    return last


def _record_spans(fields: tuple, data: bytes) -> list[batch_filter.RecordSpan]:
    """The records of a batch in the log, their offsets checked: the map is filled in
    offset order and fates compare offsets, so records out of order (a client's batch
    with offset deltas like 0, 0, 2, appended before Produce refused them) stop the pass as
    bad data (the log is marked uncleanable) instead of failing OffsetMap.put's assertion."""
    spans = batch_filter.record_spans(data, fields[H_RECORD_COUNT])
    if not batch_filter.offset_deltas_in_order(spans, fields[H_LAST_OFFSET_DELTA]):
        raise CorruptRecordError(f"batch at offset {fields[H_BASE_OFFSET]}: its {len(spans)} records' offset deltas do not"
                                 f" increase strictly up to its last offset delta {fields[H_LAST_OFFSET_DELTA]}")
    return spans


def build_offset_map(job: CleanJob, offset_map: OffsetMap, stats: CleanerStats, io: Callable[[int], None]) -> int:
    """Map the dirty section's keys to their latest offsets; returns the offset where the
    map ends (the end of the cleanable segments, or the first record a full map refused)."""
    end = job.segments[-1].info.next_offset
    for segment in job.segments:
        if segment.info.next_offset <= job.first_dirty_offset:
            continue
        for fields, batch in read_batches(segment.path, segment.info.size_bytes, io):
            base = fields[H_BASE_OFFSET]
            if base + fields[H_LAST_OFFSET_DELTA] < job.first_dirty_offset or fields[H_ATTRIBUTES] & CONTROL_MASK:
                continue
            for span in _record_spans(fields, batch_filter.record_data(batch)):
                offset = base + span.offset_delta
                if offset < job.first_dirty_offset or span.key is None:
                    continue
                if not offset_map.put(span.key, offset):
                    stats.map_entries = len(offset_map)
                    return offset
    stats.map_entries = len(offset_map)
    return end


class _SegmentWriter:
    """One `.cleaned` segment being written: batches buffered and appended in large
    writes through LogSegment (which keeps both indexes as for a live segment)."""

    def __init__(self, job: CleanJob, base_offset: int, io: Callable[[int], None]) -> None:
        config = LogConfig(segment_bytes=max(job.segment_bytes, 75), index_interval_bytes=job.index_interval_bytes,
                           max_index_entries=job.max_index_entries)
        self.segment = LogSegment.create(job.dir, base_offset, config, job.now_ms, file_suffix=segment_swap.CLEANED_SUFFIX)
        self.io = io
        self.pieces: list[bytes] = []
        self.metas: list[tuple[int, int, int, int]] = []
        self.pending_bytes = 0
        self.changed = False

    def add(self, batch: bytes, fields: tuple) -> None:
        """Append one batch; `fields` are its header fields (base offset, last offset delta
        and max timestamp are read from them)."""
        base = fields[H_BASE_OFFSET]
        self.pieces.append(batch)
        self.metas.append((base, base + fields[H_LAST_OFFSET_DELTA], fields[H_MAX_TIMESTAMP], len(batch)))
        self.pending_bytes += len(batch)
        if self.pending_bytes >= WRITE_CHUNK_BYTES:
            self.write_pending()

    def write_pending(self) -> None:
        if self.pieces:
            self.segment.append(self.pieces, self.metas, self.pending_bytes)
            self.io(self.pending_bytes)
            self.pieces, self.metas, self.pending_bytes = [], [], 0

    def finish(self, mtime_s: float) -> SegmentState:
        """Write, index and fsync everything; the file's mtime becomes the newest of the
        segments it replaces (retention by time falls back to it, as in Kafka)."""
        self.write_pending()
        self.segment.on_become_inactive()
        self.segment.flush()
        state = self.segment.state()
        self.segment.close()
        os.utime(self.segment.log_path, (mtime_s, mtime_s))
        return state

    def abandon(self) -> None:
        self.segment.close()


class _GroupCleaner:
    """Cleans the batches of one group of segments into one writer."""

    def __init__(self, job: CleanJob, offset_map: OffsetMap, end_offset: int, producer_last: dict[int, int],
                 stats: CleanerStats, writer: _SegmentWriter) -> None:
        self.job = job
        self.offset_map = offset_map
        self.end_offset = end_offset  # the pass cleans through here; see cleaner_decisions.record_fate
        self.producer_last = producer_last
        self.stats = stats
        self.writer = writer
        self.dropped_last: tuple | None = None  # header of the last batch read, if it was dropped
        self.earliest_horizon: int | None = None

    def clean_batch(self, fields: tuple, batch: bytes) -> None:
        base = fields[H_BASE_OFFSET]
        stats = self.stats
        if fields[H_ATTRIBUTES] & CONTROL_MASK:
            self._output(batch, fields, changed=False)
            return
        data = batch_filter.record_data(batch)
        spans = _record_spans(fields, data)
        old_horizon = batch_filter.delete_horizon_ms(fields)
        kept = []
        keeps_tombstones = False
        now_ms = self.job.now_ms
        get = self.offset_map.get
        end_offset = self.end_offset
        for span in spans:
            key = span.key
            fate = cleaner_decisions.record_fate(base + span.offset_delta, key is not None, span.is_tombstone,
                                                 None if key is None else get(key), old_horizon, now_ms, end_offset=end_offset)
            if fate is Fate.KEEP:
                kept.append(span)
                keeps_tombstones = keeps_tombstones or (span.is_tombstone and key is not None)
            elif fate is Fate.SUPERSEDED:
                stats.records_superseded += 1
            else:
                stats.tombstones_removed += 1
        stats.records_read += len(spans)
        stats.records_kept += len(kept)
        last_offset = base + fields[H_LAST_OFFSET_DELTA]
        below_end = last_offset < end_offset
        horizon = cleaner_decisions.delete_horizon_after(old_horizon, keeps_tombstones, now_ms, self.job.delete_retention_ms,
                                                         below_end=below_end)
        producer_id = fields[H_PRODUCER_ID]
        is_producer_last = producer_id >= 0 and fields[H_BASE_SEQUENCE] >= 0 and self.producer_last.get(producer_id) == last_offset
        action = cleaner_decisions.batch_action(record_count=len(spans), kept=len(kept), is_control=False,
                                                horizon_changes=horizon != old_horizon, keep_header=is_producer_last)
        if horizon is not None and below_end:  # the result reports the clean section's horizons only
            self.earliest_horizon = horizon if self.earliest_horizon is None else min(self.earliest_horizon, horizon)
        if action is BatchAction.COPY:
            self._output(batch, fields, changed=False)
        elif action is BatchAction.REWRITE:
            rebuilt = batch_filter.rebuild_batch(fields, data, kept, horizon)
            self._output(rebuilt, HEADER_STRUCT.unpack_from(rebuilt), changed=True)
        elif action is BatchAction.EMPTY:
            stats.batches_emptied += 1
            self._output(batch_filter.empty_batch(fields), fields, changed=True)
        else:
            stats.batches_dropped += 1
            self.writer.changed = True
            self.dropped_last = fields

    def _output(self, batch: bytes, fields: tuple, *, changed: bool) -> None:
        self.writer.add(batch, fields)
        self.writer.changed = self.writer.changed or changed
        self.dropped_last = None

    def finish_group(self) -> None:
        """The group's last batch must stay (see the module docstring): if it was dropped,
        its empty header goes in after all."""
        if self.dropped_last is not None:
            fields = self.dropped_last
            self.stats.batches_dropped -= 1
            self.stats.batches_emptied += 1
            self.writer.add(batch_filter.empty_batch(fields), fields)
            self.dropped_last = None


def clean(job: CleanJob, io: Callable[[int], None] = _no_io) -> CleanResult:
    """One cleaning pass (see the module docstring). Leaves `.cleaned` files for the
    groups it changed and none for the others; on an exception, none at all."""
    stats = CleanerStats()

    def read_io(n: int) -> None:
        stats.bytes_read += n
        io(n)

    def write_io(n: int) -> None:
        stats.bytes_written += n
        io(n)

    offset_map = OffsetMap(job.map_entries_max)
    # The pass cleans through `end`: below it the clean section holds one record per key
    # once the pass is done. The last segment it cleans may straddle it (a full map stops
    # mid-segment, as Kafka's does); records past it are copied as they are.
    end = build_offset_map(job, offset_map, stats, read_io) if job.kind is PassKind.DIRTY else job.first_dirty_offset
    assert end >= job.first_dirty_offset
    to_clean = [s for s in job.segments if s.info.base_offset < end]
    producer_last = _producer_last_batches(job, read_io)
    groups = cleaner_decisions.group_segments([s.info for s in to_clean], job.segment_bytes, job.max_index_entries)
    by_base = {s.info.base_offset: s for s in to_clean}
    result = CleanResult([], end, None, stats)
    written: list[int] = []
    try:
        for group in groups:
            files = [by_base[info.base_offset] for info in group]
            state, horizon = _clean_group(job, files, offset_map, end, producer_last, stats, read_io, write_io)
            if horizon is not None:
                earliest = result.earliest_delete_horizon_ms
                result.earliest_delete_horizon_ms = horizon if earliest is None else min(earliest, horizon)
            if state is not None:
                written.append(state.base_offset)
                result.cleaned.append((state, tuple(info.base_offset for info in group)))
                stats.segments_replaced += len(group)
                stats.segments_written += 1
    except BaseException:
        segment_swap.discard(job.dir, written)
        raise
    return result


def _clean_group(job: CleanJob, files: list[SegmentFile], offset_map: OffsetMap, end_offset: int, producer_last: dict[int, int],
                 stats: CleanerStats, read_io: Callable[[int], None], write_io: Callable[[int], None]) -> tuple[SegmentState | None, int | None]:
    """Clean one group into a `.cleaned` segment. Returns its state, or None when nothing
    changed (one segment, every batch copied: its `.cleaned` files are removed), and the
    earliest delete horizon the group keeps."""
    writer = _SegmentWriter(job, files[0].info.base_offset, write_io)
    try:
        cleaner = _GroupCleaner(job, offset_map, end_offset, producer_last, stats, writer)
        for segment in files:
            for fields, batch in read_batches(segment.path, segment.info.size_bytes, read_io):
                cleaner.clean_batch(fields, batch)
        cleaner.finish_group()
        if not writer.changed and len(files) == 1:
            writer.abandon()
            segment_swap.discard(job.dir, [files[0].info.base_offset])
            return None, cleaner.earliest_horizon
        state = writer.finish(max(os.stat(s.path).st_mtime for s in files))
    except BaseException:
        writer.abandon()
        segment_swap.discard(job.dir, [files[0].info.base_offset])
        raise
    assert state.next_offset == files[-1].info.next_offset, "a cleaned segment ends where the segments it replaces ended"
    return state, cleaner.earliest_horizon
