"""The partition log: an ordered list of segments in <log.dir>/<topic>-<partition>/.
DESIGN.md section 3.

Threading: every method runs on the event loop thread except `flush`, which the asyncio
shell may run in a thread executor. The shell guarantees that no append, truncate, roll,
retention or close runs while a flush is in progress, so `flush` needs no lock; it only
fsyncs and writes out buffered index entries, and it snapshots the LEO before it starts.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from kafkalite.log import checkpoint, partition_metadata, records, segment_swap
from kafkalite.log.cleaner_decisions import SegmentInfo
from kafkalite.log.config import LogConfig
from kafkalite.log.epoch_cache import LeaderEpochCache
from kafkalite.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogDirError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
)
from kafkalite.log.records import (
    CRC_START,
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    H_CRC,
    H_LAST_OFFSET_DELTA,
    H_LEADER_EPOCH,
    H_MAX_TIMESTAMP,
    H_RECORD_COUNT,
    LOG_OVERHEAD,
    MAGIC,
    PREFIX_STRUCT,
    BatchHeader,
)
from kafkalite.log.segment import LogSegment, SegmentState, parse_segment_name

log = logging.getLogger(__name__)

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_MAX_RELATIVE_OFFSET = (1 << 31) - 1


class AppendResult(NamedTuple):
    """A NamedTuple rather than a frozen dataclass: it is built on every append and a
    frozen dataclass costs about a microsecond more, which the 16 KiB bench notices."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    batch_count: int
    record_count: int


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """<topic>-<partition>; topics may contain '-', so split on the last one."""
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isascii() or not partition.isdigit() or partition != str(int(partition)):
        return None
    return topic, int(partition)


def _resolve(dir_path: str, now_ms: int | None) -> tuple[str, tuple[str, int], int]:
    """A partition directory's absolute path, its (topic, partition), and now_ms (the I/O
    layer may read the clock: a new segment's age counts from now, not 1970)."""
    dir_path = os.path.abspath(dir_path)
    parsed = parse_partition_dir_name(os.path.basename(dir_path))
    if parsed is None:
        raise LogDirError(f"{dir_path}: not a <topic>-<partition> directory name")
    return dir_path, parsed, int(time.time() * 1000) if now_ms is None else now_ms


class Log:
    def __init__(self, dir_path: str, topic: str, partition: int, config: LogConfig,
                 segments: list[LogSegment], epoch_cache: LeaderEpochCache, now_ms: int) -> None:
        assert segments
        self.dir = dir_path
        self.topic = topic
        self.partition = partition
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.leader_epoch_cache = epoch_cache
        self._leo = segments[-1].next_offset
        self.log_start_offset = segments[0].base_offset
        self.recovery_point = self._leo
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self._dir_dirty = False  # segments created or deleted since the last flush
        # A log created empty: its directory's entries (and the directory's own entry in
        # the log dir, see LogManager.get_or_create) are made durable by its first flush,
        # not at creation. Unlike _dir_dirty this does not make a flush due: an empty log
        # that vanishes in a crash lost nothing.
        self.dir_unsynced = False
        self.parent_dir_unsynced = False
        self.on_dir_made: Callable[[], None] | None = None  # see Log.new
        self._truncations = 0  # lets an in-flight flush job see that a truncation happened
        self._rolled_since_flush = False
        # The log cleaner's progress (Kafka's cleaner checkpoint): offsets below it were
        # cleaned. Set from cleaner-offset-checkpoint by the LogManager; a truncation
        # lowers it to the new end, so re-appended offsets count as dirty again.
        self.first_dirty_offset = self.log_start_offset
        # KIP-516: the id of the topic this log belongs to (partition.metadata); None for a
        # log never told one. _topic_id_unsynced: written, not yet fsync'd (a new log's
        # file is made with its directory and made durable by its first flush).
        self.topic_id: str | None = None
        self._topic_id_unsynced = False

    # ------------------------------------------------------------------ open and recovery

    @classmethod
    def open(cls, dir_path: str, config: LogConfig, *, recovery_point: int = 0,
             clean_shutdown: bool = False, now_ms: int | None = None) -> Log:
        """Load (and, after an unclean stop, recover) the log in `dir_path`: an empty log if
        the directory has no segments, `new` if there is no directory. Unknown files are
        left alone."""
        if not os.path.isdir(dir_path):
            return cls.new(dir_path, config, now_ms=now_ms)
        dir_path, parsed, now_ms = _resolve(dir_path, now_ms)
        epoch_path = os.path.join(dir_path, checkpoint.LEADER_EPOCH_CHECKPOINT)
        try:
            # Finish or undo a cleaner's swap a crash interrupted; segments it swapped in
            # get their indexes rebuilt.
            swapped_in = segment_swap.recover(dir_path)
            names = os.listdir(dir_path)
        except OSError as e:
            raise LogDirError(f"cannot read log directory {dir_path}: {e}") from e
        bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
        epoch_cache = LeaderEpochCache.load(epoch_path)
        segments: list[LogSegment] = []
        try:
            for base in bases:
                segments.append(LogSegment.open_existing(dir_path, base, config))
            segments = cls._load_segments(segments, epoch_cache, recovery_point, clean_shutdown, swapped_in)
            created = not segments
            if created:
                segments.append(LogSegment.create(dir_path, 0, config, now_ms))
        except OSError as e:
            for s in segments:
                s.close()
            raise LogDirError(f"cannot read log directory {dir_path}: {e}") from e
        topic, partition = parsed
        result = cls(dir_path, topic, partition, config, segments, epoch_cache, now_ms)
        result.dir_unsynced = created
        result.topic_id = partition_metadata.read(dir_path)
        epoch_cache.truncate_from_end(result._leo)
        epoch_cache.truncate_from_start(result.log_start_offset)
        if not clean_shutdown:
            result.flush(now_ms)  # recovered bytes are now checked; make them the recovery point
        result._check_invariants()
        return result

    @classmethod
    def new(cls, dir_path: str, config: LogConfig, *, now_ms: int | None = None) -> Log:
        """A new partition's empty log, whose directory does not exist. Nothing is made on
        disk until its first append (LogSegment.deferred): creating a topic of 10,000
        partitions makes no directory and no file, and an idle partition never does. The
        first append calls `on_dir_made` (LogManager: the log dir's entry for it is then
        fsync'd with the others)."""
        dir_path, parsed, now_ms = _resolve(dir_path, now_ms)
        epoch_cache = LeaderEpochCache(os.path.join(dir_path, checkpoint.LEADER_EPOCH_CHECKPOINT))
        first = LogSegment.deferred(dir_path, 0, config, now_ms)
        result = cls(dir_path, *parsed, config, [first], epoch_cache, now_ms)
        first.on_made = result._dir_made
        result.dir_unsynced = True
        result._check_invariants()
        return result

    def _dir_made(self) -> None:
        if self.topic_id is not None:  # told its id before it had a directory
            partition_metadata.write(self.dir, self.topic_id, durable=False)
            self._topic_id_unsynced = True
        if self.on_dir_made is not None:
            self.on_dir_made()

    def assign_topic_id(self, topic_id: str) -> None:
        """KIP-516: this log is the replica of the topic with this id (a LeaderAndIsr said
        so); partition.metadata records it. A log of another topic is never relabelled:
        the replica manager deletes it instead."""
        assert self.topic_id in (None, topic_id), (self.topic_id, topic_id)
        if self.topic_id == topic_id:
            return
        if self.on_disk:  # an existing log, told once: durable at once (OSError: still none)
            partition_metadata.write(self.dir, topic_id, durable=True)
        self.topic_id = topic_id  # else: written when its first append makes the directory (_dir_made)

    @staticmethod
    def _load_segments(segments: list[LogSegment], epoch_cache: LeaderEpochCache,
                       recovery_point: int, clean_shutdown: bool, swapped_in: set[int] = frozenset()) -> list[LogSegment]:
        def on_batch(base_offset: int, epoch: int) -> None:
            if epoch >= 0 and epoch > epoch_cache.latest_epoch:
                epoch_cache.assign(epoch, base_offset)

        # First segment that may hold offsets >= the recovery point (Kafka recovers from the
        # segment containing the recovery point).
        first_unflushed = max(0, bisect.bisect_right([s.base_offset for s in segments], recovery_point) - 1)
        next_min = 0
        for i, segment in enumerate(segments):
            trusted = (clean_shutdown or i < first_unflushed) and segment.base_offset not in swapped_in
            if trusted and segment.load_trusted():
                truncated = 0
                if segment.size and segment.header_at(0)[H_BASE_OFFSET] < next_min:
                    truncated = segment.size  # offsets overlap the previous segment
            else:
                if segment.base_offset in swapped_in:
                    log.info("%s: swapped in by the log cleaner before a crash; rebuilding its indexes", segment.log_path)
                elif trusted:
                    log.warning("%s: index failed its sanity check; rebuilding", segment.log_path)
                truncated = segment.recover(next_min, on_batch)
            # A segment cut exactly at a batch boundary (or emptied) leaves a gap before the
            # next segment: everything after the gap is as suspect as bytes after a torn batch.
            gap = i + 1 < len(segments) and segments[i + 1].base_offset != segment.next_offset
            if truncated or gap:
                log.warning("%s: dropped %d damaged bytes and every later segment%s", segment.log_path, truncated,
                            " (offset gap after it)" if gap and not truncated else "")
                for later in segments[i + 1 :]:
                    later.delete_files()
                return segments[: i + 1]
            next_min = segment.next_offset
        return segments

    def _check_invariants(self) -> None:
        assert 0 <= self.log_start_offset <= self._leo
        assert self.recovery_point <= self._leo
        # Only a new, empty log at offset 0 waits for its files: one that starts later must
        # be found at that offset after a restart (Log.new).
        assert self.on_disk or (len(self._segments) == 1 and self._leo == 0)
        assert self._bases == sorted(self._bases)
        # DeleteRecords moves the log start inside a segment; a segment wholly below it
        # is deleted at once, so only the first segment may hold offsets below it.
        assert self._segments[0].base_offset <= self.log_start_offset
        assert len(self._segments) == 1 or self._segments[1].base_offset > self.log_start_offset

    # ------------------------------------------------------------------ properties

    @property
    def on_disk(self) -> bool:
        """Whether the partition's directory exists: False for a new partition until its
        first append (Log.new)."""
        return not self._segments[0].awaiting_files

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def first_segment_base_offset(self) -> int:
        return self._bases[0]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # ------------------------------------------------------------------ append

    def append_as_leader(self, batches: bytes, leader_epoch: int, now_ms: int, *,
                         checked: records.CheckedBatch | None = None) -> AppendResult:
        """Validate producer batches (unless `checked`), assign offsets from the LEO and
        stamp `leader_epoch`, then write them. The base offset and leader epoch are rewritten
        by writing a fresh 21-byte prefix in front of each batch's CRC-covered bytes (one
        pwritev, no re-encode, no copy beyond the one the CRC check makes).

        Hot path (bench/log_append.py): a single `bytes` batch is checked by
        records.check_one_client_batch (validate_batches' checks in fewer Python calls) and
        written by `_append_one`. `checked`: what that check returned for `batches`, when the
        caller made it already (the partition, which needs the header before the append);
        the batch is then not checked again."""
        latest_epoch = self.leader_epoch_cache.latest_epoch
        assert leader_epoch >= latest_epoch, "a leader's epoch never decreases"
        if leader_epoch > latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, self._leo)
        if checked is None:
            checked = records.check_one_client_batch(batches)
        else:
            assert type(checked) is records.CheckedBatch and len(batches) == CRC_START + len(checked.body), "checked is this batch"
        if checked is not None:
            return self._append_one(checked, leader_epoch, now_ms)
        if not batches:
            raise InvalidRecordError("no record batches")
        scanned = records.scan_batches(batches)
        offset = first_offset = self._leo
        pieces = []
        metas = []
        max_timestamp = -1
        record_count = 0
        pack_prefix = PREFIX_STRUCT.pack
        for pos, fields, body in scanned:
            records.check_client_batch(pos, fields)
            delta = fields[H_LAST_OFFSET_DELTA]
            length = fields[H_BATCH_LENGTH]
            pieces.append(pack_prefix(offset, length, leader_epoch, MAGIC, fields[H_CRC]))
            pieces.append(body)
            batch_max_timestamp = fields[H_MAX_TIMESTAMP]
            metas.append((offset, offset + delta, batch_max_timestamp, length + LOG_OVERHEAD))
            if batch_max_timestamp > max_timestamp:
                max_timestamp = batch_max_timestamp
            record_count += fields[H_RECORD_COUNT]
            offset += delta + 1
        self._write(pieces, metas, len(batches), now_ms)
        return AppendResult(first_offset, offset - 1, max_timestamp, len(scanned), record_count)

    def _append_one(self, checked: records.CheckedBatch, leader_epoch: int, now_ms: int) -> AppendResult:
        """append_as_leader for exactly one batch that passed records.check_one_client_batch,
        with the roll check inlined."""
        fields, body = checked
        delta = fields[H_LAST_OFFSET_DELTA]
        first_offset = self._leo
        last_offset = first_offset + delta
        max_timestamp = fields[H_MAX_TIMESTAMP]
        size = CRC_START + len(body)
        segment = self._segments[-1]
        started = segment.rolling_timestamp_ms
        config = self.config
        if (segment.size + size > config.segment_bytes
                or (started is not None and now_ms - started >= config.roll_ms)
                or len(segment.offset_index.keys) >= config.max_index_entries
                or last_offset - segment.base_offset > _MAX_RELATIVE_OFFSET):
            if self._maybe_roll_for(size, last_offset, now_ms):
                segment = self._segments[-1]
        prefix = PREFIX_STRUCT.pack(first_offset, fields[H_BATCH_LENGTH], leader_epoch, MAGIC, fields[H_CRC])
        segment.append_one(prefix, body, first_offset, last_offset, max_timestamp, size)
        self._leo = last_offset + 1
        self._unflushed_messages += delta + 1
        return AppendResult(first_offset, last_offset, max_timestamp, 1, delta + 1)

    def append_as_follower(self, batches: bytes, now_ms: int | None = None) -> AppendResult:
        """Append the leader's batches unchanged. Offsets must increase from the LEO; the
        epoch cache learns each new partition leader epoch. A batch may start past the LEO
        or past the previous batch's end: the leader's log is compacted there (offsets of
        records the cleaner removed are missing, as in Kafka)."""
        if not batches:
            return AppendResult(self._leo, self._leo - 1, -1, 0, 0)
        scanned = records.scan_batches(batches)
        expected = self._leo
        metas = []
        max_timestamp = -1
        record_count = 0
        for i, (pos, fields, _) in enumerate(scanned):
            base = fields[H_BASE_OFFSET]
            if base < expected:
                raise OffsetMismatchError(
                    f"{self.topic}-{self.partition}: follower batch at position {pos} starts at offset "
                    f"{base}, below {'the log end offset' if i == 0 else 'the end of the previous batch'} {expected}"
                )
            last = base + fields[H_LAST_OFFSET_DELTA]
            metas.append((base, last, fields[H_MAX_TIMESTAMP], fields[H_BATCH_LENGTH] + LOG_OVERHEAD))
            max_timestamp = max(max_timestamp, fields[H_MAX_TIMESTAMP])
            record_count += fields[H_RECORD_COUNT]
            expected = last + 1
        for _, fields, _ in scanned:
            epoch = fields[H_LEADER_EPOCH]
            if epoch >= 0 and epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(epoch, fields[H_BASE_OFFSET])
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        self._write([batches], metas, len(batches), now_ms)
        return AppendResult(metas[0][0], expected - 1, max_timestamp, len(scanned), record_count)

    def _write(self, pieces: list, metas: list, total_bytes: int, now_ms: int) -> None:
        segment = self._segments[-1]
        # Inline fast check (hot path); the full roll rules live in _should_roll.
        started = segment.rolling_timestamp_ms
        if (segment.size + total_bytes > self.config.segment_bytes
                or (started is not None and now_ms - started >= self.config.roll_ms)
                or len(segment.offset_index.keys) >= self.config.max_index_entries
                or metas[-1][1] - segment.base_offset > _MAX_RELATIVE_OFFSET):
            if self._maybe_roll_for(total_bytes, metas[-1][1], now_ms):
                segment = self._segments[-1]
        segment.append(pieces, metas, total_bytes)
        self._leo = metas[-1][1] + 1
        self._unflushed_messages += metas[-1][1] - metas[0][0] + 1

    # ------------------------------------------------------------------ roll

    def _should_roll(self, incoming_bytes: int, last_offset: int, now_ms: int) -> bool:
        segment = self.active_segment
        if segment.size == 0:
            return False
        return (
            segment.size + incoming_bytes > self.config.segment_bytes
            or self._segment_aged(segment, now_ms)
            or len(segment.offset_index) >= self.config.max_index_entries
            or last_offset - segment.base_offset > _MAX_RELATIVE_OFFSET
        )

    def _segment_aged(self, segment: LogSegment, now_ms: int) -> bool:
        started = segment.rolling_timestamp_ms
        return started is not None and now_ms - started >= self.config.roll_ms

    def _maybe_roll_for(self, incoming_bytes: int, last_offset: int, now_ms: int) -> bool:
        if not self._should_roll(incoming_bytes, last_offset, now_ms):
            return False
        self._roll(now_ms)
        return True

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll the active segment if it is non-empty and older than log.roll.ms."""
        segment = self.active_segment
        if segment.size == 0 or not self._segment_aged(segment, now_ms):
            return False
        self._roll(now_ms)
        return True

    def _roll(self, now_ms: int) -> None:
        old = self.active_segment
        assert self._leo >= old.next_offset
        old.on_become_inactive()
        new = LogSegment.create(self.dir, self._leo, self.config, now_ms)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._dir_dirty = True
        self._rolled_since_flush = True
        log.debug("%s: rolled to segment %d", self.dir, new.base_offset)

    # ------------------------------------------------------------------ read

    def _check_offset(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self._leo:
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition}: offset {offset} outside "
                f"[{self.log_start_offset}, {self._leo}]"
            )

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one: bool = True) -> bytes:
        """Whole batches starting with the batch that holds `offset`, at most `max_bytes` (but
        at least the first batch when `min_one`), none whose base offset >= `max_offset` (the
        HW for consumers). b"" at the LEO.

        Within one segment, as Kafka reads, except that a segment holding only batches
        without records (what compaction leaves of a segment whose records all went but
        whose producer state stays) does not end the read: the following segments are read
        on. librdkafka doubles its fetch size on every answer without a record and gives up
        at 1 GiB (MSG_SIZE_TOO_LARGE), so a log with a dozen such segments in a row, which
        compaction leaves until its next pass merges them, stranded it (a kill -9 test)."""
        self._check_offset(offset)
        parts: list[bytes] = []
        # A max_bytes of 0 still reads the first batch when `min_one` (KIP-74; Kafka's
        # LogSegment.read): a consumer with max.partition.fetch.bytes=0 got empty answers at
        # once, for ever.
        while offset < self._leo and (max_bytes > 0 or (min_one and not parts)):
            data = self._read_segment(offset, max_bytes, max_offset, min_one and not parts)
            if not data:
                break
            parts.append(data)
            max_bytes -= len(data)
            next_offset = _offset_after_empty_batches(data)
            if next_offset is None:
                break
            offset = next_offset
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _read_segment(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool) -> bytes:
        """`read` within the segment that holds `offset` (or the next one with a batch)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        for segment in self._segments[i:]:
            found = segment.locate(offset)
            if found is None:
                continue
            position, base, first_size = found
            if max_offset is not None and base >= max_offset:
                return b""
            want = min(max_bytes, segment.size - position)
            if first_size > want:
                return segment.read_at(position, first_size) if min_one else b""
            data = segment.read_at(position, want)
            end = _whole_batches_end(data, max_offset)
            return data if end == len(data) else data[:end]
        return b""

    def bytes_available(self, offset: int, end_offset: int) -> int:
        """Bytes of the whole batches a read from `offset` below `end_offset` could return,
        over every segment: what a delayed fetch counts against its min_bytes (Kafka's
        position difference). 0 when nothing below `end_offset` is at or after `offset`."""
        end_offset = min(end_offset, self._leo)
        if offset >= end_offset or offset < self.log_start_offset:
            return 0
        total = 0
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for segment in self._segments[i:]:
            if segment.base_offset >= end_offset:
                break
            found = segment.locate(offset)
            if found is None:
                continue
            start = found[0]
            stop = segment.locate(end_offset)
            if stop is None:
                total += segment.size - start
                continue
            position, base, size = stop
            # A batch that starts below end_offset is read whole (as `read` does).
            total += (position + size if base < end_offset else position) - start
            break
        return total

    def iter_batch_headers(self, start_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers of every batch from the one holding `start_offset` (default: log start)."""
        if start_offset is None:
            start_offset = self.log_start_offset
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for segment in self._segments[i:]:
            found = segment.find_batch(start_offset)
            if found is None:
                continue
            for _, fields in segment.iter_headers(found[0]):
                yield BatchHeader(*fields)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None."""
        for segment in self._segments:
            if segment.size == 0 or segment.max_timestamp < timestamp:
                continue
            start_offset = segment.time_index.lookup(timestamp)
            _, position = segment.offset_index.lookup(start_offset)
            for pos, fields in segment.iter_headers(position):
                if fields[H_MAX_TIMESTAMP] < timestamp:
                    continue
                if fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA] < self.log_start_offset:
                    continue  # deleted by DeleteRecords: the answer is never below the log start
                data = segment.read_at(pos, fields[H_BATCH_LENGTH] + LOG_OVERHEAD)
                for record in records.decode_records(data):
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
                # None of it qualifies: its later records went below the log start, or the
                # record that set its max timestamp was compacted away. The answer is in a
                # later batch (as Kafka's LogSegment.findOffsetByTimestamp), not this one.
        return None

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> bool:
        """Drop every batch with an offset >= `offset`. Works on batch boundaries: if
        `offset` falls inside a batch, that whole batch goes too, and the LEO becomes that
        batch's base offset (less than `offset`). Returns whether anything changed."""
        assert offset >= 0
        if offset >= self._leo:
            # No batch goes, but an epoch this replica led without appending anything starts
            # at the LEO; the new leader never heard of it, so it must go (Kafka's
            # Log.truncateTo does the same). Kept, it is sent as the last fetched epoch and
            # the leader answers DIVERGING_EPOCH for ever: a follower that never catches up.
            self.leader_epoch_cache.truncate_from_end(self._leo)
            return False
        self._truncations += 1
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._segments.pop().delete_files()
            self._bases.pop()
            self._dir_dirty = True
        self._leo = self.active_segment.truncate_to(offset)
        if self._leo < self.log_start_offset:
            # The batch holding `offset` started below a log start DeleteRecords set inside
            # it: nothing of the log is left, so it restarts empty at its log start.
            self.truncate_fully_and_start_at(self.log_start_offset)
            return True
        self.first_dirty_offset = min(self.first_dirty_offset, self._leo)
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.recovery_point = min(self.recovery_point, self._leo)
        self._check_invariants()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at `offset` (a follower far behind the
        leader's log start, or DeleteRecords past the end)."""
        assert offset >= 0
        self._truncations += 1
        for segment in self._segments:
            segment.delete_files()
        if self.on_disk:
            first = LogSegment.create(self.dir, offset, self.config, self._last_flush_ms)
        else:
            first = LogSegment.deferred(self.dir, offset, self.config, self._last_flush_ms)
            first.on_made = self._dir_made
            if offset > 0:
                first.materialize()  # a restart must find the log at `offset`, not at 0
        self._segments = [first]
        self._bases = [offset]
        self._leo = self.log_start_offset = self.recovery_point = self.first_dirty_offset = offset
        self.leader_epoch_cache.clear()
        self._dir_dirty = True
        self._check_invariants()

    # ------------------------------------------------------------------ retention

    def delete_retained_segments(self, now_ms: int, upper_offset: int | None = None) -> int:
        """Delete whole old segments past retention.ms or beyond retention.bytes, oldest
        first, never the active segment, when cleanup.policy includes delete (a compacted
        log alone keeps every segment). `upper_offset` (the HW, as Kafka bounds
        deletable segments) keeps every segment holding an offset at or above it, so the
        log start never passes the HW. Returns how many were deleted."""
        if not self.config.delete:
            return 0
        candidates = self._segments[:-1]
        if upper_offset is not None:
            candidates = [s for s in candidates if s.next_offset <= upper_offset]
        by_time = 0
        if self.config.retention_ms >= 0:
            while (by_time < len(candidates)
                   and now_ms - candidates[by_time].last_timestamp_for_retention > self.config.retention_ms):
                by_time += 1
        by_size = 0
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes - self.config.retention_bytes
            while by_size < len(candidates) and excess >= candidates[by_size].size:
                excess -= candidates[by_size].size
                by_size += 1
        count = max(by_time, by_size)
        if count == 0:
            return 0
        self._delete_oldest_segments(count)
        self._raise_log_start(self._segments[0].base_offset)
        self._check_invariants()
        return count

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords on the leader, or a follower following the leader's log start
        (Kafka's maybeIncrementLogStartOffset): the log start moves up to `offset`, which
        may fall inside a segment, and every segment wholly below it is deleted through
        the same path as retention. The caller bounds `offset` by the HW. Returns whether
        the log start moved."""
        assert offset <= self._leo
        if offset <= self.log_start_offset:
            return False
        below = 0
        while below + 1 < len(self._segments) and self._segments[below + 1].base_offset <= offset:
            below += 1
        if below:
            self._delete_oldest_segments(below)
        self._raise_log_start(offset)
        self._check_invariants()
        return True

    def _delete_oldest_segments(self, count: int) -> None:
        assert 0 < count < len(self._segments), "never the active segment"
        for segment in self._segments[:count]:
            segment.delete_files()
        del self._segments[:count], self._bases[:count]
        self._dir_dirty = True

    def _raise_log_start(self, offset: int) -> None:
        """The log start never moves down here (only a truncation below it restarts the log)."""
        self.log_start_offset = max(self.log_start_offset, offset)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        self.first_dirty_offset = max(self.first_dirty_offset, self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    # ------------------------------------------------------------------ log cleaner

    @property
    def truncations(self) -> int:
        """Counts truncations: a cleaning started before one no longer applies."""
        return self._truncations

    def segment_infos(self) -> tuple[SegmentInfo, ...]:
        """Every segment as the cleaner's decisions see it, the active one last."""
        return tuple(
            SegmentInfo(s.base_offset, s.next_offset, s.size, s.max_timestamp, len(s.offset_index)) for s in self._segments
        )

    def segment_path(self, base_offset: int) -> str:
        return self._segments[self._bases.index(base_offset)].log_path

    def swap_in_cleaned(self, state: SegmentState, replaced: tuple[int, ...],
                        fs: segment_swap.FileOps = segment_swap.REAL_FILE_OPS) -> None:
        """Replace the segments with base offsets `replaced` by the cleaned segment written
        as `.cleaned` files (kafkalite.log.segment_swap). The caller checked, with no await
        since, that the log is not truncated since the cleaning read them and still holds
        them (`holds_segments`). An OSError in the middle leaves the files in a state the
        next Log.open completes, but this object no longer matches them: the caller must
        stop using the log (the broker exits)."""
        assert self.holds_segments(replaced)
        assert state.base_offset == replaced[0]
        i = self._bases.index(replaced[0])
        j = i + len(replaced)
        assert j < len(self._segments), "the active segment is never cleaned"
        assert state.next_offset == self._segments[j].base_offset, "a cleaned segment ends where the next one starts"
        # Closing a replaced segment must not write index entries: they would land in the
        # new segment's index, which has the first replaced segment's name (entries are
        # written out when a segment rolls, so a segment below the active one has none).
        assert not any(old.has_pending_index_entries() for old in self._segments[i:j])
        segment_swap.commit(self.dir, state.base_offset, replaced, fs)
        new = LogSegment.adopt(self.dir, self.config, state)
        for old in self._segments[i:j]:
            old.close()
        self._segments[i:j] = [new]
        self._bases[i:j] = [new.base_offset]
        self._dir_dirty = True  # the flush task fsyncs the directory, making the renames durable
        self._check_invariants()

    def holds_segments(self, bases: tuple[int, ...]) -> bool:
        """Whether `bases` are consecutive segments of this log below the active one."""
        if not bases or bases[0] not in self._bases:
            return False
        i = self._bases.index(bases[0])
        return tuple(self._bases[i : i + len(bases)]) == bases and i + len(bases) < len(self._segments)

    # ------------------------------------------------------------------ flush and close

    def needs_flush(self, now_ms: int) -> bool:
        """Whether the shell should run `flush` (in a thread). True after a roll (so the
        recovery point advances segment by segment, as Kafka flushes rolled segments) and
        when log.flush.interval.messages / log.flush.interval.ms are due."""
        if self._rolled_since_flush or self._dir_dirty:
            return True
        if self._unflushed_messages == 0:
            return False
        messages = self.config.flush_interval_messages
        if messages is not None and self._unflushed_messages >= messages:
            return True
        interval_ms = self.config.flush_interval_ms
        return interval_ms is not None and now_ms - self._last_flush_ms >= interval_ms

    def begin_flush(self, now_ms: int | None = None) -> FlushJob:
        """Event-loop thread: snapshot what a flush must make durable. The returned job's
        `run()` does only syscalls on private descriptors (dup'd segment fds, index paths,
        an epoch snapshot), so it may run in a thread while this log keeps appending,
        rolling, truncating or closing; `complete_flush` then advances the recovery point
        to the LEO seen here."""
        job = FlushJob(dir=self.dir, leo=self._leo, now_ms=now_ms, truncations=self._truncations)
        if not self.on_disk:
            # Nothing to make durable. The directory's entries (and an epoch the cache
            # holds) are flushed after the first append has made them.
            return job
        cache = self.leader_epoch_cache
        if cache.dirty and cache.path is not None:
            # Before the recovery point passes a new epoch's batches (see LeaderEpochCache).
            job.epochs = (cache.path, cache.epoch_entries())
            cache.dirty = False
        try:
            for segment in self._segments:
                if segment.unflushed:
                    segment.offset_index.write_pending()
                    segment.time_index.write_pending()
                    job.fds.append(segment.dup_fd())
                    job.index_paths += [segment.offset_index.path, segment.time_index.path]
                    segment.unflushed = False
        except BaseException:
            # (out of descriptors for the dup, no space for an index): nothing of this job
            # counts as flushed, and the descriptors it took go back.
            for fd in job.fds:
                os.close(fd)
            job.fds = []
            self.abort_flush(job)
            raise
        if self._topic_id_unsynced:
            job.index_paths.append(partition_metadata.path_in(self.dir))
            self._topic_id_unsynced = False
            self._dir_dirty = True
        job.fsync_dir = self._dir_dirty or self.dir_unsynced
        job.fsync_parent = self.parent_dir_unsynced
        self._dir_dirty = False
        self.dir_unsynced = False
        self.parent_dir_unsynced = False
        self._rolled_since_flush = False
        self._unflushed_messages = 0
        return job

    def complete_flush(self, job: FlushJob) -> None:
        if job.now_ms is not None:
            self._last_flush_ms = job.now_ms
        if job.truncations != self._truncations:
            return  # truncated meanwhile: offsets below job.leo may now hold unflushed batches
        self.recovery_point = max(self.recovery_point, job.leo)

    def abort_flush(self, job: FlushJob) -> None:
        """The job failed: what it covered counts as unflushed again."""
        for segment in self._segments:
            segment.unflushed = True
        self._dir_dirty = True
        self.parent_dir_unsynced = self.parent_dir_unsynced or job.fsync_parent
        if partition_metadata.path_in(self.dir) in job.index_paths:
            self._topic_id_unsynced = True
        if job.epochs is not None:
            self.leader_epoch_cache.dirty = True

    def flush(self, now_ms: int | None = None) -> None:
        """fsync every segment written since the last flush and advance the recovery point
        (synchronous: begin, run, complete)."""
        job = self.begin_flush(now_ms)
        try:
            job.run()
        except OSError:
            self.abort_flush(job)
            raise
        self.complete_flush(job)

    def close(self) -> None:
        if self.on_disk:  # an empty log's epochs are dropped when it is opened again anyway
            self.leader_epoch_cache.persist()
        for segment in self._segments:
            segment.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        self.close()
        if self.on_disk:
            shutil.rmtree(self.dir, ignore_errors=False)


class FlushJob:
    """What one flush makes durable; `run()` is safe in any thread (see Log.begin_flush)."""

    def __init__(self, *, dir: str, leo: int, now_ms: int | None, truncations: int):
        self.truncations = truncations
        self.dir = dir
        self.leo = leo
        self.now_ms = now_ms
        self.fds: list[int] = []
        self.index_paths: list[str] = []
        self.epochs: tuple[str, list[tuple[int, int]]] | None = None
        self.fsync_dir = False
        self.fsync_parent = False  # the log dir, for a new log's own entry (LogManager.get_or_create)

    def run(self) -> None:
        try:
            if self.fsync_parent:  # first, so no flushed byte sits in a directory a crash can lose
                checkpoint.fsync_dir(os.path.dirname(self.dir))
            if self.epochs is not None:
                checkpoint.write_epochs(*self.epochs)
            for fd in self.fds:
                os.fsync(fd)
            for path in self.index_paths:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    continue  # deleted by a truncation meanwhile: nothing left to make durable
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            if self.fsync_dir:
                checkpoint.fsync_dir(self.dir)
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds = []


_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a batch
_RECORD_COUNT = struct.Struct(">i")  # at byte 57 of a batch


def _offset_after_empty_batches(data: bytes) -> int | None:
    """None if a batch in `data` (whole batches) holds a record, else the offset after its
    last batch. Stops at the first batch with a record: the first, on a fetch's hot path."""
    position, next_offset = 0, -1
    while position + LOG_OVERHEAD <= len(data):
        if _RECORD_COUNT.unpack_from(data, position + 57)[0] > 0:
            return None
        base, length = _OFFSET_AND_LENGTH.unpack_from(data, position)
        next_offset = base + _LAST_OFFSET_DELTA.unpack_from(data, position + 23)[0] + 1
        position += length + LOG_OVERHEAD
    assert position == len(data), "whole batches only"
    return next_offset


def _whole_batches_end(data: bytes, max_offset: int | None) -> int:
    """End of the last whole batch in `data` (from position 0) whose base offset is below
    `max_offset`."""
    position = 0
    end = len(data)
    unpack = _OFFSET_AND_LENGTH.unpack_from
    while position + LOG_OVERHEAD <= end:
        base, length = unpack(data, position)
        if max_offset is not None and base >= max_offset:
            break
        if position + length + LOG_OVERHEAD > end:
            break
        position += length + LOG_OVERHEAD
    return position


__all__ = ["AppendResult", "Log", "parse_partition_dir_name", "CorruptRecordError"]
