"""Records of a RecordBatch v2 seen one by one, and batches rebuilt from the ones kept
(Kafka's MemoryRecords.filterTo, for the log cleaner). Pure functions of bytes.

A rebuilt batch keeps its base offset, last offset delta, partition leader epoch and
producer id/epoch/base sequence, so offsets (and the producer's last sequence, which is
base sequence + last offset delta) survive compaction; only the record count, the records
and the CRC change. Kept records are copied as they are, byte for byte, except when the
batch's base timestamp moves (a delete horizon set or cleared): their timestamp deltas are
then re-encoded so every record keeps its absolute timestamp. The batch is compressed again
with its own codec.
"""

from __future__ import annotations

from typing import NamedTuple

from kafkalite.log import records
from kafkalite.log.errors import CorruptRecordError
from kafkalite.log.records import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CRC_START,
    DELETE_HORIZON_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_SEQUENCE,
    H_BASE_TIMESTAMP,
    H_LAST_OFFSET_DELTA,
    H_LEADER_EPOCH,
    H_MAX_TIMESTAMP,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    write_varint,
)


class RecordSpan(NamedTuple):
    start: int  # position of the record's length varint in the (decompressed) records
    end: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    is_tombstone: bool


def _varint(data, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def record_data(batch: bytes) -> bytes:
    """The batch's records, decompressed."""
    fields = HEADER_STRUCT.unpack_from(batch)
    return records.decompress(fields[H_ATTRIBUTES] & COMPRESSION_MASK, bytes(batch[BATCH_HEADER_SIZE:]))


def record_spans(data: bytes, record_count: int) -> list[RecordSpan]:
    """Where each record lies in `data` (decompressed records), with what the cleaner
    decides from: offset delta, timestamp delta, key, and whether the value is null.
    Values and headers are skipped, not copied. Raises CorruptRecordError."""
    spans = []
    pos = 0
    end_of_data = len(data)
    try:
        for _ in range(record_count):
            length, body = _varint(data, pos)
            end = body + length
            if length < 0 or end > end_of_data:
                raise CorruptRecordError(f"record of length {length} runs past its batch")
            p = body + 1  # attributes
            timestamp_delta, p = _varint(data, p)
            offset_delta, p = _varint(data, p)
            key_length, p = _varint(data, p)
            if key_length >= 0:
                key = bytes(data[p : p + key_length])
                p += key_length
            else:
                key = None
            value_length, p = _varint(data, p)
            if p > end:
                raise CorruptRecordError("record fields run past its length")
            spans.append(RecordSpan(pos, end, offset_delta, timestamp_delta, key, value_length < 0))
            pos = end
    except IndexError:
        raise CorruptRecordError("records end inside a record") from None
    if pos != end_of_data:
        raise CorruptRecordError(f"{end_of_data - pos} bytes after the last record of the batch")
    return spans


def offset_deltas_in_order(spans: list[RecordSpan], last_offset_delta: int) -> bool:
    """Whether the records' offset deltas increase strictly from 0 or more up to at most
    the batch's last offset delta. The producer writes 0..count-1; a cleaned batch has gaps
    but stays in order. Records out of order would give one offset two records, or put a
    record's offset inside another batch, and the cleaner's offset map is filled in offset
    order."""
    previous = -1
    for span in spans:
        if span.offset_delta <= previous:
            return False
        previous = span.offset_delta
    return previous <= last_offset_delta


def has_record_without_key(batch: bytes, record_count: int) -> bool:
    """Whether a batch holds a record with a null key (Produce to a compacted topic refuses
    it with INVALID_RECORD, as Kafka's LogValidator does). Raises CorruptRecordError."""
    return any(span.key is None for span in record_spans(record_data(batch), record_count))


def delete_horizon_ms(fields: tuple) -> int | None:
    """The batch's delete horizon (KIP-534), or None."""
    return fields[H_BASE_TIMESTAMP] if fields[H_ATTRIBUTES] & DELETE_HORIZON_MASK else None


def _retimestamp(data: bytes, span: RecordSpan, new_delta: int) -> bytes:
    """The record at `span` with its timestamp delta replaced."""
    _, body = _varint(data, span.start)
    _, after_timestamp = _varint(data, body + 1)
    inner = bytearray(data[body : body + 1])
    write_varint(inner, new_delta)
    inner += data[after_timestamp : span.end]
    out = bytearray()
    write_varint(out, len(inner))
    out += inner
    return bytes(out)


def rebuild_batch(fields: tuple, data: bytes, kept: list[RecordSpan], horizon_ms: int | None) -> bytes:
    """The batch whose header is `fields` holding only the `kept` records of `data` (at
    least one), stamped with delete horizon `horizon_ms` (None: no horizon)."""
    assert kept
    attributes = fields[H_ATTRIBUTES] & ~DELETE_HORIZON_MASK
    old_base_timestamp = fields[H_BASE_TIMESTAMP]
    if horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        base_timestamp = horizon_ms
    elif fields[H_ATTRIBUTES] & DELETE_HORIZON_MASK:
        base_timestamp = old_base_timestamp + kept[0].timestamp_delta  # the first record's own timestamp
    else:
        base_timestamp = old_base_timestamp
    shift = old_base_timestamp - base_timestamp
    if shift == 0:
        payload = b"".join(data[s.start : s.end] for s in kept)
    else:
        payload = b"".join(_retimestamp(data, s, s.timestamp_delta + shift) for s in kept)
    if fields[H_ATTRIBUTES] & TIMESTAMP_TYPE_MASK:
        max_timestamp = fields[H_MAX_TIMESTAMP]  # LogAppendTime: the batch's time is every record's
    else:
        max_timestamp = old_base_timestamp + max(s.timestamp_delta for s in kept)
    payload = records.compress(attributes & COMPRESSION_MASK, payload)
    return _assemble(fields, attributes, base_timestamp, max_timestamp, len(kept), payload)


def empty_batch(fields: tuple) -> bytes:
    """The batch's header alone: no records, uncompressed, same offsets, timestamps and
    producer fields (Kafka's DefaultRecordBatch.writeEmptyHeader)."""
    attributes = fields[H_ATTRIBUTES] & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    max_timestamp = fields[H_MAX_TIMESTAMP]
    return _assemble(fields, attributes, max_timestamp, max_timestamp, 0, b"")


def _assemble(fields: tuple, attributes: int, base_timestamp: int, max_timestamp: int, record_count: int, payload: bytes) -> bytes:
    buf = bytearray(BATCH_HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        buf, 0, fields[H_BASE_OFFSET], BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload), fields[H_LEADER_EPOCH], MAGIC, 0,
        attributes, fields[H_LAST_OFFSET_DELTA], base_timestamp, max_timestamp, fields[H_PRODUCER_ID],
        fields[H_PRODUCER_EPOCH], fields[H_BASE_SEQUENCE], record_count,
    )
    buf += payload
    crc = records._crc32c(bytes(buf[CRC_START:]))
    buf[17:21] = crc.to_bytes(4, "big")
    return bytes(buf)

