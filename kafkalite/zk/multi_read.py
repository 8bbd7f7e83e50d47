"""ZooKeeper's multiRead (ZooKeeper 3.6+, opcode 22): many getData in one request.

A new controller reads every partition state znode. One kazoo `get_async` per znode costs
about as much Python work on each side of kazoo's connection thread as the read itself, so
100,000 partitions took tens of seconds on two cores. multiRead carries up to thousands of
reads in one request and one reply; unlike `multi` it is not a transaction: each read
answers on its own, a missing znode with its own error result.

kazoo (2.x) has no multiRead, so this module gives it the request type it sends as-is
(`KazooClient._call` takes any object with `type`, `serialize` and `deserialize`). A server
older than 3.6 answers it with an error; the caller then reads one znode at a time
(ZkAdapter.get_many).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import MultiHeader, multiheader_struct, stat_struct, write_string
from kazoo.protocol.states import ZnodeStat

MULTI_READ_OPCODE = 22
GET_DATA_OPCODE = 4
ERROR_RESULT_OPCODE = -1
_INT = struct.Struct("!i")
# Per read in a reply beyond its data: multi header (9), data length (4), stat (68).
REPLY_OVERHEAD_BYTES = 9 + 4 + stat_struct.size

# One read's answer: (data, stat), or None for a znode that does not exist.
ReadResult = tuple[bytes, ZnodeStat] | None


class MultiRead:
    """The request: getData of each path (already chrooted), no watches."""

    type = MULTI_READ_OPCODE

    def __init__(self, paths: Sequence[str]) -> None:
        assert paths, "a multiRead of nothing"
        self.paths = list(paths)

    def serialize(self) -> bytes:
        b = bytearray()
        header = MultiHeader(GET_DATA_OPCODE, False, -1).serialize()
        for path in self.paths:
            b += header
            b += write_string(path)
            b.append(0)  # no watch
        b += multiheader_struct.pack(-1, True, -1)
        return bytes(b)

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[ReadResult | Exception]:
        """Per read, in order: (data, stat), None (no such znode) or the read's exception."""
        results: list[ReadResult | Exception] = []
        unpack_header = multiheader_struct.unpack_from
        unpack_int = _INT.unpack_from
        unpack_stat = stat_struct.unpack_from
        make_stat = ZnodeStat._make
        while True:
            kind, done, _err = unpack_header(buffer, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if kind == GET_DATA_OPCODE:
                (length,) = unpack_int(buffer, offset)
                offset += 4
                data = b"" if length < 0 else bytes(buffer[offset: offset + length])
                offset += max(length, 0)
                results.append((data, make_stat(unpack_stat(buffer, offset))))
                offset += stat_struct.size
            elif kind == ERROR_RESULT_OPCODE:
                (code,) = unpack_int(buffer, offset)
                offset += 4
                error = EXCEPTIONS[code]()
                results.append(None if isinstance(error, NoNodeError) else error)
            else:
                raise ValueError(f"unexpected result type {kind} in a multiRead reply")

    @property
    def watcher(self) -> None:  # read by kazoo after the reply: no watch to register
        return None
