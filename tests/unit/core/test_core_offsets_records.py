"""`__consumer_offsets` record codecs: Kafka's byte layouts, round trips, refusals; the
coordinator partition of a group; the consumer protocol's subscribed topics."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.core.codes import OffsetsRecordError
from kafkalite.core.consumer_protocol import encode_subscription, subscribed_topics
from kafkalite.core.group_messages import java_string_hash, kafka_abs, partition_for
from kafkalite.core.offsets_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecord,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    decode_record,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    encode_record,
)


def s16(text: str | None) -> bytes:
    """Kafka's classic STRING / NULLABLE_STRING, written independently of the codec."""
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


# ------------------------------------------------------------------ known layouts


def test_offset_commit_key_layout_is_version_group_topic_partition():
    expected = bytes.fromhex("0001" "0002" "6731" "0006" "6f7264657273" "00000007")
    assert encode_key(OffsetCommitKey("g1", "orders", 7)) == expected
    assert decode_key(expected) == OffsetCommitKey("g1", "orders", 7)
    v0 = bytes.fromhex("0000" "0002" "6731" "0006" "6f7264657273" "00000007")
    assert encode_key(OffsetCommitKey("g1", "orders", 7), version=0) == v0
    assert decode_key(v0) == OffsetCommitKey("g1", "orders", 7)


def test_group_metadata_key_layout_is_version_2_and_group():
    expected = bytes.fromhex("0002" "0005" "6d792d6731")
    assert encode_key(GroupMetadataKey("my-g1")) == expected
    assert decode_key(expected) == GroupMetadataKey("my-g1")


def test_offset_commit_value_v3_layout():
    value = OffsetCommitValue(offset=1234, metadata="m", commit_timestamp_ms=1_600_000_000_000, leader_epoch=5)
    expected = (struct.pack(">hqi", 3, 1234, 5) + s16("m") + struct.pack(">q", 1_600_000_000_000))
    assert encode_offset_commit_value(value) == expected  # v3 is what we write
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_v1_layout_carries_the_expire_timestamp():
    value = OffsetCommitValue(offset=9, metadata="", commit_timestamp_ms=100, expire_timestamp_ms=200)
    expected = struct.pack(">hq", 1, 9) + s16("") + struct.pack(">qq", 100, 200)
    assert encode_offset_commit_value(value) == expected  # an expire timestamp forces v1
    assert decode_offset_commit_value(expected) == value


@pytest.mark.parametrize("version", [0, 2])
def test_offset_commit_value_v0_and_v2_layout(version):
    data = struct.pack(">hq", version, 77) + s16("meta") + struct.pack(">q", 5)
    assert decode_offset_commit_value(data) == OffsetCommitValue(77, "meta", 5)
    assert encode_offset_commit_value(OffsetCommitValue(77, "meta", 5), version=version) == data


def _member_bytes(version: int, m: MemberMetadataValue) -> bytes:
    out = s16(m.member_id)
    if version >= 3:
        out += s16(m.group_instance_id)
    out += s16(m.client_id) + s16(m.client_host)
    if version >= 1:
        out += struct.pack(">i", m.rebalance_timeout_ms)
    return out + struct.pack(">i", m.session_timeout_ms) + b32(m.subscription) + b32(m.assignment)


MEMBER = MemberMetadataValue("consumer-1-abc", "consumer-1", "/10.0.0.1", 10_000, 45_000, b"\x00\x01sub", b"\x00\x02as",
                             "instance-a")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_group_metadata_value_layout_per_version(version):
    value = GroupMetadataValue("consumer", 4, "range", "consumer-1-abc", (MEMBER,), 1_700_000_000_000)
    expected = struct.pack(">h", version) + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("consumer-1-abc")
    if version >= 2:
        expected += struct.pack(">q", 1_700_000_000_000)
    expected += struct.pack(">i", 1) + _member_bytes(version, MEMBER)
    assert encode_group_metadata_value(value, version) == expected
    decoded = decode_group_metadata_value(expected)
    assert decoded.members[0].member_id == "consumer-1-abc"
    assert decoded.members[0].group_instance_id == ("instance-a" if version >= 3 else None)
    # Kafka reads a v0 member's rebalance timeout as its session timeout.
    assert decoded.members[0].rebalance_timeout_ms == (45_000 if version >= 1 else 10_000)
    assert decoded.current_state_timestamp_ms == (1_700_000_000_000 if version >= 2 else -1)


def test_empty_group_value_has_null_protocol_and_leader():
    value = GroupMetadataValue("consumer", 3, None, None, (), 5)
    expected = struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 3) + s16(None) + s16(None) + struct.pack(">qi", 5, 0)
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_tombstones_decode_to_a_key_without_value():
    assert decode_record(encode_key(GroupMetadataKey("g")), None) == OffsetsRecord(GroupMetadataKey("g"), None)
    record = OffsetsRecord(OffsetCommitKey("g", "t", 0), None)
    assert encode_record(record) == (encode_key(OffsetCommitKey("g", "t", 0)), None)


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("data", [
    b"",  # no version
    b"\x00\x05\x00\x01g",  # key version 5 is unknown
    bytes.fromhex("0001" "0002" "6731"),  # offset key cut after the group
    bytes.fromhex("0002" "0005" "6d792d6731" "00"),  # a byte after the last field
    bytes.fromhex("0002" "0003" "ff"),  # the string runs past the end
    bytes.fromhex("0002" "fffe"),  # a negative string length
    bytes.fromhex("0002" "0002" "c328"),  # not UTF-8
])
def test_unreadable_keys_are_a_typed_error(data):
    with pytest.raises(OffsetsRecordError):
        decode_key(data)


def test_unknown_value_versions_and_flexible_v4_are_refused():
    with pytest.raises(OffsetsRecordError, match="version 4"):
        decode_offset_commit_value(struct.pack(">hq", 4, 1) + b"\x01\x00" + struct.pack(">q", 1) + b"\x00")
    with pytest.raises(OffsetsRecordError, match="version 4"):
        decode_group_metadata_value(struct.pack(">h", 4) + b"\x09consumer")
    with pytest.raises(OffsetsRecordError):
        decode_group_metadata_value(struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 1) + s16(None) + s16(None)
                                    + struct.pack(">qi", 0, 1_000_000))  # a member count beyond the data
    with pytest.raises(OffsetsRecordError):
        decode_record(None, b"")


# ------------------------------------------------------------------ round trips

text = st.text(max_size=20)
ints32 = st.integers(-(2**31), 2**31 - 1)
ints64 = st.integers(-(2**63), 2**63 - 1)
members = st.builds(MemberMetadataValue, text, text, text, ints32, ints32, st.binary(max_size=30), st.binary(max_size=30),
                    st.none() | text)


@given(st.builds(OffsetCommitKey, text, text, ints32), st.sampled_from([0, 1]))
def test_offset_commit_key_round_trip(key, version):
    assert decode_key(encode_key(key, version)) == key


@given(st.builds(GroupMetadataKey, text))
def test_group_metadata_key_round_trip(key):
    assert decode_key(encode_key(key)) == key


@given(ints64, text, ints64, ints32, ints64, st.sampled_from([0, 1, 2, 3]))
def test_offset_commit_value_round_trip_keeps_what_the_version_holds(offset, metadata, commit, epoch, expire, version):
    value = OffsetCommitValue(offset, metadata, commit, epoch if version >= 3 else -1, expire if version == 1 else -1)
    assert decode_offset_commit_value(encode_offset_commit_value(value, version)) == value


@given(text, ints32, st.none() | text, st.none() | text, st.lists(members, max_size=4), ints64, st.sampled_from([0, 1, 2, 3]))
def test_group_metadata_value_round_trip_keeps_what_the_version_holds(ptype, gen, protocol, leader, ms, ts, version):
    fitted = tuple(m.__class__(m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                               m.rebalance_timeout_ms if version >= 1 else m.session_timeout_ms,
                               m.subscription, m.assignment, m.group_instance_id if version >= 3 else None) for m in ms)
    value = GroupMetadataValue(ptype, gen, protocol, leader, fitted, ts if version >= 2 else -1)
    assert decode_group_metadata_value(encode_group_metadata_value(value, version)) == value


@given(st.one_of(
    st.builds(OffsetsRecord, st.builds(OffsetCommitKey, text, text, ints32),
              st.none() | st.builds(OffsetCommitValue, ints64, text, ints64, ints32)),
    st.builds(OffsetsRecord, st.builds(GroupMetadataKey, text),
              st.none() | st.builds(GroupMetadataValue, text, ints32, st.none() | text, st.none() | text,
                                    st.lists(members, max_size=3).map(tuple), ints64)),
))
def test_records_round_trip_in_the_versions_we_write(record):
    assert decode_record(*encode_record(record)) == record


@given(st.binary(max_size=40))
def test_arbitrary_bytes_decode_or_raise_the_typed_error(data):
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        try:
            decode(data)
        except OffsetsRecordError:
            pass


# ------------------------------------------------------------------ coordinator partition


def test_java_string_hash_matches_java():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two code units
    assert java_string_hash("polygenelubricants") == -(2**31)
    # Printed by String.hashCode() on OpenJDK (java H.java), with Kafka's Utils.abs(h) % 50:
    java = {"my-group": (-1906497762, 12), "console-consumer-12345": (158455506, 6), "\U0001f600": (1772899, 49),
            "polygenelubricants": (-2147483648, 0), "groupé": (-1237460406, 6)}
    for group, (h, partition) in java.items():
        assert java_string_hash(group) == h
        assert partition_for(group, 50) == partition


def _java_hash_reference(s: str) -> int:
    h = 0
    for unit in [ord(c) for c in s]:  # BMP only
        h = (h * 31 + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


@given(st.text(alphabet=st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",)), max_size=30))
def test_java_string_hash_of_bmp_text(s):
    assert java_string_hash(s) == _java_hash_reference(s)


def test_utils_abs_maps_min_value_to_zero_so_the_partition_is_zero():
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5
    assert partition_for("polygenelubricants", 50) == 0  # Math.abs would give a negative partition
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("console-consumer-12345", 50) == abs(_java_hash_reference("console-consumer-12345")) % 50


@given(st.text(max_size=30), st.integers(1, 200))
def test_partition_for_is_in_range(group, n):
    assert 0 <= partition_for(group, n) < n


# ------------------------------------------------------------------ consumer protocol


def test_subscribed_topics_reads_the_v0_prefix_of_any_version():
    assert subscribed_topics(encode_subscription(["a", "b"], b"ud")) == {"a", "b"}
    v1 = struct.pack(">hi", 1, 1) + s16("x") + struct.pack(">i", -1) + struct.pack(">i", 0)  # + owned partitions
    assert subscribed_topics(v1) == {"x"}
    assert subscribed_topics(b"\x00") is None
    assert subscribed_topics(struct.pack(">hi", 0, 3) + s16("only-one")) is None
