"""Reading one length-prefixed Kafka frame off a client connection (shared by the request
loop and the SASL gate in front of it)."""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

log = logging.getLogger(__name__)

_LEN = struct.Struct(">i")


async def read_frame(reader: asyncio.StreamReader, peer: Any, frame_bytes_max: int,
                     limit_name: str = "socket.request.max.bytes") -> bytes | None:
    """One frame's bytes; None when the connection ended or the frame is too big (logged:
    the caller closes the connection)."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError:
        return None
    (size,) = _LEN.unpack(head)
    if size < 0 or size > frame_bytes_max:
        log.warning("closing %s: request frame of %d bytes exceeds %s=%d", peer, size, limit_name, frame_bytes_max)
        return None
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        log.info("closing %s: connection ended inside a frame", peer)
        return None


def frame(data: bytes) -> bytes:
    """`data` with its length prefix (SASL v0 raw tokens travel this way)."""
    return _LEN.pack(len(data)) + data
