"""Cross-check against the real clients' own protocol classes.

kafka-python 3.0 (``kafka.protocol.old``) and aiokafka 0.14 (``aiokafka.protocol``) each
carry an independent, hand-written description of every message. For each API and version
both we and a library know: a body generated from our schema table is built with the
library's Request class and encoded by it, and ``decode_request`` must read it back; a body
encoded by ``encode_response`` must decode with the library's Response class to the same
values in the same order.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import body_strategy, completed, positional

from kafkalite.protocol import codec
from kafkalite.protocol.codec import RequestHeader
from kafkalite.protocol.schema import REQUEST, RESPONSE, SCHEMAS, SUPPORTED_VERSIONS, ApiKey

LIBRARIES = ("kafka.protocol.old", "aiokafka.protocol")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _library_classes() -> dict[tuple[str, int, str, int], type]:
    found = {}
    for package_name in LIBRARIES:
        package = importlib.import_module(package_name)
        for module_info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package_name}.{module_info.name}")
            for obj in vars(module).values():
                for cls in obj if isinstance(obj, list) else [obj]:
                    version = getattr(cls, "API_VERSION", None)
                    if not (isinstance(cls, type) and hasattr(cls, "SCHEMA")
                            and isinstance(version, int)):
                        continue
                    try:
                        api = ApiKey(int(cls.API_KEY))
                    except (TypeError, ValueError):
                        continue
                    low, high = SUPPORTED_VERSIONS[api]
                    kind = REQUEST if "Request" in cls.__name__ else RESPONSE
                    if low <= version <= high:
                        found[(package_name, api, kind, version)] = cls
    return found


with warnings.catch_warnings():  # kafka-python's schema loader uses deprecated APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    CLASSES = _library_classes()

# Where a library's hand-written schema disagrees with Apache Kafka's JSON (we follow Kafka).
LIBRARY_BUGS = {
    ("aiokafka.protocol", ApiKey.LIST_OFFSETS, REQUEST, 4):
        "aiokafka declares current_leader_epoch Int64; Kafka's ListOffsetsRequest has int32",
    ("aiokafka.protocol", ApiKey.LIST_OFFSETS, REQUEST, 5):
        "aiokafka reuses its v4 schema (current_leader_epoch Int64) for v5",
    **{(lib, ApiKey.CREATE_PARTITIONS, REQUEST, v):
       "the library models Kafka's Assignments [{BrokerIds []int32}] as a bare array of arrays "
       "(the same bytes; its positional form has no struct to fill)"
       for lib in LIBRARIES for v in (0, 1)},
    ("kafka.protocol.old", ApiKey.DESCRIBE_LOG_DIRS, REQUEST, 0):
        "kafka-python's old schema declares Partitions Int32; Kafka's DescribeLogDirsRequest has []int32",
}


def _case(key):
    marks = [pytest.mark.skip(reason=LIBRARY_BUGS[key])] if key in LIBRARY_BUGS else []
    name = f"{key[0].split('.')[0]}-{key[1].name}-{key[2]}-v{key[3]}"
    return pytest.param(key, id=name, marks=marks)


CASES = [_case(key) for key in sorted(CLASSES, key=lambda k: (k[0], int(k[1]), k[2], k[3]))]


def _is_tag_buffer(field_type) -> bool:
    return "Tagged" in type(field_type).__name__ or "Tagged" in getattr(
        field_type, "__name__", "")


def _library_values(value, schema=None):
    """A library Struct (or nested tuple) as nested lists, tag buffers dropped."""
    if hasattr(value, "SCHEMA"):
        schema = value.SCHEMA
        value = [getattr(value, name) for name in schema.names]
    if isinstance(value, (tuple, list)):
        fields = getattr(schema, "fields", None)
        if fields is not None and len(fields) == len(value):
            return [_library_values(v, f) for v, f in zip(value, fields)
                    if not _is_tag_buffer(f)]
        element = getattr(schema, "array_of", None)
        return [_library_values(v, element) for v in value]
    if value is None and "BitField" in getattr(schema, "__name__", type(schema).__name__):
        return -(1 << 31)  # kafka-python reads Kafka's "not requested" (INT32_MIN) as None
    if isinstance(value, (set, frozenset)):  # kafka-python decodes int32 bit fields to sets
        mask = sum(1 << bit for bit in value)
        return mask - (1 << 32) if mask >= 1 << 31 else mask
    return value


def _fit(values: list, schema) -> tuple:
    """Our positional values shaped for a library Schema: tag buffers filled in, and a
    one-field struct element given as its bare value where the library declares an array
    of primitives (Metadata topics: Kafka's struct {name} and Array(String) are the same
    bytes)."""
    out = []
    remaining = iter(values)
    for field in schema.fields:
        if _is_tag_buffer(field):
            out.append({})
            continue
        value = next(remaining)
        element = getattr(field, "array_of", None)
        if element is not None and value is not None:
            if hasattr(element, "fields"):
                value = [_fit(item, element) for item in value]
            else:
                value = [item[0] if isinstance(item, list) else item for item in value]
        out.append(value)
    return tuple(out)


def test_both_libraries_cover_the_hot_apis():
    for package_name in LIBRARIES:
        for api in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS,
                    ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.INIT_PRODUCER_ID):
            assert any(k[0] == package_name and k[1] == api for k in CLASSES), (package_name, api)


@pytest.mark.parametrize("key", CASES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_library_agrees_with_codec(key, data):
    _, api, kind, version = key
    cls = CLASSES[key]
    fields = SCHEMAS[(api, kind)].fields
    body = data.draw(body_strategy(fields, version))
    if api == ApiKey.API_VERSIONS and kind == RESPONSE:
        # kafka-python reads any failed ApiVersions response in the v0 layout, as Kafka
        # only ever sends errors that way (see encode_api_versions_unsupported).
        body["error_code"] = 0
    if kind == REQUEST:
        library_body = cls(*_fit(positional(body, fields, version), cls.SCHEMA)).encode()
        frame = _our_request_header(api, version, 77, "client") + library_body
        header, decoded = codec.decode_request(frame)
        assert header == RequestHeader(api, version, 77, "client")
        assert decoded == completed(body, fields, version)
    else:
        frame = codec.encode_response(RequestHeader(api, version, 77, None), body)
        library_object = cls.decode(frame[8:])  # past length prefix and correlation id
        assert _library_values(library_object) == positional(body, fields, version)


def _our_request_header(api, version, correlation_id, client_id) -> bytes:
    """Header bytes as our encoder writes them (the body is what is under test here)."""
    empty = codec.encode_request(api, version, correlation_id, client_id, {})[4:]
    body = codec.encode_request(api, version, correlation_id, None, {})[4:]
    # Both frames carry the same default body; the header is what precedes it.
    header_len_without_client = 10 + (1 if SCHEMAS[(api, REQUEST)].is_flexible(version) else 0)
    default_body = body[header_len_without_client:]
    return empty[: len(empty) - len(default_body)]


def test_aiokafka_request_header_and_frame_decode():
    from aiokafka.protocol.produce import ProduceRequest_v7

    request = ProduceRequest_v7(
        transactional_id=None, required_acks=-1, timeout=30000,
        topics=[("orders", [(3, b"\x00" * 61)])])
    frame = request.build_request_header(correlation_id=5, client_id="aiokafka").encode()
    frame += request.encode()
    header, body = codec.decode_request(frame)
    assert header == RequestHeader(ApiKey.PRODUCE, 7, 5, "aiokafka")
    assert body == {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                    "topic_data": [{"name": "orders",
                                    "partition_data": [{"index": 3, "records": b"\x00" * 61}]}]}


def test_aiokafka_api_versions_v0_request():
    from aiokafka.protocol.admin import ApiVersionRequest_v0

    request = ApiVersionRequest_v0()
    frame = request.build_request_header(correlation_id=1, client_id="aiokafka").encode()
    header, body = codec.decode_request(frame + request.encode())
    assert header == RequestHeader(ApiKey.API_VERSIONS, 0, 1, "aiokafka")
    assert body == {"client_software_name": "", "client_software_version": ""}
