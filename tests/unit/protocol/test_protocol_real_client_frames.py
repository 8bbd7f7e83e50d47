"""Frames built the way kafka-python 3.0 sends them (its JSON-driven ApiMessage classes,
``with_header`` + ``encode(framed=True, header=True)``) decode here, and our responses
decode with its Response classes. Versions are the ones DESIGN.md 4b saw it use."""

from __future__ import annotations

import warnings

import pytest

from kafkalite.protocol import codec
from kafkalite.protocol.codec import RequestHeader
from kafkalite.protocol.errors import ErrorCode, UnsupportedVersionError
from kafkalite.protocol.framing import FrameDecoder
from kafkalite.protocol.schema import ApiKey

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

with warnings.catch_warnings():  # kafka-python's schema loader uses deprecated APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin.topics import CreateTopicsRequest
    from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
    from kafka.protocol.consumer.offsets import ListOffsetsRequest
    from kafka.protocol.metadata.api_versions import (
        ApiVersionsRequest,
        ApiVersionsResponse,
    )
    from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
    from kafka.protocol.producer.transaction import InitProducerIdRequest


def _frame_of(request, correlation_id: int = 21) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="kafka-python-3.0")
    decoder = FrameDecoder(1 << 20)
    decoder.feed(bytes(request.encode(framed=True, header=True)))
    frame = decoder.next_frame()
    assert frame is not None
    assert decoder.next_frame() is None
    return frame


def test_api_versions_v4_gets_the_v0_unsupported_answer_and_v2_decodes():
    frame = _frame_of(ApiVersionsRequest[4](client_software_name="kafka-python",
                                            client_software_version="3.0"))
    with pytest.raises(UnsupportedVersionError) as caught:
        codec.decode_request(frame)
    header = caught.value.header
    assert header == RequestHeader(ApiKey.API_VERSIONS, 4, 21, "kafka-python-3.0")
    answer = codec.encode_api_versions_unsupported(header)
    response = ApiVersionsResponse[0].decode(answer[8:])
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert keys[ApiKey.API_VERSIONS] == (0, 3)
    assert keys[ApiKey.PRODUCE] == (3, 8)

    header, body = codec.decode_request(_frame_of(ApiVersionsRequest[2]()))
    assert header.api_version == 2
    assert body == {"client_software_name": "", "client_software_version": ""}


def test_metadata_v5():
    request = MetadataRequest[5](
        topics=[MetadataRequest.MetadataRequestTopic(name="orders")],
        allow_auto_topic_creation=False)
    header, body = codec.decode_request(_frame_of(request))
    assert header == RequestHeader(ApiKey.METADATA, 5, 21, "kafka-python-3.0")
    assert body["topics"] == [{"name": "orders"}]
    assert body["allow_auto_topic_creation"] is False

    answer = codec.encode_response(header, {
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": "r1"}],
        "cluster_id": "kl", "controller_id": 1,
        "topics": [{"name": "orders", "partitions": [{
            "partition_index": 0, "leader_id": 1, "replica_nodes": [1, 2],
            "isr_nodes": [1], "offline_replicas": [2]}]}]})
    response = MetadataResponse[5].decode(answer[8:])
    assert response.brokers[0].host == "127.0.0.1"
    assert response.topics[0].partitions[0].isr_nodes == [1]


def test_produce_v7_and_response():
    records = bytes(range(200))
    request = ProduceRequest[7](acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="orders", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=2, records=records)])])
    header, body = codec.decode_request(_frame_of(request))
    assert body == {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                    "topic_data": [{"name": "orders",
                                    "partition_data": [{"index": 2, "records": records}]}]}
    answer = codec.error_response(header, body, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    response = ProduceResponse[7].decode(answer[8:])
    partition = response.responses[0].partition_responses[0]
    assert (response.responses[0].name, partition.index) == ("orders", 2)
    assert partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert partition.base_offset == -1


def test_fetch_v11_and_response():
    request = FetchRequest[11](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, rack_id="rack-a",
        topics=[FetchRequest.FetchTopic(topic="orders", partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=0, current_leader_epoch=3, fetch_offset=42,
                log_start_offset=-1, partition_max_bytes=1 << 20)])])
    header, body = codec.decode_request(_frame_of(request))
    assert header.api_version == 11
    assert body["rack_id"] == "rack-a"
    assert body["topics"][0]["partitions"][0]["fetch_offset"] == 42
    assert body["topics"][0]["partitions"][0]["current_leader_epoch"] == 3

    answer = codec.encode_response(header, {"responses": [{"topic": "orders", "partitions": [{
        "partition_index": 0, "high_watermark": 50, "last_stable_offset": 50,
        "log_start_offset": 0, "records": b""}]}]})
    response = FetchResponse[11].decode(answer[8:])
    partition = response.responses[0].partitions[0]
    assert partition.high_watermark == 50
    assert partition.preferred_read_replica == -1


def test_list_offsets_init_producer_id_create_topics():
    frame = _frame_of(ListOffsetsRequest[5](replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name="orders", partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=1, current_leader_epoch=-1, timestamp=-2)])]))
    _, body = codec.decode_request(frame)
    assert body["topics"][0]["partitions"][0]["timestamp"] == -2

    _, body = codec.decode_request(_frame_of(
        InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60000)))
    assert body == {"transactional_id": None, "transaction_timeout_ms": 60000}

    request = CreateTopicsRequest[3](timeout_ms=1000, validate_only=False, topics=[
        CreateTopicsRequest.CreatableTopic(name="orders", num_partitions=3,
                                           replication_factor=2, assignments=[], configs=[])])
    _, body = codec.decode_request(_frame_of(request))
    assert body["topics"][0]["name"] == "orders"
    assert body["topics"][0]["num_partitions"] == 3
