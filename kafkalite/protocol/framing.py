"""Length-prefixed framing (int32 size, then the frame), sans-I/O.

``feed`` whatever the socket returned, then call ``next_frame`` until it returns None.
Bytes are kept in one bytearray with a read offset; consumed bytes are dropped only when
they are at least half the buffer, so many small frames cost amortised O(1) each and one
huge frame is copied once into the buffer and once out of it.
"""

from __future__ import annotations

import struct

from kafkalite.protocol.errors import FrameTooLargeError

_LENGTH = struct.Struct(">i")


class FrameDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        assert max_frame_bytes > 0, max_frame_bytes
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._offset = 0  # bytes of _buffer already consumed

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buffer) - self._offset

    def next_frame(self) -> bytes | None:
        """The next complete frame without its length prefix, or None if incomplete.

        Raises FrameTooLargeError for a negative size or one above ``max_frame_bytes``;
        the stream cannot be resynchronised after that, so the caller closes it.
        """
        buffer = self._buffer
        start = self._offset
        if len(buffer) - start < _LENGTH.size:
            return None
        (size,) = _LENGTH.unpack_from(buffer, start)
        if size < 0 or size > self.max_frame_bytes:
            raise FrameTooLargeError(size, self.max_frame_bytes)
        begin = start + _LENGTH.size
        end = begin + size
        if len(buffer) < end:
            return None
        with memoryview(buffer) as view:  # one copy, not slice-then-bytes
            frame = bytes(view[begin:end])
        self._offset = end
        self._compact()
        return frame

    def _compact(self) -> None:
        if self._offset == len(self._buffer):
            self._buffer.clear()
            self._offset = 0
        elif self._offset >= len(self._buffer) // 2:
            del self._buffer[: self._offset]
            self._offset = 0
