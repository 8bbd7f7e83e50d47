"""The consumer protocol's subscription and assignment, as far as kafkalite reads them.

Members of a group with protocol type "consumer" send a ConsumerProtocolSubscription as
their protocol metadata: int16 version, then (every version starts this way) an int32-count
array of int16-length topic names, then fields we do not need. Kafka's coordinator reads
only that v0 prefix (GroupMetadata.computeSubscribedTopics) to know which topics a group
consumes: their offsets do not expire while the group is Stable, and OffsetDelete refuses
them (GROUP_SUBSCRIBED_TO_TOPIC). The leader's ConsumerProtocolAssignment for each member
is opaque to the coordinator; `kafkalite groups describe` decodes it to show who reads what.
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


def decode_assignment(assignment: bytes) -> tuple[tuple[str, int], ...] | None:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment, sorted: int16 version,
    then (every version starts this way) an int32-count array of (int16-length topic name,
    int32-count array of int32 partitions), then user data we do not need. Empty bytes (a
    member between generations, or a group that is not Stable in DescribeGroups) is no
    assignment; bytes that do not parse give None (not the consumer protocol)."""
    if not assignment:
        return ()
    try:
        pos = 2
        (count,) = _INT32.unpack_from(assignment, pos)
        pos += 4
        if count < 0 or count > len(assignment):
            return None
        out = []
        for _ in range(count):
            (n,) = _INT16.unpack_from(assignment, pos)
            pos += 2
            if n < 0 or pos + n > len(assignment):
                return None
            topic = assignment[pos:pos + n].decode("utf-8")
            pos += n
            (partitions,) = _INT32.unpack_from(assignment, pos)
            pos += 4
            if partitions < 0 or pos + 4 * partitions > len(assignment):
                return None
            out.extend((topic, p) for p in struct.unpack_from(f">{partitions}i", assignment, pos))
            pos += 4 * partitions
        return tuple(sorted(out))
    except (struct.error, UnicodeDecodeError):
        return None


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    """A v0 ConsumerProtocolAssignment (for tests and tools)."""
    out = bytearray(_INT16.pack(0))
    out += _INT32.pack(len(partitions))
    for topic, ps in partitions.items():
        data = topic.encode("utf-8")
        out += _INT16.pack(len(data)) + data + _INT32.pack(len(ps))
        out += struct.pack(f">{len(ps)}i", *ps)
    if user_data is None:
        out += _INT32.pack(-1)
    else:
        out += _INT32.pack(len(user_data)) + user_data
    return bytes(out)
