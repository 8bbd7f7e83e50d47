"""Compile the schema table into per-(message, version) encoder and decoder closures.

Done once at import so the hot path (Produce and Fetch) never looks the schema up: a struct
becomes a list of steps, and runs of fixed-size fields become one precompiled ``struct``
format (a Fetch partition header is a single ``unpack_from``).

Decoders read from an immutable ``bytes`` frame and a position and bound every length
against the bytes that remain before using it, so a hostile length never drives an
allocation. They raise ``InvalidRequestError`` themselves for bad lengths; the caller turns
the residual ``struct.error`` / ``IndexError`` / ``UnicodeDecodeError`` of a truncated frame
into the same error. Encoders append chunks to a list that the caller joins once; records
(bytes-like, or a list of bytes-like chunks) are appended as they are, never copied here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kafkalite.protocol.errors import InvalidRequestError
from kafkalite.protocol.schema import Field

Decoder = Callable[[bytes, int], tuple[Any, int]]
Encoder = Callable[[Any, list], None]

_FIXED_FORMATS = {"bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q"}
_FIXED_SIZES = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8}

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")

# Bounds that no legitimate frame reaches (the frame limit bounds them anyway).
_VARINT_BYTES_MAX = 5


def malformed(reason: str) -> InvalidRequestError:
    return InvalidRequestError(f"malformed frame: {reason}")


# -- variable-length integers (flexible versions only) ------------------------------------

def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    for _ in range(_VARINT_BYTES_MAX):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise malformed("unsigned varint longer than 5 bytes")


def write_uvarint(value: int) -> bytes:
    assert 0 <= value < 1 << 32, value
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(data: bytes, pos: int) -> int:
    """Skip a tag buffer: we understand no tagged field, so every one is ignored."""
    count, pos = read_uvarint(data, pos)
    if count > len(data) - pos:
        raise malformed("tagged field count exceeds frame")
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        if size > len(data) - pos:
            raise malformed("tagged field size exceeds frame")
        pos += size
    return pos


EMPTY_TAG_BUFFER = b"\x00"


# -- length prefixes: classic (int16/int32, -1 = null) or compact (uvarint N+1, 0 = null) --

def _length_reader(width: int, compact: bool) -> Callable[[bytes, int], tuple[int, int]]:
    """Returns a reader giving (length, pos) with -1 meaning null."""
    if compact:
        def read_compact(data: bytes, pos: int) -> tuple[int, int]:
            value, pos = read_uvarint(data, pos)
            return value - 1, pos
        return read_compact
    fmt = INT16 if width == 2 else INT32
    unpack = fmt.unpack_from
    size = fmt.size

    def read_classic(data: bytes, pos: int) -> tuple[int, int]:
        return unpack(data, pos)[0], pos + size
    return read_classic


def _length_writer(width: int, compact: bool) -> Callable[[int], bytes]:
    if compact:
        return lambda n: write_uvarint(n + 1)
    return (INT16 if width == 2 else INT32).pack


# -- primitives ----------------------------------------------------------------------------

def _string_decoder(nullable: bool, compact: bool) -> Decoder:
    read_length = _length_reader(2, compact)

    def decode_string(data: bytes, pos: int) -> tuple[str | None, int]:
        n, pos = read_length(data, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise malformed(f"string length {n}")
        if n > 0x7FFF:  # a compact length can say more; Kafka refuses it as every string is int16-sized
            raise malformed(f"string length {n} exceeds {0x7FFF}")
        end = pos + n
        if end > len(data):
            raise malformed("string runs past the frame")
        return data[pos:end].decode("utf-8"), end
    return decode_string


def _bytes_decoder(nullable: bool, compact: bool) -> Decoder:
    read_length = _length_reader(4, compact)

    def decode_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
        n, pos = read_length(data, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise malformed(f"bytes length {n}")
        end = pos + n
        if end > len(data):
            raise malformed("bytes run past the frame")
        return data[pos:end], end
    return decode_bytes


def _string_encoder(name: str, nullable: bool, compact: bool) -> Encoder:
    write_length = _length_writer(2, compact)

    def encode_string(value: str | None, parts: list) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"{name}: null for a non-nullable string")
            parts.append(write_length(-1))
            return
        raw = value.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise ValueError(f"{name}: string of {len(raw)} bytes exceeds int16")
        parts.append(write_length(len(raw)))
        parts.append(raw)
    return encode_string


def _bytes_encoder(name: str, nullable: bool, compact: bool) -> Encoder:
    write_length = _length_writer(4, compact)

    def encode_bytes(value: Any, parts: list) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"{name}: null for non-nullable bytes")
            parts.append(write_length(-1))
        elif isinstance(value, (list, tuple)):
            # Records handed over as chunks (e.g. slices of several segment reads).
            parts.append(write_length(sum(len(chunk) for chunk in value)))
            parts.extend(value)
        else:
            parts.append(write_length(len(value)))
            parts.append(value)
    return encode_bytes


def _fixed_decoder(type_name: str) -> Decoder:
    fmt = struct.Struct(">" + _FIXED_FORMATS[type_name])
    unpack = fmt.unpack_from
    size = fmt.size
    return lambda data, pos: (unpack(data, pos)[0], pos + size)


def _fixed_encoder(type_name: str) -> Encoder:
    pack = struct.Struct(">" + _FIXED_FORMATS[type_name]).pack
    return lambda value, parts: parts.append(pack(value))


def _primitive_decoder(type_name: str, nullable: bool, compact: bool) -> Decoder:
    if type_name in _FIXED_FORMATS:
        return _fixed_decoder(type_name)
    if type_name == "string":
        return _string_decoder(nullable, compact)
    return _bytes_decoder(nullable, compact)


def _primitive_encoder(name: str, type_name: str, nullable: bool, compact: bool) -> Encoder:
    if type_name in _FIXED_FORMATS:
        return _fixed_encoder(type_name)
    if type_name == "string":
        return _string_encoder(name, nullable, compact)
    return _bytes_encoder(name, nullable, compact)


def min_wire_size(field: Field, version: int, flexible: bool) -> int:
    """The fewest bytes one value of this field can take (bounds array counts)."""
    if field.is_array:
        return 1 if flexible else 4
    if field.type in _FIXED_SIZES:
        return _FIXED_SIZES[field.type]
    if flexible:
        return 1
    return 2 if field.type == "string" else 4


def _struct_min_size(fields: tuple[Field, ...], version: int, flexible: bool) -> int:
    size = sum(min_wire_size(f, version, flexible) for f in fields if f.present_in(version))
    return size + (1 if flexible else 0)


# -- arrays --------------------------------------------------------------------------------

def _array_decoder(field: Field, element: Decoder, element_min_size: int, nullable: bool,
                   compact: bool) -> Decoder:
    read_length = _length_reader(4, compact)
    element_min_size = max(element_min_size, 1)
    name = field.name

    def decode_array(data: bytes, pos: int) -> tuple[list | None, int]:
        n, pos = read_length(data, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise malformed(f"{name}: array length {n}")
        if n * element_min_size > len(data) - pos:
            raise malformed(f"{name}: {n} elements cannot fit in the frame")
        items = []
        append = items.append
        for _ in range(n):
            item, pos = element(data, pos)
            append(item)
        return items, pos
    return decode_array


def _array_encoder(field: Field, element: Encoder, nullable: bool, compact: bool) -> Encoder:
    write_length = _length_writer(4, compact)
    name = field.name

    def encode_array(value: list | None, parts: list) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"{name}: null for a non-nullable array")
            parts.append(write_length(-1))
            return
        parts.append(write_length(len(value)))
        for item in value:
            element(item, parts)
    return encode_array


# -- structs -------------------------------------------------------------------------------

def _fixed_runs(fields: list[Field]) -> list[list[Field]]:
    """Group consecutive fixed-size fields so each run is one struct (un)pack."""
    runs: list[list[Field]] = []
    for field in fields:
        fixed = field.type in _FIXED_FORMATS
        if fixed and runs and runs[-1][0].type in _FIXED_FORMATS:
            runs[-1].append(field)
        else:
            runs.append([field])
    return runs


def compile_struct_decoder(fields: tuple[Field, ...], version: int, flexible: bool) -> Decoder:
    present = [f for f in fields if f.present_in(version)]
    absent = tuple(f for f in fields if not f.present_in(version))
    steps: list[Callable[[bytes, int, dict], int]] = []
    for run in _fixed_runs(present):
        if run[0].type in _FIXED_FORMATS:
            steps.append(_fixed_run_decode_step(run))
        else:
            steps.append(_field_decode_step(run[0], version, flexible))

    def decode_struct(data: bytes, pos: int) -> tuple[dict, int]:
        out: dict = {}
        for step in steps:
            pos = step(data, pos, out)
        for field in absent:
            out[field.name] = field.default_value()
        if flexible:
            pos = skip_tagged_fields(data, pos)
        return out, pos
    return decode_struct


def _fixed_run_decode_step(run: list[Field]) -> Callable[[bytes, int, dict], int]:
    fmt = struct.Struct(">" + "".join(_FIXED_FORMATS[f.type] for f in run))
    unpack = fmt.unpack_from
    size = fmt.size
    names = tuple(f.name for f in run)

    def decode_fixed_run(data: bytes, pos: int, out: dict) -> int:
        out.update(zip(names, unpack(data, pos)))
        return pos + size
    return decode_fixed_run


def _field_decode_step(field: Field, version: int,
                       flexible: bool) -> Callable[[bytes, int, dict], int]:
    decode = compile_field_decoder(field, version, flexible)
    name = field.name

    def decode_field(data: bytes, pos: int, out: dict) -> int:
        out[name], pos = decode(data, pos)
        return pos
    return decode_field


def compile_field_decoder(field: Field, version: int, flexible: bool) -> Decoder:
    nullable = field.nullable_in(version)
    if not field.is_array:
        return _primitive_decoder(field.type, nullable, flexible)
    if field.element_type:
        element = _primitive_decoder(field.element_type, False, flexible)
        element_min = _FIXED_SIZES.get(field.element_type, 1 if flexible else 2)
    else:
        element = compile_struct_decoder(field.fields, version, flexible)
        element_min = _struct_min_size(field.fields, version, flexible)
    return _array_decoder(field, element, element_min, nullable, flexible)


def compile_struct_encoder(fields: tuple[Field, ...], version: int, flexible: bool) -> Encoder:
    present = [f for f in fields if f.present_in(version)]
    steps: list[Callable[[dict, list], None]] = []
    for run in _fixed_runs(present):
        if run[0].type in _FIXED_FORMATS:
            steps.append(_fixed_run_encode_step(run))
        else:
            steps.append(_field_encode_step(run[0], version, flexible))

    def encode_struct(body: dict, parts: list) -> None:
        for step in steps:
            step(body, parts)
        if flexible:
            parts.append(EMPTY_TAG_BUFFER)
    return encode_struct


def _fixed_run_encode_step(run: list[Field]) -> Callable[[dict, list], None]:
    pack = struct.Struct(">" + "".join(_FIXED_FORMATS[f.type] for f in run)).pack
    pairs = tuple((f.name, f.default_value()) for f in run)

    def encode_fixed_run(body: dict, parts: list) -> None:
        get = body.get
        parts.append(pack(*[get(name, default) for name, default in pairs]))
    return encode_fixed_run


def _field_encode_step(field: Field, version: int, flexible: bool) -> Callable[[dict, list], None]:
    encode = compile_field_encoder(field, version, flexible)
    name = field.name
    default_value = field.default_value
    missing = object()

    def encode_field(body: dict, parts: list) -> None:
        value = body.get(name, missing)
        encode(default_value() if value is missing else value, parts)
    return encode_field


def compile_field_encoder(field: Field, version: int, flexible: bool) -> Encoder:
    nullable = field.nullable_in(version)
    if not field.is_array:
        return _primitive_encoder(field.name, field.type, nullable, flexible)
    if field.element_type:
        element = _primitive_encoder(field.name, field.element_type, False, flexible)
    else:
        element = compile_struct_encoder(field.fields, version, flexible)
    return _array_encoder(field, element, nullable, flexible)
