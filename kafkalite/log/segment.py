"""One log segment: <base offset, 20 digits>.log with its .index and .timeindex.

The .log file holds whole RecordBatch v2 batches back to back. Appends are one
os.writev per Log append; reads are os.pread. No Python-level file buffering.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from kafkalite.log import records
from kafkalite.log.config import LogConfig
from kafkalite.log.errors import CorruptRecordError
from kafkalite.log.index import OffsetIndex, TimeIndex
from kafkalite.log.open_files import OPEN_FILES, OpenFiles
from kafkalite.log.records import (
    BATCH_HEADER_SIZE,
    CRC_START,
    H_BASE_OFFSET,
    H_BATCH_LENGTH,
    H_CRC,
    H_LAST_OFFSET_DELTA,
    H_LEADER_EPOCH,
    H_MAX_TIMESTAMP,
    HEADER_STRUCT,
    LOG_OVERHEAD,
)

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
_SCAN_CHUNK_BYTES = 4 << 20
_IOV_MAX = 1024
TAIL_BATCHES = 512  # the newest batches whose place a segment remembers (LogSegment.locate)


@dataclass(frozen=True)
class SegmentState:
    """A closed segment's bookkeeping (LogSegment.state / LogSegment.adopt): what a scan of
    its file would rebuild. Picklable, so the cleaner's worker process can hand it back."""

    base_offset: int
    size_bytes: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_index_entry: int
    offset_index: tuple[tuple[int, int], ...]  # (offset, position)
    time_index: tuple[tuple[int, int], ...]  # (timestamp, offset)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(file_name: str) -> int | None:
    """Base offset of a `<20 digits>.log` file name, else None (the file is not ours)."""
    stem, dot, suffix = file_name.partition(".")
    if "." + suffix != LOG_SUFFIX or len(stem) != 20 or not stem.isascii() or not stem.isdigit():
        return None
    return int(stem)


def _write_all(fd: int, pieces: list, position: int, total_bytes: int) -> None:
    """pwritev every piece at `position`: one syscall normally (explicit positions, so the
    fd's own offset never matters after a truncation or reopen); loops only on a short
    write or more pieces than IOV_MAX."""
    written = os.pwritev(fd, pieces, position) if len(pieces) <= _IOV_MAX else 0
    if written == total_bytes:
        return
    view = memoryview(b"".join(pieces))[written:]
    position += written
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


class LogSegment:
    # The bounded LRU of open `.log` descriptors (kafkalite.log.open_files): a segment's
    # descriptor is opened on first use and may be closed again while the segment is idle.
    files: OpenFiles = OPEN_FILES

    def __init__(self, dir_path: str, base_offset: int, config: LogConfig, size: int, file_suffix: str = "") -> None:
        """`file_suffix` names a segment being written under a temporary name (the log
        cleaner's `.cleaned` files, kafkalite.log.segment_swap); "" for a live segment."""
        self.dir = dir_path
        self.base_offset = base_offset
        self.config = config
        stem = os.path.join(dir_path, segment_name(base_offset))
        self.log_path = stem + LOG_SUFFIX + file_suffix
        self.offset_index = OffsetIndex(stem + INDEX_SUFFIX + file_suffix, base_offset)
        self.time_index = TimeIndex(stem + TIME_INDEX_SUFFIX + file_suffix, base_offset)
        self._fd = -1  # owned by `files`: -1 while not open
        self._closed = False
        self.size = size
        self.next_offset = base_offset  # last offset + 1 of the last batch (base if empty)
        self.max_timestamp = -1  # largest batch max timestamp seen
        self.offset_of_max_timestamp = base_offset  # base offset of the batch where it first appeared
        self.bytes_since_index_entry = 0
        self.rolling_timestamp_ms: int | None = None  # what log.roll.ms counts from
        self.unflushed = False
        # A new partition's segment (`deferred`): neither its `.log` file nor its directory
        # exists until the first descriptor is asked for (the first append); `on_made` is
        # called once they do.
        self.awaiting_files = False
        self.on_made: Callable[[], None] | None = None
        # Where the newest batches are (last offset, position, base offset), oldest first:
        # consecutive batches that end at the end of the file. A fetch near the log end (a
        # follower, a consumer keeping up) finds its batch here instead of reading every
        # header from the last index entry on (index.interval.bytes apart: with small
        # batches, dozens of preads per read). Appends add to it; whatever rewrites the
        # tail clears it.
        self._tail_lasts: list[int] = []
        self._tail_positions: list[int] = []
        self._tail_bases: list[int] = []

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, dir_path: str, base_offset: int, config: LogConfig, now_ms: int, file_suffix: str = "") -> LogSegment:
        """A new empty segment. Stale files of the same name (left by our own truncation)
        are emptied: a new segment is only ever created at or above the log end offset."""
        path = os.path.join(dir_path, segment_name(base_offset) + LOG_SUFFIX + file_suffix)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        segment = cls(dir_path, base_offset, config, 0, file_suffix)
        cls.files.add(segment, fd)
        segment.offset_index.reset()
        segment.time_index.reset()
        segment.rolling_timestamp_ms = now_ms
        segment.unflushed = True
        return segment

    @classmethod
    def deferred(cls, dir_path: str, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """The first segment of a partition whose directory does not exist: nothing is made
        on disk until the segment's descriptor is first asked for (`materialize`), so
        creating a topic of 10,000 partitions makes no directory and no file, and an idle
        partition never does (issue 13: the mkdir and O_CREAT of each new partition were
        more than half of a broker's LeaderAndIsr for a new topic)."""
        segment = cls(dir_path, base_offset, config, 0)
        segment.awaiting_files = True
        segment.rolling_timestamp_ms = now_ms
        return segment

    def materialize(self) -> None:
        """Make a `deferred` segment's directory and empty `.log` file. The new entries are
        made durable by the log's first flush (Log.dir_unsynced, parent_dir_unsynced), not
        here: until then the partition holds nothing durable, and a crash that loses the
        directory loses an empty log, which the next LeaderAndIsr makes again. Indexes are
        created on their first entry, so a directory made here has none to empty."""
        assert self.awaiting_files and self._fd < 0
        try:
            os.mkdir(self.dir)
            stale = False
        except FileExistsError:
            stale = True  # made meanwhile by someone else: empty what it holds under our names
        except FileNotFoundError:
            os.makedirs(self.dir, exist_ok=True)  # the log dir itself is gone: make it again
            stale = False
        fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.files.add(self, fd)
        self.awaiting_files = False
        if stale:
            self.offset_index.reset()
            self.time_index.reset()
        if self.on_made is not None:
            self.on_made()

    @classmethod
    def open_existing(cls, dir_path: str, base_offset: int, config: LogConfig) -> LogSegment:
        path = os.path.join(dir_path, segment_name(base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR)
        segment = cls(dir_path, base_offset, config, os.fstat(fd).st_size)
        cls.files.add(segment, fd)
        return segment

    @classmethod
    def adopt(cls, dir_path: str, config: LogConfig, state: SegmentState) -> LogSegment:
        """Open a finished, flushed segment whose bookkeeping is already known (a cleaned
        segment just swapped in under its final name): no scan, indexes installed from
        `state`, which must describe the files exactly."""
        path = os.path.join(dir_path, segment_name(state.base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR)
        segment = cls(dir_path, state.base_offset, config, state.size_bytes)
        cls.files.add(segment, fd)
        assert os.fstat(fd).st_size == state.size_bytes
        segment.offset_index.install(list(state.offset_index))
        segment.time_index.install(list(state.time_index))
        segment.next_offset = state.next_offset
        segment.max_timestamp = state.max_timestamp
        segment.offset_of_max_timestamp = state.offset_of_max_timestamp
        segment.bytes_since_index_entry = state.bytes_since_index_entry
        return segment

    def state(self) -> SegmentState:
        """The bookkeeping `adopt` needs, after every index entry has been written."""
        assert not self.has_pending_index_entries()
        return SegmentState(
            base_offset=self.base_offset, size_bytes=self.size, next_offset=self.next_offset,
            max_timestamp=self.max_timestamp, offset_of_max_timestamp=self.offset_of_max_timestamp,
            bytes_since_index_entry=self.bytes_since_index_entry,
            offset_index=tuple(zip(self.offset_index.keys, self.offset_index.values)),
            time_index=tuple(zip(self.time_index.keys, self.time_index.values)),
        )

    def has_pending_index_entries(self) -> bool:
        return bool(self.offset_index._pending or self.time_index._pending)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.offset_index.close()
            self.time_index.close()
            self.files.close(self)

    def delete_files(self) -> None:
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

    @property
    def fd(self) -> int:
        """The open descriptor, reopened if the LRU closed it (made, if `deferred`): use it
        on this thread, now."""
        assert not self._closed
        if self.awaiting_files:
            self.materialize()
        return self.files.fd(self)

    def dup_fd(self) -> int:
        """A private descriptor of the `.log` file (for a flush in another thread)."""
        assert not self._closed and not self.awaiting_files
        return self.files.dup(self)

    def flush(self) -> None:
        """fsync the segment and its indexes. Called from the flush thread while the event
        loop does not append (see Log.flush)."""
        fd = self.dup_fd()
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.unflushed = False

    def mtime_ms(self) -> int:
        if self.awaiting_files:
            return self.rolling_timestamp_ms  # when its file would have been made
        return int(os.stat(self.log_path).st_mtime * 1000)

    @property
    def last_timestamp_for_retention(self) -> int:
        """Kafka's segment largestTimestamp: max batch timestamp, else the file's mtime."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.mtime_ms()

    # ------------------------------------------------------------------ append

    def append(self, pieces: list, batches: list[tuple[int, int, int, int]], total_bytes: int) -> None:
        """Write `pieces` (the bytes of whole batches) with one writev and index them.
        `batches` holds (base offset, last offset, max timestamp, size) per batch in order."""
        assert batches[0][0] >= self.next_offset
        position = self.size
        _write_all(self.fd, pieces, position, total_bytes)
        interval = self.config.index_interval_bytes
        max_timestamp = self.max_timestamp
        since_index = self.bytes_since_index_entry
        for base, last, batch_max_timestamp, size in batches:
            self._remember(last, position, base)
            if batch_max_timestamp > max_timestamp:
                max_timestamp = self.max_timestamp = batch_max_timestamp
                self.offset_of_max_timestamp = base
            if since_index >= interval:
                self.offset_index.append(base, position)
                self.time_index.maybe_append(max_timestamp, self.offset_of_max_timestamp)
                since_index = 0
            position += size
            since_index += size
        self.bytes_since_index_entry = since_index
        self.size = position
        self.next_offset = batches[-1][1] + 1
        if self.rolling_timestamp_ms is None:
            self.rolling_timestamp_ms = batches[0][2]
        self.unflushed = True

    def append_one(self, prefix: bytes, body: bytes, base: int, last: int, max_timestamp: int, size: int) -> None:
        """`append` for one batch given as its 21-byte prefix and CRC-covered body (the
        leader's hot path; same bookkeeping, no per-call lists)."""
        assert base >= self.next_offset
        position = self.size
        fd = self.fd
        if os.pwritev(fd, (prefix, body), position) != size:
            _write_all(fd, [prefix, body], position, size)  # short write: finish it
        self._remember(last, position, base)
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base
        if self.bytes_since_index_entry >= self.config.index_interval_bytes:
            self.offset_index.append(base, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index_entry = size
        else:
            self.bytes_since_index_entry += size
        self.size = position + size
        self.next_offset = last + 1
        if self.rolling_timestamp_ms is None:
            self.rolling_timestamp_ms = max_timestamp
        self.unflushed = True

    def _remember(self, last: int, position: int, base: int) -> None:
        lasts = self._tail_lasts
        assert not lasts or (last > lasts[-1] and position > self._tail_positions[-1]), (last, position)
        lasts.append(last)
        self._tail_positions.append(position)
        self._tail_bases.append(base)
        if len(lasts) >= 2 * TAIL_BATCHES:
            del lasts[:TAIL_BATCHES]
            del self._tail_positions[:TAIL_BATCHES]
            del self._tail_bases[:TAIL_BATCHES]

    def _forget_tail(self) -> None:
        self._tail_lasts.clear()
        self._tail_positions.clear()
        self._tail_bases.clear()

    def on_become_inactive(self) -> None:
        """Called at roll: make the time index's last entry the segment's max timestamp so a
        clean reopen knows it without a scan, and write out buffered index entries."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.write_pending()
        self.time_index.write_pending()

    # ------------------------------------------------------------------ read

    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def header_at(self, position: int) -> tuple | None:
        """Raw header fields of the batch at `position`, None at the end of the segment.
        Raises CorruptRecordError if the bytes there are not a whole batch's framing."""
        if position >= self.size:
            return None
        data = os.pread(self.fd, BATCH_HEADER_SIZE, position)
        if len(data) < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"{self.log_path}: torn batch header at {position}")
        fields = HEADER_STRUCT.unpack_from(data)
        records.check_header_fields(fields, position)
        if position + fields[H_BATCH_LENGTH] + LOG_OVERHEAD > self.size:
            raise CorruptRecordError(f"{self.log_path}: torn batch at {position}")
        return fields

    def locate(self, offset: int) -> tuple[int, int, int] | None:
        """(position, base offset, size in bytes) of the first batch whose last offset >=
        `offset`, None if there is none: from the remembered tail when it covers `offset`
        (no I/O), else by reading headers (`find_batch`)."""
        lasts = self._tail_lasts
        if lasts:
            assert lasts[-1] == self.next_offset - 1, (lasts[-1], self.next_offset)
            i = bisect.bisect_left(lasts, offset)
            if i == len(lasts):
                return None  # past the last batch
            positions = self._tail_positions
            if i > 0 or positions[0] == 0:  # batch i-1 ends below `offset`, or i is the first
                end = positions[i + 1] if i + 1 < len(positions) else self.size
                return positions[i], self._tail_bases[i], end - positions[i]
        found = self.find_batch(offset)
        if found is None:
            return None
        position, fields = found
        return position, fields[H_BASE_OFFSET], fields[H_BATCH_LENGTH] + LOG_OVERHEAD

    def find_batch(self, offset: int, start_position: int | None = None) -> tuple[int, tuple] | None:
        """(position, header fields) of the first batch whose last offset >= `offset`."""
        if start_position is None:
            _, start_position = self.offset_index.lookup(offset)
        position = start_position
        while True:
            fields = self.header_at(position)
            if fields is None:
                return None
            if fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA] >= offset:
                return position, fields
            position += fields[H_BATCH_LENGTH] + LOG_OVERHEAD

    def iter_headers(self, start_position: int = 0):
        """(position, raw header fields) of every batch from `start_position`."""
        position = start_position
        while (fields := self.header_at(position)) is not None:
            yield position, fields
            position += fields[H_BATCH_LENGTH] + LOG_OVERHEAD

    # ------------------------------------------------------------------ truncate

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= `offset` (a batch holding `offset` goes
        whole). Returns the new next offset of the segment."""
        found = self.find_batch(offset)
        if found is None:
            return self.next_offset
        position, fields = found
        os.ftruncate(self.fd, position)
        self.size = position
        dropped_base = fields[H_BASE_OFFSET]
        self.offset_index.truncate_to_offset(dropped_base)
        self.time_index.truncate_to_offset(dropped_base)
        self._reset_tail_state()
        self.unflushed = True
        return self.next_offset

    def _reset_tail_state(self) -> int:
        """Recompute next offset, max timestamp and index spacing by scanning headers from
        the last offset index entry (the time index covers every batch up to that entry).
        Returns the position where the scan ended (the file size if the tail is whole)."""
        self._forget_tail()
        scan_from = self.offset_index.values[-1] if len(self.offset_index) else 0
        self.max_timestamp = self.time_index.last_timestamp
        self.offset_of_max_timestamp = self.time_index.values[-1] if len(self.time_index) else self.base_offset
        self.next_offset = self.base_offset
        end = scan_from
        for position, fields in self.iter_headers(scan_from):
            if fields[H_MAX_TIMESTAMP] > self.max_timestamp:
                self.max_timestamp = fields[H_MAX_TIMESTAMP]
                self.offset_of_max_timestamp = fields[H_BASE_OFFSET]
            self.next_offset = fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA] + 1
            end = position + fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        self.bytes_since_index_entry = self.size - scan_from
        if self.size == 0:
            self.rolling_timestamp_ms = None
        return end

    # ------------------------------------------------------------------ open / recover

    def load_trusted(self) -> bool:
        """Open after a clean stop, or below the recovery point: adopt the index files if
        they pass a sanity check and the tail after the last index entry scans cleanly.
        Returns False if the caller must `recover` this segment instead."""
        offsets = self.offset_index.read_entries()
        times = self.time_index.read_entries()
        if offsets is None or times is None:
            return False
        if not OffsetIndex.entries_sane(offsets, self.base_offset, self.size):
            return False
        if not TimeIndex.entries_sane(times, self.base_offset):
            return False
        # Spot-check entries against the batches they claim to point at.
        sample = offsets[:: max(1, len(offsets) // 4)] + offsets[-1:]
        for offset, position in sample:
            try:
                fields = self.header_at(position)
            except CorruptRecordError:
                return False
            if fields is None or fields[H_BASE_OFFSET] != offset:
                return False
        self.offset_index.install(offsets)
        self.time_index.install(times)
        try:
            end = self._reset_tail_state()
        except CorruptRecordError:
            return False
        if end != self.size:
            return False
        if times and times[-1][1] >= self.next_offset:
            return False
        if self.size:
            self.rolling_timestamp_ms = self.header_at(0)[H_MAX_TIMESTAMP]
        return True

    def recover(self, min_offset: int, on_batch=None) -> int:
        """Scan every batch from position 0, checking framing, CRC-32C and that offsets
        increase (starting at >= `min_offset`); rebuild both indexes; truncate the file at
        the first bad batch. `on_batch(base_offset, partition_leader_epoch)` sees each good
        batch (to rebuild the leader epoch cache). Returns the number of bytes truncated."""
        self._forget_tail()
        self.offset_index.reset()
        self.time_index.reset()
        self.size = os.fstat(self.fd).st_size
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_index_entry = 0
        self.next_offset = self.base_offset
        expected_min = max(min_offset, self.base_offset)
        position = 0
        chunk = b""
        chunk_start = 0
        good_end = 0
        first_timestamp = None
        interval = self.config.index_interval_bytes
        while position < self.size:
            local = position - chunk_start
            if len(chunk) - local < BATCH_HEADER_SIZE:
                chunk = os.pread(self.fd, _SCAN_CHUNK_BYTES, position)
                chunk_start, local = position, 0
            if len(chunk) - local < BATCH_HEADER_SIZE:
                log.warning("%s: torn batch header at %d; truncating", self.log_path, position)
                break
            fields = HEADER_STRUCT.unpack_from(chunk, local)
            try:
                records.check_header_fields(fields, position)
            except CorruptRecordError as e:
                log.warning("%s: %s; truncating", self.log_path, e)
                break
            batch_size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
            if local + batch_size > len(chunk):
                chunk = os.pread(self.fd, max(_SCAN_CHUNK_BYTES, batch_size), position)
                chunk_start, local = position, 0
                if batch_size > len(chunk):
                    log.warning("%s: torn batch at %d; truncating", self.log_path, position)
                    break
            body = chunk[local + CRC_START : local + batch_size]
            if records._crc32c(body) != fields[H_CRC]:
                log.warning("%s: bad CRC at %d; truncating", self.log_path, position)
                break
            base = fields[H_BASE_OFFSET]
            if base < expected_min:
                log.warning("%s: offset %d goes backwards at %d; truncating", self.log_path, base, position)
                break
            max_timestamp = fields[H_MAX_TIMESTAMP]
            if first_timestamp is None:
                first_timestamp = max_timestamp
            if max_timestamp > self.max_timestamp:
                self.max_timestamp = max_timestamp
                self.offset_of_max_timestamp = base
            if self.bytes_since_index_entry >= interval:
                self.offset_index.append(base, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_index_entry = 0
            self.bytes_since_index_entry += batch_size
            self.next_offset = expected_min = base + fields[H_LAST_OFFSET_DELTA] + 1
            if on_batch is not None:
                on_batch(base, fields[H_LEADER_EPOCH])
            position += batch_size
            good_end = position
        truncated = self.size - good_end
        if truncated:
            os.ftruncate(self.fd, good_end)
            self.size = good_end
            self.unflushed = True
        self.rolling_timestamp_ms = first_timestamp
        self.offset_index.write_pending()
        self.time_index.write_pending()
        return truncated
