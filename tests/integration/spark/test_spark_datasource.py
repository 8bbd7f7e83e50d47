"""The `kafkalite` PySpark data source against a real 3-broker cluster and a real local
SparkSession (local[2]): batch reads equal what was produced, offset ranges and
timestamps, minPartitions splitting, failOnDataLoss both ways, bad options, and the sink
in batch and streaming (Trigger.AvailableNow with a checkpoint).

One SparkSession and one cluster for the whole module (conftest.py).
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafkalite.testing.probes import wait_until
from kafkalite.testing.spark_topics import as_records, consume_all, create_topic, produce, read, sort_acked

pyspark = pytest.importorskip("pyspark")

def test_batch_read_equals_what_was_produced(spark, boot):
    create_topic(boot, "orders")
    acked = produce(boot, "orders", 300)
    df = read(spark, boot, subscribe="orders", includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int,"
                                        "headers:array<struct<key:string,value:binary>>>")
    rows = df.collect()
    assert as_records(rows) == sort_acked(acked)
    assert {r["topic"] for r in rows} == {"orders"}
    assert {r["timestampType"] for r in rows} == {0}
    plain = read(spark, boot, subscribePattern="ord.*")
    assert "headers" not in plain.columns
    assert plain.count() == 300


def test_offset_ranges_and_starting_offsets_by_timestamp(spark, boot):
    create_topic(boot, "ranges", partitions=2)
    acked = produce(boot, "ranges", 100, partitions=2)  # partition p holds i with i % 2 == p, at offset i // 2
    rows = read(spark, boot, assign='{"ranges":[0,1]}', startingOffsets='{"ranges":{"0":10,"1":-2}}',
                endingOffsets='{"ranges":{"0":20,"1":5}}').collect()
    got = sorted((r["partition"], r["offset"]) for r in rows)
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
    # record i has timestamp ts0 + i s: from i = 60 on, i.e. offsets 30.. of both partitions
    ts = 1_700_000_000_000 + 60_000
    rows = read(spark, boot, subscribe="ranges",
                startingOffsetsByTimestamp=json.dumps({"ranges": {"0": ts, "1": ts}})).collect()
    want = sorted((rec["partition"], rec["offset"]) for rec in acked if rec["timestamp"] >= ts)
    assert sorted((r["partition"], r["offset"]) for r in rows) == want
    rows = read(spark, boot, subscribe="ranges", startingTimestamp=str(ts), endingTimestamp=str(ts + 20_000)).collect()
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(0, o) for o in range(30, 40)] + [(1, o) for o in range(30, 40)]


def test_min_partitions_splits_ranges_and_reads_the_same_rows(spark, boot):
    create_topic(boot, "split", partitions=2)
    produce(boot, "split", 400, partitions=2)
    whole = read(spark, boot, subscribe="split")
    split = read(spark, boot, subscribe="split", minPartitions="8")
    assert whole.rdd.getNumPartitions() == 2
    assert split.rdd.getNumPartitions() == 8
    key = lambda r: (r["partition"], r["offset"])  # noqa: E731
    assert sorted(split.collect(), key=key) == sorted(whole.collect(), key=key)


def topic_with_deleted_head(boot, topic: str) -> tuple[int, int]:
    """A 1-partition topic of 60 hour-old records whose old segments retention has deleted:
    its (log start, high watermark) once the log start has moved."""
    create_topic(boot, topic, partitions=1, config={"segment.bytes": "2048", "retention.ms": "1000"})
    produce(boot, topic, 60, partitions=1, ts0_ms=int(time.time() * 1000) - 3_600_000, value_bytes=200,
            flush_each=True)
    c = Consumer({"bootstrap.servers": boot, "group.id": "probe"})
    try:
        low = wait_until(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)[0] or None,
                         60, "retention to delete old segments")
        high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)[1]
    finally:
        c.close()
    return low, high


def test_fail_on_data_loss_both_ways(spark, boot):
    low, high = topic_with_deleted_head(boot, "vanishing")
    options = {"subscribe": "vanishing", "startingOffsets": '{"vanishing":{"0":0}}'}
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, boot, **options).collect()
    rows = read(spark, boot, failOnDataLoss="false", **options).collect()
    offsets = sorted(r["offset"] for r in rows)
    assert offsets[0] >= low
    assert offsets[-1] == high - 1


def test_executor_skips_offsets_deleted_after_planning(boot):
    """An executor's range that starts below the log start (retention ran between planning
    and the read): with failOnDataLoss=false it goes on from the log start, to the end of
    the range; with true it raises naming the option."""
    from kafkalite.spark.client import read_range
    from kafkalite.spark.errors import KafkaliteDataLossError
    from kafkalite.spark.offsets import OffsetRange

    low, high = topic_with_deleted_head(boot, "gone")
    config = {"bootstrap.servers": boot, "group.id": "executor-probe", "enable.auto.commit": "false",
              "auto.offset.reset": "error", "enable.partition.eof": "true"}
    whole = OffsetRange("gone", 0, 0, high)
    with pytest.raises(KafkaliteDataLossError, match="failOnDataLoss"):
        list(read_range(whole, config, include_headers=False, fail_on_data_loss=True, poll_timeout_ms=30_000))
    batches = list(read_range(whole, config, include_headers=False, fail_on_data_loss=False, poll_timeout_ms=30_000))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(offsets[0], high))
    assert offsets[0] >= low


@pytest.mark.parametrize("options, named", [
    ({"subscribe": "orders", "startingOffsets": "latest"}, "startingOffsets"),
    ({"subscribe": "orders", "assign": '{"orders":[0]}'}, "assign"),
    ({"subscribe": "orders", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ({"subscribe": "orders", "startingOfsets": "earliest"}, "startingofsets"),
])
def test_bad_options_are_errors_naming_the_option(spark, boot, options, named):
    with pytest.raises(Exception) as info:
        read(spark, boot, **options).collect()
    assert f"option '{named}'" in str(info.value)


def test_batch_write_round_trip(spark, boot):
    create_topic(boot, "written", partitions=2)
    data = [(f"k{i}", f"v{i}".encode(), i % 2, [(f"h{i}", b"x")]) for i in range(200)]
    df = spark.createDataFrame(data, "key string, value binary, partition int, headers array<struct<key:string,value:binary>>")
    df.write.format("kafkalite").option("kafka.bootstrap.servers", boot).option("topic", "written").mode("append").save()
    got = consume_all(boot, "written", 2, 200)
    assert sorted((m.key().decode(), m.value(), m.partition(), m.headers()) for m in got) == \
        sorted((k, v, p, [(h[0][0], h[0][1])]) for k, v, p, h in data)
    back = read(spark, boot, subscribe="written", includeHeaders="true")
    assert back.count() == 200


def test_write_without_topic_names_it(spark, boot):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception) as info:
        df.write.format("kafkalite").option("kafka.bootstrap.servers", boot).mode("append").save()
    assert "option 'topic'" in str(info.value)


def test_streaming_write_round_trip_with_available_now(spark, boot, tmp_path):
    create_topic(boot, "streamed", partitions=2)
    source = tmp_path / "in"
    source.mkdir()
    for f in range(3):
        (source / f"part-{f}.json").write_text("".join(json.dumps({"id": f * 100 + i}) + "\n" for i in range(100)))
    stream = (spark.readStream.schema("id long").json(str(source))
              .selectExpr("'streamed' as topic", "cast(id as string) as key", "to_json(struct(id)) as value"))
    query = (stream.writeStream.format("kafkalite").option("kafka.bootstrap.servers", boot)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    got = consume_all(boot, "streamed", 2, 300)
    assert sorted(int(m.key()) for m in got) == list(range(300))
    # a restart from the checkpoint writes nothing again
    query = (stream.writeStream.format("kafkalite").option("kafka.bootstrap.servers", boot)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert read(spark, boot, subscribe="streamed").count() == 300


def test_a_missing_topic(spark, boot):
    # Subscribing to a topic that does not exist reads nothing, as in Spark; assigning its
    # partitions is an error naming the option (or skipped, with failOnDataLoss=false).
    assert read(spark, boot, subscribe="no-such-topic").count() == 0
    with pytest.raises(Exception) as info:
        read(spark, boot, assign='{"no-such-topic":[0]}').collect()
    assert "option 'assign'" in str(info.value) and "no-such-topic" in str(info.value)
    assert read(spark, boot, assign='{"no-such-topic":[0]}', failOnDataLoss="false").count() == 0
    # Writing to it fails at once on the driver, naming the topic, instead of each task
    # waiting out the client's metadata timeout.
    began = time.monotonic()
    with pytest.raises(Exception) as info:
        (spark.createDataFrame([("v",)], "value string").write.format("kafkalite")
         .option("kafka.bootstrap.servers", boot).option("topic", "no-such-topic").mode("append").save())
    assert "option 'topic'" in str(info.value) and "no-such-topic" in str(info.value)
    print(f"\nwrite to a missing topic refused in {time.monotonic() - began:.1f} s")


def test_client_rack_reads_from_the_closest_replica(spark, spark_kafka, boot):
    """kafka.client.rack=b: the executors' consumers fetch from broker 2 (rack b), a follower
    of a partition that broker 1 (rack a) leads (KIP-392)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkalite.testing.probes import consumer_bytes_served, wait_fully_replicated

    admin = AdminClient({"bootstrap.servers": boot})
    for future in admin.create_topics([NewTopic("racked", num_partitions=1, replication_factor=-1,
                                                replica_assignment=[[1, 2, 3]])]).values():
        future.result(timeout=30)
    acked = produce(boot, "racked", 200, partitions=1)
    wait_fully_replicated(spark_kafka, "racked", 1)
    before = consumer_bytes_served(spark_kafka, 2, "racked")
    rows = read(spark, boot, subscribe="racked", **{"kafka.client.rack": "b"}).collect()
    assert len(rows) == len(acked)
    after = consumer_bytes_served(spark_kafka, 2, "racked")
    assert after["follower"] > before["follower"]
    assert consumer_bytes_served(spark_kafka, 1, "racked")["leader"] == 0  # the leader served no records
