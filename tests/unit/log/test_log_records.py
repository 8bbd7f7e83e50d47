"""RecordBatch v2 codec: round trips, interop with kafka-python, validation errors."""

from __future__ import annotations

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kafkalite.log import records
from kafkalite.log.errors import CorruptRecordError, InvalidRecordError
from kafkalite.log.records import (
    BATCH_HEADER_SIZE,
    Record,
    decode_header,
    decode_records,
    encode_batch,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batches,
)

maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3).map(tuple)
record_triples = st.lists(st.tuples(maybe_bytes, maybe_bytes, headers), min_size=1, max_size=8)
codecs = st.sampled_from([0, 1, 2, 3, 4])


@settings(max_examples=60, deadline=None)
@given(record_triples, codecs, st.integers(0, 2**40), st.integers(0, 2**41))
def test_encode_decode_round_trip(triples, codec, base_offset, base_timestamp):
    timestamps = [base_timestamp + i * 7 for i in range(len(triples))]
    buf = encode_batch(triples, base_offset=base_offset, compression=codec, timestamps=timestamps)
    [(pos, header)] = validate_batches(buf)
    assert pos == 0
    assert header.base_offset == base_offset
    assert header.last_offset == base_offset + len(triples) - 1
    assert header.record_count == len(triples)
    assert header.size_bytes == len(buf)
    assert header.compression == codec
    assert header.max_timestamp == timestamps[-1]
    decoded = decode_records(buf)
    assert [(r.key, r.value, r.headers) for r in decoded] == [(k, v, tuple(h)) for k, v, h in triples]
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(triples)))
    assert [r.timestamp for r in decoded] == timestamps


@settings(max_examples=40, deadline=None)
@given(record_triples, st.sampled_from([0, 1, 4]), st.integers(0, 2**40), st.integers(-1, 2**30))
def test_kafka_python_reads_our_batches(triples, codec, base_offset, epoch):
    buf = encode_batch(triples, base_offset=base_offset, compression=codec, base_timestamp=1_000,
                       partition_leader_epoch=epoch)
    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    assert batch.base_offset == base_offset
    assert batch.leader_epoch == epoch
    got = [(r.offset, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]
    assert got == [(base_offset + i, k, v, list(h)) for i, (k, v, h) in enumerate(triples)]


def _kafka_python_batch(triples, codec, base_ts=5_000):
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
    for i, (k, v, h) in enumerate(triples):
        builder.append(i, base_ts + i, k, v, list(h))
    return bytes(builder.build())


@settings(max_examples=40, deadline=None)
@given(record_triples, st.sampled_from([0, 1, 2, 3, 4]))
def test_kafka_python_batches_decode_here(triples, codec):
    buf = _kafka_python_batch(triples, codec)
    [(_, header)] = validate_batches(buf)
    assert header.compression in (codec, 0)  # kafka-python skips compression that does not pay
    decoded = decode_records(buf)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (i, 5_000 + i, k, v, tuple(h)) for i, (k, v, h) in enumerate(triples)
    ]


def test_kafka_python_gzip_with_headers_and_null_keys():
    triples = [(None, b"v0", [("h1", b"a"), ("h2", None)]), (b"k1", None, []), (None, b"v2" * 500, [])]
    buf = _kafka_python_batch(triples, 1)
    assert decode_header(buf).compression == 1
    decoded = decode_records(buf)
    assert decoded[0] == Record(0, 5_000, None, b"v0", (("h1", b"a"), ("h2", None)))
    assert decoded[1].key == b"k1" and decoded[1].value is None
    assert decoded[2].value == b"v2" * 500


def test_records_objects_keep_offsets_and_timestamps():
    recs = [Record(10, 100, b"a", b"1", ()), Record(12, 90, None, b"2", (("x", b"y"),))]
    buf = encode_batch(recs, base_offset=10)
    header = decode_header(buf)
    assert header.last_offset_delta == 2
    assert header.max_timestamp == 100
    assert decode_records(buf) == recs


def test_patching_base_offset_and_epoch_keeps_crc_valid():
    buf = bytearray(encode_batch([(b"k", b"v", ())] * 3, base_timestamp=1))
    set_base_offset(buf, 0, 1234)
    set_partition_leader_epoch(buf, 0, 7)
    [(_, header)] = validate_batches(buf)
    assert header.base_offset == 1234
    assert header.partition_leader_epoch == 7
    assert [r.offset for r in decode_records(buf)] == [1234, 1235, 1236]
    assert DefaultRecordBatch(bytearray(buf)).validate_crc()


def test_several_batches_in_one_buffer():
    a = encode_batch([(None, b"a", ())], base_timestamp=1)
    b = encode_batch([(None, b"b", ())] * 2, base_timestamp=2)
    found = validate_batches(a + b)
    assert [pos for pos, _ in found] == [0, len(a)]


@pytest.mark.parametrize(
    "damage, error",
    [
        (lambda b: b[:-1], CorruptRecordError),  # torn
        (lambda b: b[:30], CorruptRecordError),  # torn header
        (lambda b: b[:16] + b"\x01" + b[17:], CorruptRecordError),  # magic 1
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), CorruptRecordError),  # CRC
        (lambda b: b[:8] + (10).to_bytes(4, "big") + b[12:], CorruptRecordError),  # length < 49
        (lambda b: b"", InvalidRecordError),
    ],
)
def test_validate_rejects_damage(damage, error):
    buf = encode_batch([(b"k", b"value", ())] * 2, base_timestamp=1)
    with pytest.raises(error):
        validate_batches(damage(buf))


def test_validate_rejects_record_count_mismatch_and_control_from_client():
    buf = bytearray(encode_batch([(b"k", b"v", ())] * 2, base_timestamp=1))
    buf[57:61] = (5).to_bytes(4, "big")  # record count, inside the CRC: fix the CRC up
    buf[17:21] = records._crc32c(bytes(buf[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError):
        validate_batches(buf)
    validate_batches(buf, from_client=False)  # a follower accepts what the leader wrote
    control = encode_batch([(b"k", b"v", ())], base_timestamp=1, is_control=True)
    with pytest.raises(InvalidRecordError):
        validate_batches(control)


def test_validate_refuses_a_delete_horizon_from_a_client():
    """Attribute bit 6 is the cleaner's (KIP-534); a follower copies it from its leader."""
    buf = bytearray(encode_batch([(b"k", None, ())], base_timestamp=1))
    buf[21:23] = (int.from_bytes(buf[21:23], "big") | records.DELETE_HORIZON_MASK).to_bytes(2, "big")
    buf[17:21] = records._crc32c(bytes(buf[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError, match="delete horizon"):
        validate_batches(buf)
    validate_batches(buf, from_client=False)


def test_decode_header_errors():
    with pytest.raises(CorruptRecordError):
        decode_header(b"\x00" * (BATCH_HEADER_SIZE - 1))
    with pytest.raises(CorruptRecordError):
        decode_header(b"\x00" * BATCH_HEADER_SIZE)  # magic 0


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(n):
    out = bytearray()
    records.write_varint(out, n)
    assert records.read_varint(bytes(out), 0) == (n, len(out))


# -- check_one_client_batch: validate_batches' verdict on one batch, in fewer calls ------------
def _one_batch(records_n: int, *, producer_id: int = -1) -> bytearray:
    return bytearray(records.encode_batch([(b"k", b"v" * i, ()) for i in range(records_n)], base_timestamp=1_700_000_000_000,
                                          producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                          base_sequence=0 if producer_id >= 0 else -1))


def _with_crc(buf: bytearray) -> bytearray:
    buf[17:21] = records._crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return buf


def _verdict(check, data):
    try:
        return check(data)
    except (CorruptRecordError, InvalidRecordError) as e:
        return type(e), str(e)


# Header fields a client may get wrong: (offset, format, values to try).
_HEADER_EDITS = {
    "base_offset": (0, ">q", [-1, 0, 7]),
    "batch_length": (8, ">i", [10, 48, 49, 10_000]),
    "magic": (16, ">b", [0, 1, 2, 3]),
    "attributes": (21, ">h", [0, records.TRANSACTIONAL_MASK, records.CONTROL_MASK, records.DELETE_HORIZON_MASK, 0x60]),
    "last_offset_delta": (23, ">i", [-1, 0, 1, 2, 4]),
    "record_count": (57, ">i", [-1, 0, 1, 2, 3, 5]),
}


@settings(max_examples=500, deadline=None)
@example(records_n=1, producer_id=-1, edits={"last_offset_delta": 0, "record_count": 1}, crc_recomputed=True, flips=[])  # -1 and 0
@given(records_n=st.integers(1, 4), producer_id=st.sampled_from([-1, 7]),
       edits=st.dictionaries(st.sampled_from(sorted(_HEADER_EDITS)), st.integers(0, 5), max_size=3),
       crc_recomputed=st.booleans(), flips=st.lists(st.tuples(st.integers(21, 200), st.integers(1, 255)), max_size=1))
def test_check_one_client_batch_gives_validate_batches_verdict_and_message(records_n, producer_id, edits, crc_recomputed, flips):
    buf = _one_batch(records_n, producer_id=producer_id)
    for name, choice in edits.items():
        pos, fmt, values = _HEADER_EDITS[name]
        struct.pack_into(fmt, buf, pos, values[choice % len(values)])
    for pos, xor in flips:  # a byte of the CRC-covered part
        if pos < len(buf):
            buf[pos] ^= xor
    if crc_recomputed:  # so that a client rule, not the CRC, is what fails
        _with_crc(buf)
    data = bytes(buf)
    expected = _verdict(records.validate_batches, data)
    got = _verdict(records.check_one_client_batch, data)
    if got is None:  # not one whole batch by its length: left to validate_batches
        assert struct.unpack_from(">i", data, 8)[0] + records.LOG_OVERHEAD != len(data)
    elif isinstance(expected, tuple):
        assert got == expected  # the same error, so the same code, and the same words
    else:
        assert isinstance(got, records.CheckedBatch), got
        assert got.fields == records.HEADER_STRUCT.unpack_from(data) and got.body == data[records.CRC_START:]
        assert [h for _, h in expected] == [records.BatchHeader(*got.fields)]


def test_check_one_client_batch_leaves_what_is_not_one_bytes_batch_to_validate_batches():
    one = bytes(_one_batch(2))
    assert records.check_one_client_batch(one) == (records.HEADER_STRUCT.unpack_from(one), one[21:])
    assert records.check_one_client_batch(one + one) is None  # two batches
    assert records.check_one_client_batch(one + b"\0") is None  # trailing bytes
    assert records.check_one_client_batch(one[:-1]) is None  # torn
    assert records.check_one_client_batch(bytearray(one)) is None  # not bytes
    assert records.check_one_client_batch(memoryview(one)) is None
    assert records.check_one_client_batch(b"") is None
    control = bytearray(one)
    control[22] |= records.CONTROL_MASK
    with pytest.raises(CorruptRecordError, match="CRC"):  # the CRC first, as validate_batches
        records.check_one_client_batch(bytes(control))
    with pytest.raises(InvalidRecordError, match="control"):
        records.check_one_client_batch(bytes(_with_crc(control)))
