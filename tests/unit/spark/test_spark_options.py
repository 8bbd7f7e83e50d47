"""Options of the Spark source and sink: Spark's names, defaults and rules, and an error
naming the option for anything unknown, malformed or contradictory. No Spark needed."""

from __future__ import annotations

import pytest

from kafkalite.spark.errors import KafkaliteSparkOptionError
from kafkalite.spark.options import (
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    parse_partition_json,
    parse_sink_options,
    parse_source_options,
    partition_json,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def source(streaming: bool = False, **opts: str):
    return parse_source_options({**BOOT, **opts}, streaming=streaming)


def refused(option: str, streaming: bool = False, **opts: str) -> str:
    with pytest.raises(KafkaliteSparkOptionError) as info:
        parse_source_options({**BOOT, **opts}, streaming=streaming)
    assert info.value.option.lower() == option.lower(), info.value
    assert option.lower() in str(info.value).lower()
    return str(info.value)


def test_batch_defaults_are_sparks():
    o = source(subscribe="a, b")
    assert o.strategy == Subscribe(("a", "b"))
    assert o.starting == Earliest()
    assert o.ending == Latest()
    assert o.fail_on_data_loss is True
    assert o.include_headers is False
    assert o.min_partitions is None
    assert o.client_config == {}


def test_streaming_defaults_start_at_latest_without_an_end():
    o = source(streaming=True, subscribePattern="t-.*", maxOffsetsPerTrigger="100")
    assert o.starting == Latest()
    assert o.ending is None
    assert o.max_offsets_per_trigger == 100
    assert isinstance(o.strategy, SubscribePattern)
    assert o.strategy.matches("t-1")
    assert not o.strategy.matches("xt-1")


def test_option_names_are_case_insensitive_and_kafka_options_pass_through_without_prefix():
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Assign": '{"t":[1,0]}', "FAILONDATALOSS": "False",
                              "kafka.client.rack": "r1", "kafka.fetch.max.bytes": "1000", "includeHeaders": "true",
                              "kafka.group.id": "g"}, streaming=False)
    assert o.bootstrap_servers == "h:1"
    assert o.strategy == Assign((("t", 0), ("t", 1)))
    assert o.fail_on_data_loss is False
    assert o.include_headers is True
    assert o.client_rack == "r1"
    assert o.client_config == {"client.rack": "r1", "fetch.max.bytes": "1000", "group.id": "g"}


def test_specific_offsets_and_timestamps_parse_as_spark_json():
    o = source(subscribe="t", startingOffsets='{"t":{"0":23,"1":-2}}', endingOffsets='{"t":{"0":50,"1":-1}}')
    assert o.starting == SpecificOffsets({("t", 0): 23, ("t", 1): -2})
    assert o.ending == SpecificOffsets({("t", 0): 50, ("t", 1): -1})
    assert source(subscribe="t", startingTimestamp="1000").starting == GlobalTimestamp(1000)
    assert source(subscribe="t", startingOffsetsByTimestamp='{"t":{"0":5}}').starting == SpecificTimestamps({("t", 0): 5})
    assert source(subscribe="t", endingTimestamp="7").ending == GlobalTimestamp(7)


def test_partition_json_round_trips():
    offsets = {("b", 1): 7, ("a", 0): 3, ("a", 10): -1}
    text = partition_json(offsets)
    assert text == '{"a":{"0":3,"10":-1},"b":{"1":7}}'
    assert parse_partition_json(text, "x") == offsets


def test_bootstrap_servers_are_required():
    with pytest.raises(KafkaliteSparkOptionError, match="kafka.bootstrap.servers"):
        parse_source_options({"subscribe": "t"}, streaming=False)


@pytest.mark.parametrize("opts, option", [
    ({}, "subscribe"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "assign"),
    ({"subscribe": " , "}, "subscribe"),
    ({"subscribePattern": "("}, "subscribePattern"),
    ({"assign": '{"t":0}'}, "assign"),
    ({"assign": "not json"}, "assign"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "startingOffsets"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, "startingOffsets"),
    ({"subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, "endingOffsets"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "startingOffsets"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, "startingOffsets"),
    ({"subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "5"}, "startingOffsets"),
    ({"subscribe": "t", "startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"subscribe": "t", "minPartitions": "0"}, "minPartitions"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "many"}, "maxOffsetsPerTrigger"),
    ({"subscribe": "t", "failOnDataLoss": "yes"}, "failOnDataLoss"),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy"),
    ({"subscribe": "t", "startingOfsets": "earliest"}, "startingOfsets"),
    ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ({"subscribe": "t", "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
    ({"subscribe": "t", "kafka.value.deserializer": "x"}, "kafka.value.deserializer"),
    ({"subscribe": "t", "kafka.key.deserializer": "x"}, "kafka.key.deserializer"),
])
def test_bad_batch_options_name_the_option(opts, option):
    refused(option, **opts)


LONG_OVER = str(2**63)  # one more than Kafka's (and Spark's) largest long


@pytest.mark.parametrize("opts, option", [
    ({"startingTimestamp": LONG_OVER}, "startingTimestamp"),
    ({"startingTimestamp": "99999999999999999999999"}, "startingTimestamp"),
    ({"endingTimestamp": LONG_OVER}, "endingTimestamp"),
    ({"startingOffsetsByTimestamp": f'{{"t":{{"0":{LONG_OVER}}}}}'}, "startingOffsetsByTimestamp"),
    ({"startingOffsets": f'{{"t":{{"0":{LONG_OVER}}}}}'}, "startingOffsets"),
    ({"maxOffsetsPerTrigger": LONG_OVER}, "maxOffsetsPerTrigger"),
    ({"fetchOffset.retryIntervalMs": LONG_OVER}, "fetchOffset.retryIntervalMs"),
])
def test_numbers_beyond_a_64_bit_long_are_refused_when_parsed_not_at_planning(opts, option):
    # They parsed, and planning failed later (a timestamp: OverflowError from confluent-kafka).
    assert "64-bit long" in refused(option, subscribe="t", **opts)
    assert source(subscribe="t", startingTimestamp=str(2**63 - 1)).starting == GlobalTimestamp(2**63 - 1)


def test_ending_offsets_are_refused_in_streaming_queries():
    refused("endingOffsets", streaming=True, subscribe="t", endingOffsets="latest")


def test_sink_options():
    o = parse_sink_options({**BOOT, "topic": "out", "kafka.linger.ms": "5"})
    assert (o.topic, dict(o.client_config)) == ("out", {"linger.ms": "5"})
    assert parse_sink_options(BOOT).topic is None
    # what Spark adds itself: a checkpoint, and a streaming query's name (writeStream.queryName)
    assert parse_sink_options({**BOOT, "checkpointLocation": "/c", "queryName": "q"}).topic is None
    for opts, option in [({"subscribe": "t"}, "subscribe"), ({"kafka.value.serializer": "x"}, "kafka.value.serializer"),
                         ({"kafka.acks": "1"}, "kafka.acks"), ({"kafka.enable.idempotence": "false"}, "kafka.enable.idempotence"),
                         ({"topic": " "}, "topic")]:
        with pytest.raises(KafkaliteSparkOptionError) as info:
            parse_sink_options({**BOOT, **opts})
        assert info.value.option.lower() == option.lower()
    with pytest.raises(KafkaliteSparkOptionError, match="kafka.bootstrap.servers"):
        parse_sink_options({"topic": "t"})


def test_streaming_trigger_options_and_retries():
    o = source(streaming=True, subscribe="t", minOffsetsPerTrigger="500", maxTriggerDelay="30s",
               groupIdPrefix="etl", **{"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "20"})
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms, o.group_id_prefix) == (500, 30_000, "etl")
    assert (o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == (5, 20)
    assert source(streaming=True, subscribe="t").max_trigger_delay_ms == 15 * 60_000
    assert source(streaming=True, subscribe="t", maxTriggerDelay="250").max_trigger_delay_ms == 250
    assert source(streaming=True, subscribe="t", maxTriggerDelay="2m").max_trigger_delay_ms == 120_000
    refused("maxTriggerDelay", streaming=True, subscribe="t", maxTriggerDelay="soon")
    refused("minOffsetsPerTrigger", streaming=True, subscribe="t", minOffsetsPerTrigger="0")
    refused("fetchOffset.numRetries", streaming=True, subscribe="t", **{"fetchOffset.numRetries": "-1"})
    refused("groupIdPrefix", streaming=True, subscribe="t", groupIdPrefix=" ")
    # Spark ignores the trigger options in a batch query (with a warning here), it does not fail
    assert source(subscribe="t", maxOffsetsPerTrigger="10").max_offsets_per_trigger == 10
