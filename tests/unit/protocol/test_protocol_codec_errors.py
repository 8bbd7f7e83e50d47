"""Malformed and unsupported input raises only the typed errors; error responses."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import body_strategy

from kafkalite.protocol import codec
from kafkalite.protocol.codec import RequestHeader
from kafkalite.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    UnsupportedVersionError,
)
from kafkalite.protocol.schema import REQUEST, RESPONSE, SCHEMAS, SUPPORTED_VERSIONS, ApiKey

REQUEST_CASES = [(api, v) for api, (low, high) in SUPPORTED_VERSIONS.items()
                 for v in range(low, high + 1)]


def _produce_frame() -> bytes:
    return codec.encode_request(ApiKey.PRODUCE, 7, 3, "c", {
        "acks": 1, "timeout_ms": 100,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"r" * 8}]}],
    })[4:]


def test_unknown_api_key_raises_unsupported_with_header():
    frame = struct.pack(">hhi", 57, 0, 99) + b"\xff\xff"
    with pytest.raises(UnsupportedVersionError) as caught:
        codec.decode_request(frame)
    assert caught.value.header == RequestHeader(57, 0, 99, None)
    assert codec.decode_request_header(frame) == RequestHeader(57, 0, 99, None)


@pytest.mark.parametrize(("api", "version"), [
    (ApiKey.PRODUCE, 2), (ApiKey.PRODUCE, 9), (ApiKey.FETCH, 3), (ApiKey.FETCH, 12),
    (ApiKey.METADATA, 10), (ApiKey.API_VERSIONS, 4)])
def test_unsupported_version_raises_with_header(api, version):
    frame = struct.pack(">hhi", api, version, 5) + b"\x00\x01x" + b"garbage"
    with pytest.raises(UnsupportedVersionError) as caught:
        codec.decode_request(frame)
    assert caught.value.header == RequestHeader(api, version, 5, "x")
    assert caught.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_api_versions_unsupported_answer_is_v0_layout():
    header = RequestHeader(ApiKey.API_VERSIONS, 7, 1234, "new-client")
    frame = codec.encode_api_versions_unsupported(header)
    (length, correlation_id, error_code, count) = struct.unpack_from(">iihi", frame)
    assert length == len(frame) - 4
    assert correlation_id == 1234
    assert error_code == 35
    assert count == len(SUPPORTED_VERSIONS)
    entries = [struct.unpack_from(">hhh", frame, 14 + 6 * i) for i in range(count)]
    assert 14 + 6 * count == len(frame)  # v0: no throttle_time_ms, no tag buffers
    assert dict((k, (lo, hi)) for k, lo, hi in entries) == {
        int(k): v for k, v in SUPPORTED_VERSIONS.items()}


def test_truncation_at_every_byte_is_invalid_request():
    frame = _produce_frame()
    for cut in range(len(frame)):
        with pytest.raises(InvalidRequestError):
            codec.decode_request(frame[:cut])


def test_trailing_garbage_is_invalid_request():
    with pytest.raises(InvalidRequestError, match="trailing"):
        codec.decode_request(_produce_frame() + b"\x00")


def test_negative_and_absurd_lengths_are_invalid_request():
    header = struct.pack(">hhi", ApiKey.METADATA, 1, 1) + b"\xff\xff"
    for count in (-2, -(1 << 31), (1 << 31) - 1, 3):
        with pytest.raises(InvalidRequestError):
            codec.decode_request(header + struct.pack(">i", count))
    # Metadata v0 topics are not nullable.
    v0 = struct.pack(">hhi", ApiKey.METADATA, 0, 1) + b"\xff\xff"
    with pytest.raises(InvalidRequestError):
        codec.decode_request(v0 + struct.pack(">i", -1))
    # A non-nullable string (topic name) given as null.
    with pytest.raises(InvalidRequestError):
        codec.decode_request(header + struct.pack(">ih", 1, -1))
    # Huge records length with a tiny frame.
    produce = _produce_frame()
    bad = produce[:-12] + struct.pack(">i", 1 << 30) + produce[-8:]
    with pytest.raises(InvalidRequestError):
        codec.decode_request(bad)


def test_a_compact_string_over_the_int16_limit_is_invalid_request():
    """A compact (flexible-version) string's length is a varint, which can say more than any
    Kafka string may hold (32,767 bytes): refused at decoding, as Kafka does. It used to be
    accepted and then failed when echoed in the answer: a traceback and a dropped connection."""
    frame = codec.encode_request(ApiKey.METADATA, 9, 1, "c", {
        "topics": [{"name": "x" * 100}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})[4:]
    at = frame.index(bytes([101]) + b"x" * 100)
    assert codec.decode_request(frame)[1]["topics"][0]["name"] == "x" * 100
    n = 40_000 + 1  # uvarint of 40,001: three bytes
    long_name = bytes([(n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14]) + b"x" * 40_000
    with pytest.raises(InvalidRequestError):
        codec.decode_request(frame[:at] + long_name + frame[at + 101:])


def test_invalid_utf8_and_overlong_varint_are_invalid_request():
    header = struct.pack(">hhi", ApiKey.METADATA, 1, 1) + b"\xff\xff"
    with pytest.raises(InvalidRequestError):
        codec.decode_request(header + struct.pack(">ih", 1, 2) + b"\xff\xfe")
    flexible = struct.pack(">hhi", ApiKey.API_VERSIONS, 3, 1) + b"\xff\xff"
    with pytest.raises(InvalidRequestError):
        codec.decode_request(flexible + b"\xff" * 8)


def test_truncated_header_is_invalid_request():
    for frame in (b"", b"\x00\x03", struct.pack(">hhi", 3, 1, 1) + b"\x00\x05ab"):
        with pytest.raises(InvalidRequestError):
            codec.decode_request_header(frame)
        with pytest.raises(InvalidRequestError):
            codec.decode_request(frame)


_TYPED = (InvalidRequestError, UnsupportedVersionError)


def _valid_frames() -> st.SearchStrategy[bytes]:
    def build(case):
        api, version = case
        return body_strategy(SCHEMAS[(api, REQUEST)].fields, version).map(
            lambda body: codec.encode_request(api, version, 1, "c", body)[4:])
    return st.sampled_from(REQUEST_CASES).flatmap(build)


@st.composite
def _mutated(draw) -> bytes:
    frame = bytearray(draw(_valid_frames()))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "cut", "insert", "int"]))
        position = draw(st.integers(0, max(len(frame) - 1, 0)))
        if action == "flip" and frame:
            frame[position] ^= draw(st.integers(1, 255))
        elif action == "cut":
            del frame[position:position + draw(st.integers(1, 8))]
        elif action == "insert":
            frame[position:position] = draw(st.binary(min_size=1, max_size=4))
        elif frame:
            frame[position:position + 4] = struct.pack(
                ">i", draw(st.sampled_from([-1, -2, 0x7FFFFFFF, -(1 << 31), 0xFFFF])))
    return bytes(frame)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=st.one_of(st.binary(max_size=64), _mutated()))
def test_fuzzed_requests_raise_only_typed_errors(frame):
    try:
        header, body = codec.decode_request(frame)
    except _TYPED:
        return
    # Whatever decodes must re-encode to a frame that decodes to the same body.
    again = codec.encode_request(header.api_key, header.api_version, header.correlation_id,
                                 header.client_id, body)
    assert codec.decode_request(again[4:]) == (header, body)


@pytest.mark.parametrize(("api", "version"), REQUEST_CASES)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_error_response_sets_every_error_code(api, version, data):
    body = data.draw(body_strategy(SCHEMAS[(api, REQUEST)].fields, version))
    request = codec.encode_request(api, version, 8, None, body)
    header, decoded = codec.decode_request(request[4:])
    frame = codec.error_response(header, decoded, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    correlation_id, response = codec.decode_response(api, version, frame[4:])
    assert correlation_id == 8
    fields = SCHEMAS[(api, RESPONSE)].fields
    assert set(_error_codes(response, fields, version)) <= {ErrorCode.COORDINATOR_NOT_AVAILABLE}
    top_level = [f for f in SCHEMAS[(api, RESPONSE)].fields
                 if f.name == "error_code" and f.present_in(version)]
    if top_level:
        assert response["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE


def _error_codes(body, fields, version):
    """Every error_code the response carries at this version (absent fields skipped)."""
    for field in fields:
        if not field.present_in(version):
            continue
        if field.name == "error_code":
            yield body[field.name]
        elif field.fields and body[field.name]:
            for item in body[field.name]:
                yield from _error_codes(item, field.fields, version)


def test_error_response_echoes_topics_and_partitions():
    fetch = {"topics": [{"topic": "a", "partitions": [{"partition": 1}, {"partition": 4}]},
                        {"topic": "b", "partitions": [{"partition": 0}]}]}
    _, request = codec.decode_request(codec.encode_request(ApiKey.FETCH, 11, 1, None, fetch)[4:])
    header = RequestHeader(ApiKey.FETCH, 11, 1, None)
    _, response = codec.decode_response(
        ApiKey.FETCH, 11, codec.error_response(header, request, 6)[4:])
    assert response["error_code"] == 6
    assert [(t["topic"], [(p["partition_index"], p["error_code"], p["high_watermark"])
                          for p in t["partitions"]]) for t in response["responses"]] == [
        ("a", [(1, 6, -1), (4, 6, -1)]), ("b", [(0, 6, -1)])]

    header = RequestHeader(ApiKey.DELETE_TOPICS, 3, 2, None)
    _, response = codec.decode_response(ApiKey.DELETE_TOPICS, 3, codec.error_response(
        header, {"topic_names": ["x", "y"], "timeout_ms": 1}, 41)[4:])
    assert response["responses"] == [{"name": "x", "error_code": 41},
                                     {"name": "y", "error_code": 41}]

    header = RequestHeader(ApiKey.FIND_COORDINATOR, 2, 3, None)
    _, response = codec.decode_response(ApiKey.FIND_COORDINATOR, 2, codec.error_response(
        header, {"key": "g", "key_type": 0}, 15)[4:])
    assert (response["error_code"], response["node_id"], response["port"]) == (15, -1, -1)

    header = RequestHeader(ApiKey.OFFSET_FETCH, 5, 4, None)
    _, response = codec.decode_response(ApiKey.OFFSET_FETCH, 5, codec.error_response(
        header, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 2]}]},
        15)[4:])
    assert [p["partition_index"] for p in response["topics"][0]["partitions"]] == [0, 2]
    assert response["error_code"] == 15


def test_delete_groups_error_response_names_every_group():
    body = {"groups_names": ["a", "b"]}
    request = codec.encode_request(ApiKey.DELETE_GROUPS, 1, 9, None, body)
    header, decoded = codec.decode_request(request[4:])
    frame = codec.error_response(header, decoded, ErrorCode.NOT_COORDINATOR)
    _, response = codec.decode_response(ApiKey.DELETE_GROUPS, 1, frame[4:])
    assert response["results"] == [{"group_id": "a", "error_code": ErrorCode.NOT_COORDINATOR},
                                   {"group_id": "b", "error_code": ErrorCode.NOT_COORDINATOR}]


def test_librdkafkas_metadata_v9_all_topics_request_with_its_leftover_bytes_decodes():
    """librdkafka 2.16 sends Metadata v9 for all topics with the 4 bytes it reserved for
    the topic count left after the 1-byte null array (captured from confluent-kafka 2.16.1's
    list_topics). Kafka ignores what it does not read; so do we, for Metadata v9 only."""
    frame = bytes.fromhex("0003000900000003000772646b61666b61000000000001000000")
    header, body = codec.decode_request(frame)
    assert (header.api_key, header.api_version, header.client_id) == (ApiKey.METADATA, 9, "rdkafka")
    assert body["topics"] is None  # all topics
    with pytest.raises(InvalidRequestError, match="trailing"):  # other requests stay strict
        codec.decode_request(struct.pack(">hhi", ApiKey.METADATA, 8, 3) + b"\x00\x01x" + b"\xff\xff\xff\xff\x00\x00\x00\x00")
