"""Keys and values of the records in `__consumer_offsets` (DESIGN.md section 10, issue 10).

Byte for byte Kafka's layouts, so Kafka's own tools (and anyone reading the topic) can decode
what we write, and we can load what a Kafka broker wrote. Each key and value starts with an
int16 version, then the fields of that version of the message definition in Kafka's
`group-coordinator/src/main/resources/common/message/*.json`, encoded as in the classic
(non-flexible) protocol: big-endian integers, int16-length UTF-8 strings (-1 for null),
int32-length bytes, int32-count arrays.

| key version | key | value versions |
|---|---|---|
| 0, 1 | OffsetCommitKey (group, topic, partition) | OffsetCommitValue 0-3 (null: the offset is deleted) |
| 2 | GroupMetadataKey (group) | GroupMetadataValue 0-3 (null: the group is deleted) |

OffsetCommitValue: v0 offset, metadata, commit timestamp; v1 adds the expire timestamp (the
retention an OffsetCommit v2-v4 asked for); v2 drops it again; v3 adds the leader epoch
(KIP-320) after the offset. GroupMetadataValue: v0 protocol type, generation, protocol,
leader, members {member id, client id, client host, session timeout, subscription,
assignment}; v1 adds each member's rebalance timeout; v2 the group's current state
timestamp; v3 each member's group.instance.id (KIP-345).

What we write is what Kafka 2.3+ writes: OffsetCommitKey v1, GroupMetadataKey v2,
OffsetCommitValue v3 (v1 when the commit carries an expire timestamp),
GroupMetadataValue v3. The flexible v4 values (Kafka 3.5+, KIP-915) are refused like any
unknown version: OffsetsRecordError, which a loader logs and skips.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafkalite.core.codes import OffsetsRecordError

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSIONS = (0, 1, 2, 3)
GROUP_METADATA_VALUE_VERSIONS = (0, 1, 2, 3)

NO_TIMESTAMP = -1  # Kafka's DEFAULT_TIMESTAMP / "no current state timestamp"
NO_LEADER_EPOCH = -1  # RecordBatch.NO_PARTITION_LEADER_EPOCH

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


# ------------------------------------------------------------------ the messages


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


OffsetsKey = OffsetCommitKey | GroupMetadataKey


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp_ms: int
    leader_epoch: int = NO_LEADER_EPOCH  # v3+
    expire_timestamp_ms: int = NO_TIMESTAMP  # v1 only


@dataclass(frozen=True)
class MemberMetadataValue:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # v1+; a v0 value reads back the session timeout (as Kafka does)
    subscription: bytes  # the member's metadata for the group's protocol
    assignment: bytes
    group_instance_id: str | None = None  # v3+


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[MemberMetadataValue, ...]
    current_state_timestamp_ms: int = NO_TIMESTAMP  # v2+


@dataclass(frozen=True)
class OffsetsRecord:
    """One decoded record: a key and its value, or None for a tombstone."""

    key: OffsetsKey
    value: OffsetCommitValue | GroupMetadataValue | None


# ------------------------------------------------------------------ writing


class _Writer:
    def __init__(self, version: int) -> None:
        self.out = bytearray(_INT16.pack(version))

    def int16(self, v: int) -> None:
        self.out += _INT16.pack(v)

    def int32(self, v: int) -> None:
        self.out += _INT32.pack(v)

    def int64(self, v: int) -> None:
        self.out += _INT64.pack(v)

    def string(self, v: str | None, *, nullable: bool = False) -> None:
        if v is None:
            assert nullable, "null in a non-nullable string field"
            self.int16(-1)
            return
        data = v.encode("utf-8")
        assert len(data) <= 0x7FFF, "string longer than an int16 length allows"
        self.int16(len(data))
        self.out += data

    def bytes_(self, v: bytes) -> None:
        self.int32(len(v))
        self.out += v


def encode_key(key: OffsetsKey, version: int | None = None) -> bytes:
    if isinstance(key, OffsetCommitKey):
        version = OFFSET_COMMIT_KEY_VERSIONS[-1] if version is None else version
        assert version in OFFSET_COMMIT_KEY_VERSIONS, version
        w = _Writer(version)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
        return bytes(w.out)
    version = GROUP_METADATA_KEY_VERSION if version is None else version
    assert version == GROUP_METADATA_KEY_VERSION, version
    w = _Writer(version)
    w.string(key.group)
    return bytes(w.out)


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """Kafka's choice (GroupMetadataManager.offsetCommitValue, IBP 2.1+): v1 when the commit
    carries an expire timestamp (the only version with that field), else v3."""
    return 1 if value.expire_timestamp_ms != NO_TIMESTAMP else 3


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    version = offset_commit_value_version(value) if version is None else version
    assert version in OFFSET_COMMIT_VALUE_VERSIONS, version
    w = _Writer(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp_ms)
    if version == 1:
        w.int64(value.expire_timestamp_ms)
    return bytes(w.out)


def encode_group_metadata_value(value: GroupMetadataValue, version: int = 3) -> bytes:
    assert version in GROUP_METADATA_VALUE_VERSIONS, version
    w = _Writer(version)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol, nullable=True)
    w.string(value.leader, nullable=True)
    if version >= 2:
        w.int64(value.current_state_timestamp_ms)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id, nullable=True)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return bytes(w.out)


def encode_value(value: OffsetCommitValue | GroupMetadataValue | None) -> bytes | None:
    """The value bytes in the version we write; None stays None (a tombstone)."""
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        return encode_offset_commit_value(value)
    return encode_group_metadata_value(value)


def encode_record(record: OffsetsRecord) -> tuple[bytes, bytes | None]:
    """(key, value) bytes of a record, ready for a RecordBatch."""
    assert record.value is None or isinstance(record.value, OffsetCommitValue) == isinstance(record.key, OffsetCommitKey), \
        "an offset key needs an offset value, a group key a group value"
    return encode_key(record.key), encode_value(record.value)


# ------------------------------------------------------------------ reading


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise OffsetsRecordError(f"{self.what}: {len(self.data)} bytes end before field at {self.pos} (+{n})")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _INT64.unpack(self._take(8))[0]

    def string(self, *, nullable: bool = False) -> str | None:
        n = self.int16()
        if n == -1 and nullable:
            return None
        if n < 0:
            raise OffsetsRecordError(f"{self.what}: string length {n} at {self.pos - 2}")
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise OffsetsRecordError(f"{self.what}: string is not UTF-8 ({e})") from None

    def required_string(self) -> str:
        s = self.string()
        assert s is not None
        return s

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0:
            raise OffsetsRecordError(f"{self.what}: bytes length {n} at {self.pos - 4}")
        return bytes(self._take(n))

    def count(self) -> int:
        n = self.int32()
        if n < 0 or n > len(self.data) - self.pos:  # every element takes at least one byte
            raise OffsetsRecordError(f"{self.what}: array count {n} at {self.pos - 4}")
        return n

    def end(self) -> None:
        if self.pos != len(self.data):
            raise OffsetsRecordError(f"{self.what}: {len(self.data) - self.pos} bytes after the last field")


def decode_key(data: bytes) -> OffsetsKey:
    r = _Reader(data, "offsets key")
    version = r.int16()
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        key: OffsetsKey = OffsetCommitKey(r.required_string(), r.required_string(), r.int32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.required_string())
    else:
        raise OffsetsRecordError(f"unknown __consumer_offsets key version {version}")
    r.end()
    return key


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = _Reader(data, "OffsetCommitValue")
    version = r.int16()
    if version not in OFFSET_COMMIT_VALUE_VERSIONS:
        raise OffsetsRecordError(f"unknown OffsetCommitValue version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.required_string()
    commit_timestamp_ms = r.int64()
    expire_timestamp_ms = r.int64() if version == 1 else NO_TIMESTAMP
    r.end()
    return OffsetCommitValue(offset, metadata, commit_timestamp_ms, leader_epoch, expire_timestamp_ms)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data, "GroupMetadataValue")
    version = r.int16()
    if version not in GROUP_METADATA_VALUE_VERSIONS:
        raise OffsetsRecordError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.required_string()
    generation = r.int32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    state_timestamp_ms = r.int64() if version >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(r.count()):
        member_id = r.required_string()
        instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.required_string()
        client_host = r.required_string()
        rebalance_timeout_ms = r.int32() if version >= 1 else None
        session_timeout_ms = r.int32()
        members.append(MemberMetadataValue(
            member_id, client_id, client_host, session_timeout_ms,
            session_timeout_ms if rebalance_timeout_ms is None else rebalance_timeout_ms,
            r.bytes_(), r.bytes_(), instance_id))
    r.end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, tuple(members), state_timestamp_ms)


def decode_record(key: bytes | None, value: bytes | None) -> OffsetsRecord:
    """A record of `__consumer_offsets`. A null key is refused (Kafka requires one)."""
    if key is None:
        raise OffsetsRecordError("__consumer_offsets record without a key")
    decoded = decode_key(key)
    if value is None:
        return OffsetsRecord(decoded, None)
    if isinstance(decoded, OffsetCommitKey):
        return OffsetsRecord(decoded, decode_offset_commit_value(value))
    return OffsetsRecord(decoded, decode_group_metadata_value(value))
