"""Inter-broker frame codec (DESIGN.md section 4), sans-I/O.

A frame is `u32 length | msgpack header map | raw payload bytes`. Record batches travel as
the raw payload, never re-packed inside msgpack, so a replica fetch response is a small
header plus bytes read straight from the segment files. The header says where each
partition's bytes are (offsets and lengths into the payload).
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from kafkalite.gc_pause import BULK_FRAME_BYTES_MIN, gc_paused

_LEN = struct.Struct(">I")

# The largest frame either side reads (the length prefix aside); a bigger one closes the
# connection, so whatever is sent must fit, answers included.
RPC_FRAME_BYTES_MAX = 256 * 1024 * 1024
# A replica fetch answer is a header listing its partitions, then their record bytes: at
# most the follower's max_bytes, which the leader clamps to
# REPLICA_FETCH_RESPONSE_BYTES_MAX, plus one batch (a first batch is served whole even past
# the budget, so a follower never stalls behind a batch bigger than its max), and a batch
# is at most message.max.bytes <= RECORD_BATCH_BYTES_MAX. What is left of the frame, 64
# MiB, is the header's (~60 bytes plus the topic name per partition).
REPLICA_FETCH_RESPONSE_BYTES_MAX = 128 * 1024 * 1024
RECORD_BATCH_BYTES_MAX = 64 * 1024 * 1024
assert REPLICA_FETCH_RESPONSE_BYTES_MAX + RECORD_BATCH_BYTES_MAX < RPC_FRAME_BYTES_MAX


class MalformedFrameError(Exception):
    """A frame that cannot be decoded; the connection that sent it is closed."""


def encode_frame(header: dict[str, Any], payload: bytes | bytearray | memoryview = b"") -> list[bytes]:
    """Return the frame as chunks (length prefix + header, then payload) for writelines()."""
    head = msgpack.packb(header, use_bin_type=True)
    prefix = _LEN.pack(len(head) + len(payload)) + head
    if payload:
        return [prefix, bytes(payload) if isinstance(payload, memoryview) else payload]
    return [prefix]


def decode_frame(frame: bytes) -> tuple[dict[str, Any], memoryview]:
    """Split a frame body (without its length prefix) into header map and payload view."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(frame) + 1)
    unpacker.feed(frame)
    try:
        if len(frame) >= BULK_FRAME_BYTES_MIN:
            with gc_paused():  # a LeaderAndIsr or UpdateMetadata of many partitions
                header = unpacker.unpack()
        else:
            header = unpacker.unpack()
    except (msgpack.OutOfData, msgpack.ExtraData, ValueError, TypeError, msgpack.FormatError, msgpack.StackError) as e:
        raise MalformedFrameError(f"bad msgpack header: {e}") from None
    if not isinstance(header, dict):
        raise MalformedFrameError(f"header is a {type(header).__name__}, expected a map")
    return header, memoryview(frame)[unpacker.tell() :]

