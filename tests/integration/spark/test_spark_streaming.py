"""The `kafkalite` streaming source against a real 3-broker cluster and a real local Spark:
micro-batches bounded by maxOffsetsPerTrigger, Trigger.AvailableNow, a stop and a restart
from the checkpoint (nothing lost, nothing read twice), partitions added while the query
lives, and a kill -9 of a partition leader under a query that reads one topic and writes
another through the at-least-once sink."""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from kafkalite.testing.probes import partition_view, wait_fully_replicated, wait_until
from kafkalite.testing.spark_topics import consume_all, create_topic, partition_count, produce

pytest.importorskip("pyspark")

QUERY_TIMEOUT_S = 180


def stream(spark, boot: str, **options):
    return spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", boot).options(**options).load()


def run_available_now(spark, boot: str, out, checkpoint, **options) -> list:
    """One AvailableNow run of the source into Parquet (exactly once: Spark's file sink);
    its progress reports."""
    rows = stream(spark, boot, **options).selectExpr("topic", "partition", "offset", "cast(key as string) as key")
    query = (rows.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish"
    assert query.exception() is None, query.exception()
    return query.recentProgress


def test_limited_triggers_a_restart_from_the_checkpoint_and_new_partitions(spark, boot, tmp_path):
    create_topic(boot, "clicks", partitions=3)
    first = produce(boot, "clicks", 300)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"subscribe": "clicks", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "50"}
    progress = run_available_now(spark, boot, out, checkpoint, **options)
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"] > 0]
    assert sum(sizes) == 300 and len(sizes) >= 6 and max(sizes) <= 50, sizes
    end = json.loads(progress[-1]["sources"][0]["endOffset"])
    assert end == {"clicks": {"0": 100, "1": 100, "2": 100}}  # Spark's Kafka offset JSON
    got = spark.read.parquet(str(out)).collect()
    assert sorted((r["partition"], r["offset"]) for r in got) == sorted((a["partition"], a["offset"]) for a in first)

    # Stopped; meanwhile more records and a fourth partition. The restart resumes from the
    # checkpoint, discovers the new partition and reads it from its start.
    admin = AdminClient({"bootstrap.servers": boot})
    for future in admin.create_partitions([NewPartitions("clicks", 4)]).values():
        future.result(timeout=30)
    wait_until(lambda: partition_count(boot, "clicks") == 4, 30, "the fourth partition in metadata")
    second = produce(boot, "clicks", 120, partitions=4, first=300)
    progress = run_available_now(spark, boot, out, checkpoint, **options)
    assert sum(p["numInputRows"] for p in progress) == 120
    got = spark.read.parquet(str(out)).collect()
    keys = [r["key"] for r in got]
    assert len(keys) == len(set(keys)) == 420  # nothing lost, nothing read twice
    assert sorted((r["partition"], r["offset"]) for r in got) == sorted((a["partition"], a["offset"])
                                                                      for a in first + second)
    assert {r["partition"] for r in got} == {0, 1, 2, 3}


def test_a_running_query_starts_at_latest_and_reads_what_comes(spark, boot, tmp_path):
    create_topic(boot, "live", partitions=2)
    produce(boot, "live", 40, partitions=2)  # before the query: not read (startingOffsets latest)
    rows = stream(spark, boot, subscribe="live").selectExpr("cast(key as string) as key", "partition", "offset")
    query = (rows.writeStream.format("memory").queryName("live_keys").option("checkpointLocation", str(tmp_path / "c"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        wait_until(lambda: query.lastProgress is not None, 90, "the query's first trigger")
        produce(boot, "live", 60, partitions=2, first=40)
        wait_until(lambda: spark.sql("select count(*) as n from live_keys").collect()[0]["n"] >= 60, 90,
                   "the new records to be read")
        keys = sorted(int(r["key"].split("-")[1]) for r in spark.sql("select key from live_keys").collect())
        assert keys == list(range(40, 100))
    finally:
        query.stop()


def test_kill_9_of_a_partition_leader_under_a_query_loses_nothing(spark, spark_kafka, boot, tmp_path):
    """The query reads `k-in` and writes every record to `k-out` through the sink while the
    leader of k-in's partition 0 is killed. It may go on, or fail and be restarted from its
    checkpoint; in the end `k-out` holds every acknowledged input record. The sink is
    at-least-once, so a replayed micro-batch may write some twice: counted and printed."""
    create_topic(boot, "k-in", partitions=3)
    create_topic(boot, "k-out", partitions=3)
    acked: set[str] = set()
    failures: list = []
    sent = [0]
    stop = threading.Event()

    def producer() -> None:
        p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 5})

        def done(err, msg):
            (failures.append(err) if err is not None else acked.add(msg.key().decode()))
        for i in range(3000):  # at most 3,000 records, ~200/s
            if stop.is_set():
                break
            p.produce("k-in", key=f"r-{i}", value=b"v%d" % i, on_delivery=done)
            sent[0] = i + 1
            p.poll(0)
            time.sleep(0.005)
        p.flush(120)

    def start_query():
        rows = stream(spark, boot, subscribe="k-in", startingOffsets="earliest").selectExpr("key", "value")
        return (rows.writeStream.format("kafkalite").option("kafka.bootstrap.servers", boot).option("topic", "k-out")
                .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="1 second").start())

    thread = threading.Thread(target=producer, daemon=True)
    victim = None
    restarts = 0
    query = start_query()
    try:
        thread.start()
        wait_until(lambda: query.lastProgress is not None and len(acked) > 300, 90, "the query under load")
        victim = partition_view(spark_kafka, "k-in", 0)["leader"]
        spark_kafka.kill(victim)
        print(f"\nkilled broker {victim}, leader of k-in-0, with {len(acked)} records acknowledged")
        thread.join(120)
        assert not thread.is_alive()
        deadline = time.monotonic() + 150
        while True:
            out = [m.key().decode() for m in consume_all(boot, "k-out", 3, len(acked), timeout_s=5)]
            if acked <= set(out) or time.monotonic() > deadline:
                break
            if not query.isActive:  # failed: Spark's way is to restart it from its checkpoint
                print(f"query failed ({query.exception()}); restarting it from its checkpoint")
                restarts += 1
                assert restarts <= 3
                query = start_query()
    finally:
        stop.set()
        query.stop()
        if victim is not None:
            spark_kafka.start(victim)
    missing = acked - set(out)
    assert not missing, f"{len(missing)} acknowledged records are not in the output, e.g. {sorted(missing)[:5]}"
    duplicates = len(out) - len(set(out))
    print(f"{len(acked)} acknowledged ({len(failures)} produce failures), {len(out)} written, {duplicates} "
          f"duplicates, {restarts} query restarts")
    assert set(out) <= {f"r-{i}" for i in range(sent[0])}  # nothing invented: every key was sent
    wait_fully_replicated(spark_kafka, "k-in", 3)


def test_the_drivers_offset_lookups_find_a_new_leader_after_a_kill_9(spark_kafka, boot):
    """The driver's consumers learned the leader of w-0, then the leader was killed.
    librdkafka would send every later ListOffsets (watermarks, offsets for timestamps) to
    the dead broker in its metadata cache, each timing out, for metadata.max.age.ms
    (kafkalite.leader_lookups): the query's next triggers would fail. The lookups must ask
    the new leader. No Spark session: these are the driver's calls, as each trigger and a
    query's start make them."""
    from kafkalite.spark import client
    from kafkalite.spark.offsets import Watermarks

    create_topic(boot, "w", partitions=1)
    acked = produce(boot, "w", 40, partitions=1)
    wait_fully_replicated(spark_kafka, "w", 1)
    by_time = {("w", 0): next(a["timestamp"] for a in acked if a["offset"] == 10)}
    marks, times = (Consumer({"bootstrap.servers": boot, "group.id": f"w-driver-{i}"}) for i in range(2))
    victim = None
    try:
        assert client.watermarks_of(marks, [("w", 0)]) == {("w", 0): Watermarks(0, 40)}
        assert client.offsets_for_times(times, by_time) == {("w", 0): 10}
        victim = partition_view(spark_kafka, "w", 0)["leader"]
        spark_kafka.kill(victim)
        wait_until(lambda: (partition_view(spark_kafka, "w", 0) or {}).get("leader") not in (None, -1, victim), 30,
                   "a new leader of w-0")
        for _ in range(2):  # the second call as the next trigger's
            assert client.watermarks_of(marks, [("w", 0)], retries=3, retry_interval_ms=100) == \
                {("w", 0): Watermarks(0, 40)}
            assert client.offsets_for_times(times, by_time) == {("w", 0): 10}
    finally:
        marks.close()
        times.close()
        if victim is not None:
            spark_kafka.start(victim)
    wait_fully_replicated(spark_kafka, "w", 1)
