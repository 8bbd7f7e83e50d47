"""Every API, version and direction in the schema table survives encode -> decode."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import body_strategy, completed

from kafkalite.protocol import codec
from kafkalite.protocol.codec import RequestHeader
from kafkalite.protocol.schema import REQUEST, RESPONSE, SCHEMAS, SUPPORTED_VERSIONS, ApiKey

CASES = [
    pytest.param(api, kind, version, id=f"{api.name}-{kind}-v{version}")
    for (api, kind), message in SCHEMAS.items()
    for version in range(message.min_version, message.max_version + 1)
]


def test_every_api_has_request_and_response_for_every_version():
    for api, (low, high) in SUPPORTED_VERSIONS.items():
        response = SCHEMAS[(api, RESPONSE)]
        assert (response.min_version, response.max_version) == (low, high)
    assert set(SUPPORTED_VERSIONS) == set(ApiKey)


@pytest.mark.parametrize(("api", "kind", "version"), CASES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_body_round_trips(api, kind, version, data):
    fields = SCHEMAS[(api, kind)].fields
    body = data.draw(body_strategy(fields, version))
    correlation_id = data.draw(st.integers(-(1 << 31), (1 << 31) - 1))
    if kind == REQUEST:
        client_id = data.draw(st.none() | st.text(max_size=6))
        frame = codec.encode_request(api, version, correlation_id, client_id, body)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        header, decoded = codec.decode_request(frame[4:])
        assert header == RequestHeader(api, version, correlation_id, client_id)
    else:
        header = RequestHeader(api, version, correlation_id, "c")
        frame = codec.encode_response(header, body)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        assert b"".join(codec.encode_response_parts(header, body)) == frame
        got_correlation_id, decoded = codec.decode_response(api, version, frame[4:])
        assert got_correlation_id == correlation_id
    assert decoded == completed(body, fields, version)


@pytest.mark.parametrize(("api", "kind", "version"), CASES)
def test_empty_body_encodes_all_defaults(api, kind, version):
    fields = SCHEMAS[(api, kind)].fields
    if kind == REQUEST:
        _, decoded = codec.decode_request(codec.encode_request(api, version, 7, None, {})[4:])
    else:
        frame = codec.encode_response(RequestHeader(api, version, 7, None), {})
        _, decoded = codec.decode_response(api, version, frame[4:])
    assert decoded == completed({}, fields, version)


def test_records_chunks_and_memoryview_are_written_as_one_value():
    header = RequestHeader(ApiKey.FETCH, 11, 1, None)
    partition = {"partition_index": 0, "high_watermark": 5}
    as_chunks = {"responses": [{"topic": "t", "partitions": [
        dict(partition, records=[b"abc", memoryview(b"defg")])]}]}
    as_bytes = {"responses": [{"topic": "t", "partitions": [dict(partition, records=b"abcdefg")]}]}
    assert codec.encode_response(header, as_chunks) == codec.encode_response(header, as_bytes)
    _, body = codec.decode_response(ApiKey.FETCH, 11, codec.encode_response(header, as_chunks)[4:])
    assert body["responses"][0]["partitions"][0]["records"] == b"abcdefg"


def test_api_versions_v3_request_is_flexible_with_header_v2():
    frame = codec.encode_request(ApiKey.API_VERSIONS, 3, 9, "rdkafka", {
        "client_software_name": "librdkafka", "client_software_version": "2.0.2"})
    # header v1 fields, then an empty tag buffer, then compact strings (length + 1).
    assert frame[4:] == (b"\x00\x12\x00\x03\x00\x00\x00\x09\x00\x07rdkafka\x00"
                         b"\x0blibrdkafka\x062.0.2\x00")


def test_api_versions_v3_response_uses_header_v0_and_empty_tag_buffers():
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 9, None)
    body = {"api_keys": [{"api_key": 0, "min_version": 3, "max_version": 8}]}
    assert codec.encode_response(header, body) == (
        b"\x00\x00\x00\x13"  # length
        b"\x00\x00\x00\x09"  # correlation id, response header v0 (no tag buffer)
        b"\x00\x00"  # error_code
        b"\x02\x00\x00\x00\x03\x00\x08\x00"  # compact array of 1, entry + empty tags
        b"\x00\x00\x00\x00"  # throttle_time_ms
        b"\x00")  # empty top-level tag buffer


def test_unknown_tagged_fields_in_a_flexible_request_are_skipped():
    frame = bytearray(codec.encode_request(ApiKey.API_VERSIONS, 3, 1, "c", {
        "client_software_name": "n", "client_software_version": "v"})[4:])
    assert frame[-1] == 0
    frame[-1:] = b"\x01\x05\x02zz"  # one tagged field: tag 5, two bytes
    _, body = codec.decode_request(bytes(frame))
    assert body == {"client_software_name": "n", "client_software_version": "v"}
