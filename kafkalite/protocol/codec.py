"""Sans-I/O codec for the Kafka client protocol: frames in, (header, body dict) out.

A *frame* is what follows the 4-byte length prefix (see ``framing.FrameDecoder``).
Functions that produce bytes for the socket (``encode_response``, ``encode_request``,
``error_response``, ``encode_api_versions_unsupported``) return the whole frame *with* the
prefix.

Body dicts use the snake_case field names of ``schema.SCHEMAS``. A nullable string, bytes,
records or array is ``None`` when null. Decoded bodies hold every field of the message, the
fields absent at that version set to their defaults, so handlers need not branch on version.
When encoding, a missing key takes the field's default and keys for fields absent at that
version are ignored. Records decode to ``bytes``; when encoding they may also be a
``memoryview`` or a list of bytes-like chunks, which are written without copying.

Headers (DESIGN.md 4b): request header v1, or v2 (tag buffer) for flexible versions;
response header v0, or v1 (tag buffer) for flexible versions except ApiVersions (Kafka keeps
ApiVersions responses on header v0 so a client can read them before it knows the broker's
versions). The only other flexible version served is Metadata v9: librdkafka trusts the
leader epochs in Metadata (KIP-320: it ignores an answer older than what it knows, e.g. a
paused zombie's) only from brokers that serve Metadata v9 (issue 13).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafkalite.protocol import compiler
from kafkalite.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaliteError,
    UnsupportedVersionError,
)
from kafkalite.protocol.schema import (
    ERROR_ECHO,
    REQUEST,
    RESPONSE,
    SCHEMAS,
    SELF,
    SUPPORTED_VERSIONS,
    ApiKey,
    Echo,
    Field,
)

__all__ = [
    "ApiKey", "SUPPORTED_VERSIONS", "RequestHeader", "decode_request_header",
    "decode_request", "encode_response", "encode_response_parts",
    "encode_api_versions_unsupported", "encode_request", "decode_response",
    "error_response", "is_supported",
]

_REQUEST_HEADER_FIXED = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
_LENGTH_PREFIX = struct.Struct(">i")

# What a truncated or garbled frame can make the compiled decoders raise besides our own
# typed errors; all of them mean "malformed frame".
_DECODE_FAILURES = (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError)


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True)
class _Compiled:
    decode: compiler.Decoder
    encode: compiler.Encoder
    flexible: bool


def _compile_all() -> dict[tuple[int, str, int], _Compiled]:
    table = {}
    for (api, kind), message in SCHEMAS.items():
        for version in range(message.min_version, message.max_version + 1):
            flexible = message.is_flexible(version)
            table[(int(api), kind, version)] = _Compiled(
                compiler.compile_struct_decoder(message.fields, version, flexible),
                compiler.compile_struct_encoder(message.fields, version, flexible),
                flexible,
            )
    return table


_COMPILED = _compile_all()


def is_supported(api_key: int, api_version: int) -> bool:
    return (api_key, REQUEST, api_version) in _COMPILED


# client_id is a classic nullable string in every request header version (even v2).
_CLIENT_ID = Field("client_id", "string", (1, 1), (1, 1), None, ())
_CLIENT_ID_DECODER = compiler.compile_field_decoder(_CLIENT_ID, 1, False)
_CLIENT_ID_ENCODER = compiler.compile_field_encoder(_CLIENT_ID, 1, False)


# -- requests ------------------------------------------------------------------------------

def _read_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    try:
        api_key, api_version, correlation_id = _REQUEST_HEADER_FIXED.unpack_from(frame, 0)
        client_id, pos = _CLIENT_ID_DECODER(frame, _REQUEST_HEADER_FIXED.size)
    except KafkaliteError:
        raise
    except _DECODE_FAILURES as exc:
        raise compiler.malformed(f"request header: {exc}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def decode_request_header(frame: bytes) -> RequestHeader:
    """The header of any request, even of an API or version we do not serve."""
    return _read_request_header(frame)[0]


def decode_request(frame: bytes) -> tuple[RequestHeader, dict]:
    """Decode one request frame (without its length prefix).

    Raises UnsupportedVersionError (unknown API or version; ``.header`` is set) or
    InvalidRequestError (malformed: truncated, trailing bytes, bad lengths).
    """
    header, pos = _read_request_header(frame)
    compiled = _COMPILED.get((header.api_key, REQUEST, header.api_version))
    if compiled is None:
        exc = UnsupportedVersionError(
            f"api {header.api_key} version {header.api_version} is not supported")
        exc.header = header
        raise exc
    # librdkafka (2.x) writes a Metadata v9 request for all topics with the 4 bytes it
    # reserved for the topic count left in after the 1-byte null: Kafka parses what it needs
    # and ignores the rest, and so do we, for this request only.
    lenient = header.api_key == ApiKey.METADATA and header.api_version >= 9
    return header, _decode_body(compiled, frame, pos, header, compiled.flexible, trailing_ok=lenient)


def _decode_body(compiled: _Compiled, frame: bytes, pos: int, header: Any,
                 header_tags: bool, *, trailing_ok: bool = False) -> dict:
    try:
        if header_tags:  # request header v2 ends with a tag buffer
            pos = compiler.skip_tagged_fields(frame, pos)
        body, pos = compiled.decode(frame, pos)
    except KafkaliteError as exc:
        if isinstance(exc, InvalidRequestError):
            exc.header = header
        raise
    except _DECODE_FAILURES as exc:
        error = compiler.malformed(f"{type(exc).__name__}: {exc}")
        error.header = header
        raise error from None
    if pos != len(frame) and not trailing_ok:
        error = compiler.malformed(f"{len(frame) - pos} trailing bytes")
        error.header = header
        raise error
    return body


def encode_request(api_key: int, api_version: int, correlation_id: int,
                   client_id: str | None, body: dict) -> bytes:
    """A whole request frame with its length prefix (for tests and internal tools)."""
    compiled = _compiled_or_raise(api_key, REQUEST, api_version)
    parts: list = [b"", _REQUEST_HEADER_FIXED.pack(api_key, api_version, correlation_id)]
    _CLIENT_ID_ENCODER(client_id, parts)
    if compiled.flexible:
        parts.append(compiler.EMPTY_TAG_BUFFER)
    compiled.encode(body, parts)
    return _join_with_prefix(parts)


# -- responses -----------------------------------------------------------------------------

def encode_response_parts(header: RequestHeader, body: dict) -> list:
    """The response frame as chunks, length prefix first (for ``writer.writelines``)."""
    compiled = _compiled_or_raise(header.api_key, RESPONSE, header.api_version)
    parts: list = [b"", _INT32.pack(header.correlation_id)]
    if compiled.flexible and header.api_key != ApiKey.API_VERSIONS:
        parts.append(b"\x00")  # response header v1: an empty tag buffer
    compiled.encode(body, parts)
    parts[0] = _LENGTH_PREFIX.pack(sum(len(part) for part in parts))
    return parts


def encode_response(header: RequestHeader, body: dict) -> bytes:
    """The whole response frame, length prefix included; missing fields take defaults."""
    return b"".join(encode_response_parts(header, body))


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, dict]:
    """(correlation id, body) of a response frame without its length prefix."""
    compiled = _compiled_or_raise(api_key, RESPONSE, api_version)
    try:
        (correlation_id,) = _INT32.unpack_from(frame, 0)
    except struct.error:
        raise compiler.malformed("response header truncated") from None
    pos = _INT32.size
    if compiled.flexible and api_key != ApiKey.API_VERSIONS:
        pos = compiler.skip_tagged_fields(frame, pos)
    return correlation_id, _decode_body(compiled, frame, pos, None, False)


def encode_api_versions_unsupported(header: RequestHeader) -> bytes:
    """Kafka's answer to an ApiVersions request at a version we do not serve: a v0-format
    response with UNSUPPORTED_VERSION and our full range, so the client retries at a
    version we share (KIP-511)."""
    v0_header = RequestHeader(ApiKey.API_VERSIONS, 0, header.correlation_id, header.client_id)
    return encode_response(v0_header, {
        "error_code": ErrorCode.UNSUPPORTED_VERSION,
        "api_keys": api_versions_entries(),
    })


def api_versions_entries() -> list[dict]:
    """The api_keys array of an ApiVersions response: every API and its version range."""
    return [
        {"api_key": int(api), "min_version": low, "max_version": high}
        for api, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    ]


def _compiled_or_raise(api_key: int, kind: str, api_version: int) -> _Compiled:
    compiled = _COMPILED.get((int(api_key), kind, api_version))
    if compiled is None:
        raise UnsupportedVersionError(f"api {api_key} version {api_version} ({kind})")
    return compiled


def _join_with_prefix(parts: list) -> bytes:
    parts[0] = _LENGTH_PREFIX.pack(sum(len(part) for part in parts))
    return b"".join(parts)


# -- error responses -----------------------------------------------------------------------

# Values Kafka puts in an error response where the plain default would read as real data
# (an offset of 0, broker 0). Applied only to fields the response has at that version.
_ERROR_FIELD_VALUES: dict[str, object] = {
    "high_watermark": -1,
    "last_stable_offset": -1,
    "log_start_offset": -1,
    "base_offset": -1,
    "offset": -1,
    "timestamp": -1,
    "committed_offset": -1,
    "end_offset": -1,
    "leader_epoch": -1,
    "leader_id": -1,
    "node_id": -1,
    "port": -1,
    "producer_id": -1,
    "producer_epoch": -1,
    "generation_id": -1,
}


def error_response(header: RequestHeader, request_body: dict, error_code: int) -> bytes:
    """A response where every error_code field is ``error_code``.

    Request arrays listed in ``schema.ERROR_ECHO`` are mirrored (topics, partitions,
    members, ...) so the client can match each error to what it asked for. Used to answer
    group APIs before groups exist and well-formed requests the broker cannot serve.
    """
    return encode_response(header, error_response_body(header, request_body, error_code))


def error_response_body(header: RequestHeader, request_body: dict, error_code: int) -> dict:
    """The body of `error_response`, not yet encoded (authorization answers the elements
    of a request it refuses with these, next to the handler's answers for the rest)."""
    message = SCHEMAS[(ApiKey(header.api_key), RESPONSE)]
    version = header.api_version
    body = _error_struct(message.fields, version, error_code)
    echo = ERROR_ECHO.get(ApiKey(header.api_key))
    if echo is not None:
        _echo_into(body, message.fields, request_body, echo, version, error_code)
    return body


def _error_struct(fields: tuple[Field, ...], version: int, error_code: int) -> dict:
    body: dict = {}
    for field in fields:
        if not field.present_in(version):
            continue
        if field.name == "error_code":
            body[field.name] = error_code
        elif field.name in _ERROR_FIELD_VALUES and not field.is_array:
            body[field.name] = _ERROR_FIELD_VALUES[field.name]
        else:
            body[field.name] = field.default_value()
    return body


def _echo_into(body: dict, fields: tuple[Field, ...], request: dict, echo: Echo,
               version: int, error_code: int) -> None:
    requested = request.get(echo.request_field) if request else None
    target = next((f for f in fields if f.name == echo.response_field), None)
    if not requested or target is None or not target.present_in(version):
        return
    elements = []
    for item in requested:
        element = _error_struct(target.fields, version, error_code)
        for response_name, request_name in echo.copy:
            element[response_name] = item if request_name == SELF else item.get(request_name)
        if echo.child is not None:
            child_source = item if isinstance(item, dict) else {}
            _echo_into(element, target.fields, child_source, echo.child, version, error_code)
        elements.append(element)
    body[echo.response_field] = elements

