"""Sparse per-segment indexes: .index (offset -> file position) and .timeindex
(timestamp -> offset). DESIGN.md section 3, "Segments".

On disk both are flat arrays of fixed-size big-endian entries, relative to the segment's
base offset as in Kafka: .index entries are (int32 relative offset, int32 position) and
.timeindex entries are (int64 timestamp, int32 relative offset). Unlike Kafka they are not
preallocated memory maps: the whole index lives in two Python lists (searched with bisect)
and new entries are buffered and written in blocks, so the append path makes no index
syscall. An index is only a hint: the batches are the truth, a suspicious index is rebuilt
from its segment and never trusted (see `load`).

Entries point at batch starts. An offset index entry (o, p) means "the batch starting at
file position p has base offset o". A time index entry (t, o) means "t is the largest
timestamp in the segment up to and including the batch with base offset o, and that batch
is where t first appeared", so every batch before o has a max timestamp below t.
"""

from __future__ import annotations

import bisect
import os
import struct

_PENDING_WRITE_BYTES = 8192


class _Index:
    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys: list[int] = []
        self.values: list[int] = []
        self._persisted = 0  # entries already written to the file
        self._pending = bytearray()

    # ------------------------------------------------------------------ file handling

    # Index files are opened only for the moment they are written: entries live in memory
    # and are written in blocks, so a broker with 10,000 partitions holds one descriptor per
    # segment (the .log) instead of three, and stays under the process's RLIMIT_NOFILE.
    def _write_at(self, data: bytes, position: int, *, truncate_to: int | None = None, sync: bool = False) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if truncate_to is not None:
                os.ftruncate(fd, truncate_to)
            if data:
                os.pwrite(fd, data, position)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def reset(self) -> None:
        """Empty the index in memory and on disk."""
        self.keys.clear()
        self.values.clear()
        self._pending.clear()
        self._persisted = 0
        self._write_at(b"", 0, truncate_to=0)

    def read_entries(self) -> list[tuple[int, int]] | None:
        """Decode the file's entries (absolute offsets), or None if the file's size is not a
        whole number of entries."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        if len(data) % self.ENTRY.size:
            return None
        return [self._decode(*e) for e in self.ENTRY.iter_unpack(data)]

    def install(self, entries: list[tuple[int, int]]) -> None:
        """Adopt entries read by `read_entries` and already checked by the segment."""
        self.keys = [k for k, _ in entries]
        self.values = [v for _, v in entries]
        self._persisted = len(entries)
        self._pending.clear()

    def write_pending(self, *, sync: bool = False) -> None:
        if self._pending or sync:
            self._write_at(bytes(self._pending), self._persisted * self.ENTRY.size, sync=sync)
            self._persisted += len(self._pending) // self.ENTRY.size
            self._pending.clear()

    def flush(self) -> None:
        """Write buffered entries and fsync."""
        self.write_pending(sync=True)

    def close(self) -> None:
        self.write_pending()

    # ------------------------------------------------------------------ entries

    def __len__(self) -> int:
        return len(self.keys)

    def _add(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        self._pending += self._encode(key, value)
        if len(self._pending) >= _PENDING_WRITE_BYTES:
            self.write_pending()

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries."""
        if count >= len(self.keys):
            return
        self.write_pending()
        del self.keys[count:], self.values[count:]
        self._persisted = count
        self._write_at(b"", 0, truncate_to=count * self.ENTRY.size)

    def floor(self, key: int) -> int:
        """Index of the last entry with key <= `key`, or -1."""
        return bisect.bisect_right(self.keys, key) - 1


class OffsetIndex(_Index):
    ENTRY = struct.Struct(">ii")

    def _encode(self, offset: int, position: int) -> bytes:
        return self.ENTRY.pack(offset - self.base_offset, position)

    def _decode(self, relative: int, position: int) -> tuple[int, int]:
        return relative + self.base_offset, position

    def append(self, offset: int, position: int) -> None:
        assert not self.keys or offset > self.keys[-1]
        assert not self.values or position > self.values[-1]
        self._add(offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below `offset`; (base, 0) if none."""
        i = self.floor(offset)
        if i < 0:
            return self.base_offset, 0
        return self.keys[i], self.values[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or above `offset`."""
        self.truncate_entries(bisect.bisect_left(self.keys, offset))

    @staticmethod
    def entries_sane(entries: list[tuple[int, int]], base_offset: int, segment_size: int) -> bool:
        previous_offset, previous_position = base_offset - 1, -1
        for offset, position in entries:
            if offset <= previous_offset or position <= previous_position or position >= segment_size:
                return False
            previous_offset, previous_position = offset, position
        return True


class TimeIndex(_Index):
    ENTRY = struct.Struct(">qi")

    def _encode(self, timestamp: int, offset: int) -> bytes:
        return self.ENTRY.pack(timestamp, offset - self.base_offset)

    def _decode(self, timestamp: int, relative: int) -> tuple[int, int]:
        return timestamp, relative + self.base_offset

    @property
    def last_timestamp(self) -> int:
        return self.keys[-1] if self.keys else -1

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) if it raises the largest timestamp; returns whether it did."""
        if timestamp <= self.last_timestamp:
            return False
        assert not self.values or offset > self.values[-1]
        self._add(timestamp, offset)
        return True

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry with timestamp <= `timestamp`; the base offset if none.
        Every batch before that offset has a max timestamp below `timestamp`."""
        i = self.floor(timestamp)
        return self.values[i] if i >= 0 else self.base_offset

    def truncate_to_offset(self, offset: int) -> None:
        count = len(self.values)
        while count > 0 and self.values[count - 1] >= offset:
            count -= 1
        self.truncate_entries(count)

    @staticmethod
    def entries_sane(entries: list[tuple[int, int]], base_offset: int) -> bool:
        previous_timestamp, previous_offset = -1, base_offset - 1
        for timestamp, offset in entries:
            if timestamp <= previous_timestamp or offset <= previous_offset:
                return False
            previous_timestamp, previous_offset = timestamp, offset
        return True
