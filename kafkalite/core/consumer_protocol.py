"""The consumer protocol's subscription, as far as the group coordinator reads it.

Members of a group with protocol type "consumer" send a ConsumerProtocolSubscription as
their protocol metadata: int16 version, then (every version starts this way) an int32-count
array of int16-length topic names, then fields we do not need. Kafka's coordinator reads
only that v0 prefix (GroupMetadata.computeSubscribedTopics) to know which topics a group
consumes: their offsets do not expire while the group is Stable, and OffsetDelete refuses
them (GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

import struct

CONSUMER_PROTOCOL_TYPE = "consumer"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def subscribed_topics(subscription: bytes) -> frozenset[str] | None:
    """The topics of one member's subscription; None when the bytes do not parse (Kafka
    then assumes the group may consume any topic)."""
    try:
        pos = 2  # the version: every version is read as its v0 prefix
        (count,) = _INT32.unpack_from(subscription, pos)
        pos += 4
        if count < 0 or count > len(subscription):
            return None
        topics = []
        for _ in range(count):
            (n,) = _INT16.unpack_from(subscription, pos)
            pos += 2
            if n < 0 or pos + n > len(subscription):
                return None
            topics.append(subscription[pos:pos + n].decode("utf-8"))
            pos += n
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """A v0 ConsumerProtocolSubscription (for tests and tools)."""
    out = bytearray(_INT16.pack(0))
    out += _INT32.pack(len(topics))
    for t in topics:
        data = t.encode("utf-8")
        out += _INT16.pack(len(data)) + data
    if user_data is None:
        out += _INT32.pack(-1)
    else:
        out += _INT32.pack(len(user_data)) + user_data
    return bytes(out)
