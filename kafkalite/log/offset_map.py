"""The cleaner's offset map: key -> offset of the key's latest record in the dirty section,
bounded in memory (Kafka's SkimpyOffsetMap, sized by log.cleaner.dedupe.buffer.size).

Kafka's map is an open-addressing array of 16-byte MD5 digests and 8-byte offsets. Ours is
a Python dict, which costs more per entry: a key of up to 15 bytes is stored as itself, a
longer one as its 16-byte BLAKE2b digest (lengths keep the two kinds apart, so a short key
never equals a digest); with the int offset and the dict's own slots that measured 111-171
bytes per entry (the top just after the dict doubles). `ENTRY_BYTES_MAX` is that worst
case rounded up, so a map of `for_buffer(n)` never holds more than n bytes
(tests/unit/log/test_offset_map.py measures it). A full map refuses new keys; the cleaner
then stops mapping there and cleans up to that offset, and the next pass goes on (multiple
passes when the dirty section has more keys than the map holds).
"""

from __future__ import annotations

import hashlib

ENTRY_BYTES_MAX = 176
RAW_KEY_BYTES_MAX = 15


def map_key(key: bytes) -> bytes:
    """The map's key for a record key: itself when short, else a 128-bit digest."""
    if len(key) <= RAW_KEY_BYTES_MAX:
        return key
    return hashlib.blake2b(key, digest_size=16).digest()


class OffsetMap:
    def __init__(self, entries_max: int) -> None:
        assert entries_max >= 1, "a map that holds nothing never lets a cleaning make progress"
        self.entries_max = entries_max
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the largest offset put so far

    @classmethod
    def for_buffer(cls, buffer_bytes: int) -> OffsetMap:
        """A map that stays within `buffer_bytes` (log.cleaner.dedupe.buffer.size / threads)."""
        return cls(max(1, buffer_bytes // ENTRY_BYTES_MAX))

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def full(self) -> bool:
        return len(self._offsets) >= self.entries_max

    def put(self, key: bytes, offset: int) -> bool:
        """Record `offset` as the latest of `key` (offsets must come in increasing order).
        Returns False, changing nothing, when the key is new and the map is full."""
        assert offset > self.latest_offset, "the map is filled in offset order"
        slot = map_key(key)
        offsets = self._offsets
        if slot not in offsets and len(offsets) >= self.entries_max:
            return False
        offsets[slot] = offset
        self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(map_key(key))

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1
