"""Apache Kafka RecordBatch v2 (magic 2) codec. DESIGN.md section 3, "Batch format".

Layout of a batch (big-endian), offsets in bytes from the batch start:

    0  base_offset            int64   \\  not covered by the CRC: the leader rewrites them
    8  batch_length           int32    | (assign offsets, stamp its epoch) without
    12 partition_leader_epoch int32   /  re-encoding or re-checksumming the batch
    16 magic                  int8
    17 crc                    uint32  CRC-32C of bytes [21, 12 + batch_length)
    21 attributes             int16   bits 0-2 compression, 3 timestamp type,
                                      4 transactional, 5 control, 6 delete horizon
                                      (KIP-534: base_timestamp holds it)
    23 last_offset_delta      int32
    27 base_timestamp         int64
    35 max_timestamp          int64
    43 producer_id            int64
    51 producer_epoch         int16
    53 base_sequence          int32
    57 record_count           int32
    61 records...  (compressed as one block when attributes & 7 != 0)

The CRC is always computed with google_crc32c's C extension. Its API takes only `bytes`,
so the hot path slices the CRC region out once and reuses that `bytes` object to write
the batch (see `scan_batches` and `check_one_client_batch`), which keeps the append path at
one copy.
"""

from __future__ import annotations

import gzip
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from google_crc32c import cext as _crc32c_cext

from kafkalite.log.errors import CorruptBatchError, CorruptRecordError, InvalidRecordError

# Never fall back to the pure-Python CRC: it is ~1000x slower and would sit on the hot path.
_crc32c = _crc32c_cext.value

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = 61
assert HEADER_STRUCT.size == BATCH_HEADER_SIZE
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes before batch_length's span begins
RECORD_BATCH_OVERHEAD = BATCH_HEADER_SIZE
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
CRC_START = 21
MAGIC = 2
PREFIX_STRUCT = struct.Struct(">qiibI")  # the 21 bytes before the CRC region
_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # set by the log cleaner only (kafkalite.log.batch_filter)

NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1

# Raw header tuple indexes (HEADER_STRUCT.unpack_from order), used on hot paths that do not
# want to pay for building a BatchHeader.
H_BASE_OFFSET, H_BATCH_LENGTH, H_LEADER_EPOCH, H_MAGIC, H_CRC, H_ATTRIBUTES = range(6)
H_LAST_OFFSET_DELTA, H_BASE_TIMESTAMP, H_MAX_TIMESTAMP, H_PRODUCER_ID = range(6, 10)
H_PRODUCER_EPOCH, H_BASE_SEQUENCE, H_RECORD_COUNT = range(10, 13)


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3


@dataclass(frozen=True)
class Record:
    offset: int  # absolute
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


# ---------------------------------------------------------------------------- varints


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    """Append a zigzag varint (Kafka's varint and varlong share this encoding)."""
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Return (value, new position). Raises CorruptRecordError on a torn or over-long varint."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptRecordError("record ends inside a varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptRecordError("record field runs past the end of the batch")
    return bytes(buf[pos:end]), end


# ---------------------------------------------------------------------------- compression


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        return lz4.frame.compress(data)
    if codec == COMPRESSION_SNAPPY:
        # Java clients write xerial-framed snappy; so do we.
        import snappy

        out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        for i in range(0, len(data), 32 * 1024):
            block = snappy.compress(data[i : i + 32 * 1024])
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    raise InvalidRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == COMPRESSION_NONE:
            return data
        if codec == COMPRESSION_GZIP:
            return gzip.decompress(data)
        if codec == COMPRESSION_ZSTD:
            import zstandard

            # Producers stream zstd frames without a content size, so use a decompressobj.
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
        if codec == COMPRESSION_LZ4:
            import lz4.frame

            return lz4.frame.decompress(data)
        if codec == COMPRESSION_SNAPPY:
            import snappy

            if data[:8] != _XERIAL_MAGIC:
                return snappy.decompress(data)
            out = bytearray()
            pos = 16
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out += snappy.decompress(data[pos : pos + n])
                pos += n
            return bytes(out)
    except CorruptRecordError:
        raise
    except Exception as e:  # the libraries raise assorted types for bad input
        raise CorruptRecordError(f"cannot decompress codec {codec} batch: {e}") from e
    raise InvalidRecordError(f"unknown compression codec {codec}")


# ---------------------------------------------------------------------------- encode


def _encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key, value, headers) -> None:
    body = bytearray(b"\x00")  # attributes: unused, always 0
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, key)
    _write_bytes(body, value)
    write_varint(body, len(headers))
    for hkey, hvalue in headers:
        _write_bytes(body, hkey.encode("utf-8"))
        _write_bytes(body, hvalue)
    write_varint(out, len(body))
    out += body


def encode_batch(
    records: Sequence[tuple] | Sequence[Record],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = COMPRESSION_NONE,
    timestamps: Sequence[int] | None = None,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
) -> bytes:
    """Encode one RecordBatch v2.

    `records` holds (key, value, headers) tuples (offset delta = index) or Records (offset
    delta = record.offset - base_offset, timestamp = record.timestamp). Timestamps come from
    `timestamps`, else the Records, else `base_timestamp`, else the wall clock (the only
    place this module reads the clock: producers and tools, never the broker core).
    """
    assert len(records) > 0, "a batch holds at least one record"
    if records and isinstance(records[0], Record):
        deltas = [r.offset - base_offset for r in records]
        ts = list(timestamps) if timestamps is not None else [r.timestamp for r in records]
        triples = [(r.key, r.value, r.headers) for r in records]
    else:
        deltas = list(range(len(records)))
        if timestamps is not None:
            ts = list(timestamps)
        else:
            t = base_timestamp if base_timestamp is not None else int(time.time() * 1000)
            ts = [t] * len(records)
        triples = [tuple(r) if len(r) == 3 else (r[0], r[1], ()) for r in records]
    assert len(ts) == len(triples)
    assert all(d >= 0 for d in deltas)
    first_ts = base_timestamp if base_timestamp is not None else ts[0]
    body = bytearray()
    for delta, t, (key, value, headers) in zip(deltas, ts, triples):
        _encode_record(body, delta, t - first_ts, key, value, tuple(headers or ()))
    payload = compress(compression, bytes(body))
    attributes = compression & COMPRESSION_MASK
    attributes |= TIMESTAMP_TYPE_MASK if timestamp_type else 0
    attributes |= TRANSACTIONAL_MASK if is_transactional else 0
    attributes |= CONTROL_MASK if is_control else 0
    buf = bytearray(BATCH_HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        buf, 0, base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload), partition_leader_epoch,
        MAGIC, 0, attributes, max(deltas), first_ts, max(ts), producer_id, producer_epoch,
        base_sequence, len(triples),
    )
    buf += payload
    struct.pack_into(">I", buf, 17, _crc32c(bytes(buf[CRC_START:])))
    return bytes(buf)


# ---------------------------------------------------------------------------- decode


def decode_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at `pos` (no CRC check). Raises CorruptRecordError if short or not magic 2."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"torn batch header at position {pos}: {len(buf) - pos} bytes left")
    fields = HEADER_STRUCT.unpack_from(buf, pos)
    if fields[H_MAGIC] != MAGIC:
        raise CorruptRecordError(f"batch at position {pos} has magic {fields[H_MAGIC]}, expected 2")
    return BatchHeader(*fields)


def header_from_fields(fields: tuple) -> BatchHeader:
    return BatchHeader(*fields)


def check_header_fields(fields: tuple, pos: int) -> None:
    """Checks on a header alone (not its bounds or CRC). Raises CorruptRecordError."""
    length = fields[H_BATCH_LENGTH]
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at position {pos} has length {length} < {MIN_BATCH_LENGTH}")
    if fields[H_MAGIC] != MAGIC:
        raise CorruptRecordError(f"batch at position {pos} has magic {fields[H_MAGIC]}, expected 2")
    if fields[H_LAST_OFFSET_DELTA] < 0 or fields[H_RECORD_COUNT] < 0 or fields[H_BASE_OFFSET] < 0:
        raise CorruptRecordError(f"batch at position {pos} has a negative offset, offset delta or record count")


def check_batch_at(buf, pos: int) -> tuple:
    """Check the framing of the batch at `pos` (length, magic, bounds within `buf`) and
    return its raw header fields. Raises CorruptRecordError. Does not check the CRC."""
    remaining = len(buf) - pos
    if remaining < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"torn batch header at position {pos}: {remaining} bytes left")
    fields = HEADER_STRUCT.unpack_from(buf, pos)
    check_header_fields(fields, pos)
    if fields[H_BATCH_LENGTH] + LOG_OVERHEAD > remaining:
        raise CorruptRecordError(
            f"torn batch at position {pos}: length {fields[H_BATCH_LENGTH] + LOG_OVERHEAD} > {remaining} bytes left"
        )
    return fields


def _crc_mismatch(pos: int, fields: tuple) -> CorruptRecordError:
    return CorruptRecordError(f"batch at position {pos} (base offset {fields[H_BASE_OFFSET]}) fails its CRC-32C check")


def scan_batches(buf) -> list[tuple[int, tuple, bytes]]:
    """Validate every batch in `buf` (framing and CRC) and return (pos, raw header fields,
    CRC-region bytes) for each. The CRC-region bytes are [pos+21, pos+size): the append path
    writes them after a re-stamped 21-byte prefix, so the single copy the CRC API forces is
    also the copy that gets written."""
    out = []
    pos = 0
    end = len(buf)
    view = buf if isinstance(buf, bytes) else memoryview(buf)
    while pos < end:
        fields = check_batch_at(buf, pos)
        size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        body = view[pos + CRC_START : pos + size]
        if not isinstance(body, bytes):
            body = bytes(body)
        if _crc32c(body) != fields[H_CRC]:
            raise _crc_mismatch(pos, fields)
        out.append((pos, fields, body))
        pos += size
    return out


def verify_stored_batches(buf: bytes) -> None:
    """Check the CRC of every whole batch in bytes read from a local log before they are
    served (issue 14: a flipped bit below the HW is caught at read, not sent to a consumer
    or a follower). CorruptBatchError names the first bad batch's base offset."""
    pos = 0
    end = len(buf)
    while pos < end:
        try:
            fields = check_batch_at(buf, pos)
        except CorruptRecordError as e:
            base = struct.unpack_from(">q", buf, pos)[0] if pos + 8 <= end else -1
            raise CorruptBatchError(f"stored batch at offset {base}: {e}", base) from None
        size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
        if _crc32c(buf[pos + CRC_START : pos + size]) != fields[H_CRC]:
            raise CorruptBatchError(f"stored batch at offset {fields[0]} fails its CRC-32C check", fields[0])
        pos += size


def check_client_batch(pos: int, fields: tuple) -> None:
    """Rules for batches that come from a producer (Kafka's LogValidator.validateBatch)."""
    count = fields[H_RECORD_COUNT]
    if count < 1:
        raise InvalidRecordError(f"batch at position {pos} has no records")
    if fields[H_LAST_OFFSET_DELTA] != count - 1:
        raise InvalidRecordError(
            f"batch at position {pos} has {count} records but last offset delta {fields[H_LAST_OFFSET_DELTA]}"
        )
    if fields[H_ATTRIBUTES] & CONTROL_MASK:
        raise InvalidRecordError(f"batch at position {pos}: clients may not write control batches")
    if fields[H_ATTRIBUTES] & DELETE_HORIZON_MASK:
        # The cleaner removes a tombstone once its batch's horizon has passed; a horizon
        # the client set would remove its tombstones at the first cleaning, with none of
        # delete.retention.ms for consumers to see them. Kafka's broker keeps the bit as sent
        # (unless it rebuilds the batch); Kafka's producer never sets it, so refusing it
        # breaks no well-behaved client.
        raise InvalidRecordError(f"batch at position {pos}: clients may not set the delete horizon flag (attribute bit 6)")


class CheckedBatch(NamedTuple):
    """One client batch that passed check_one_client_batch: its raw header fields and its
    CRC-covered bytes [21:], the copy the CRC check made, which the log writes."""

    fields: tuple
    body: bytes


def check_one_client_batch(buf) -> CheckedBatch | None:
    """validate_batches for the common case in a few Python calls (a produce request's
    partition carries one batch): `buf` as a CheckedBatch when it is a `bytes` object holding
    exactly one whole batch, after the same checks (framing, CRC, the client rules; the
    precise checkers run only to raise the right error); None when it is anything else, for
    validate_batches to judge. Raises what validate_batches raises."""
    if type(buf) is not bytes or len(buf) < BATCH_HEADER_SIZE:
        return None
    fields = HEADER_STRUCT.unpack_from(buf)
    if fields[H_BATCH_LENGTH] + LOG_OVERHEAD != len(buf):
        return None
    delta = fields[H_LAST_OFFSET_DELTA]
    bad = (fields[H_BATCH_LENGTH] < MIN_BATCH_LENGTH or fields[H_MAGIC] != MAGIC or delta < 0
           or fields[H_BASE_OFFSET] < 0 or fields[H_RECORD_COUNT] != delta + 1
           or fields[H_ATTRIBUTES] & (CONTROL_MASK | DELETE_HORIZON_MASK))
    if bad:  # in validate_batches' order: the framing, the CRC, then the client rules
        check_header_fields(fields, 0)
    body = buf[CRC_START:]
    if _crc32c(body) != fields[H_CRC]:
        raise _crc_mismatch(0, fields)
    if bad:
        check_client_batch(0, fields)
        raise AssertionError("unreachable: the checkers above raise")
    return CheckedBatch(fields, body)


def validate_batches(buf, *, from_client: bool = True) -> list[tuple[int, BatchHeader]]:
    """(pos, header) for every batch in a buffer of one or more whole batches.

    Raises CorruptRecordError (torn, bad length, bad magic, bad CRC) or, when
    `from_client` (Produce), InvalidRecordError for an empty buffer or a batch whose record
    count does not match its offset span, that is a control batch or that carries a
    delete horizon."""
    if from_client and len(buf) == 0:
        raise InvalidRecordError("no record batches")
    result = []
    for pos, fields, _ in scan_batches(buf):
        if from_client:
            check_client_batch(pos, fields)
        result.append((pos, BatchHeader(*fields)))
    return result


def iter_headers(buf, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Walk whole batches in `buf` by their lengths (framing checked, CRC not)."""
    while pos < len(buf):
        fields = check_batch_at(buf, pos)
        yield pos, BatchHeader(*fields)
        pos += fields[H_BATCH_LENGTH] + LOG_OVERHEAD


def decode_records(buf, pos: int = 0) -> list[Record]:
    """Decode (decompressing if needed) the records of the batch at `pos`."""
    fields = check_batch_at(buf, pos)
    header = BatchHeader(*fields)
    end = pos + header.size_bytes
    payload = bytes(buf[pos + BATCH_HEADER_SIZE : end])
    data = decompress(header.compression, payload)
    log_append_time = header.timestamp_type == 1
    records = []
    p = 0
    for _ in range(header.record_count):
        length, p = read_varint(data, p)
        rec_end = p + length
        if length < 0 or rec_end > len(data):
            raise CorruptRecordError(f"record of length {length} runs past its batch")
        p += 1  # attributes
        ts_delta, p = read_varint(data, p)
        offset_delta, p = read_varint(data, p)
        key, p = _read_bytes(data, p)
        value, p = _read_bytes(data, p)
        n_headers, p = read_varint(data, p)
        if n_headers < 0:
            raise CorruptRecordError("negative header count")
        headers = []
        for _ in range(n_headers):
            hkey, p = _read_bytes(data, p)
            hvalue, p = _read_bytes(data, p)
            if hkey is None:
                raise CorruptRecordError("null header key")
            headers.append((hkey.decode("utf-8", "replace"), hvalue))
        if p != rec_end:
            raise CorruptRecordError(f"record length {length} does not match its contents")
        ts = header.max_timestamp if log_append_time else header.base_timestamp + ts_delta
        records.append(Record(header.base_offset + offset_delta, ts, key, value, tuple(headers)))
    return records


# ---------------------------------------------------------------------------- patching


def set_base_offset(buf: bytearray, pos: int, offset: int) -> None:
    """Rewrite the base offset in place; the CRC does not cover it."""
    _BASE_OFFSET.pack_into(buf, pos, offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Rewrite the partition leader epoch in place; the CRC does not cover it."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)
