"""Disk faults made real (issue 14), for bin/chaos and tests/faults: a filesystem filled to
the last byte, and a bit flipped inside a stored record batch."""

from __future__ import annotations

import random
import struct
from pathlib import Path

BATCH_HEADER = 61  # bytes of a RecordBatch v2 header; the CRC covers everything after byte 21


def fill(directory: str | Path, name: str = "filler") -> Path:
    """Write zeros into `directory/name` until its filesystem is full; the file's path."""
    path = Path(directory) / name
    # Unbuffered: with a buffer, the bytes a full disk refused stay in it and closing the
    # file tries again, raising ENOSPC out of here (it stopped a 10-minute bin/chaos run).
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
        except OSError:
            pass
    return path


def batches(data: bytes) -> list[tuple[int, int, int]]:
    """(position, base offset, batch length) of every whole batch in a segment's bytes."""
    out, pos = [], 0
    while pos + BATCH_HEADER <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if length < BATCH_HEADER - 12 or pos + 12 + length > len(data):
            break
        out.append((pos, base, length))
        pos += 12 + length
    return out


def flip_bit(segment: str | Path, rng: random.Random | None = None) -> int | None:
    """Flip one bit in the records of a batch of a segment file (bytes its CRC covers): a
    random batch with `rng`, else the middle one. That batch's base offset, or None if the
    file holds no whole batch."""
    path = Path(segment)
    data = bytearray(path.read_bytes())
    found = batches(bytes(data))
    if not found:
        return None
    pos, base, length = rng.choice(found) if rng is not None else found[len(found) // 2]
    records = length - (BATCH_HEADER - 12)
    at = pos + BATCH_HEADER + (rng.randrange(max(1, records)) if rng is not None else min(3, max(records - 1, 0)))
    data[at] ^= 1 << (rng.randrange(8) if rng is not None else 4)
    path.write_bytes(bytes(data))
    return base
