"""The `kafkalite` data source on a real Spark standalone cluster (a master and two workers,
separate executor JVMs and Python workers): reads, writes and a checkpointed streaming query
whose tasks run in executors that share nothing with the driver but what Spark ships them."""

from __future__ import annotations

import pytest

from kafkalite.testing.spark_topics import as_records, consume_all, create_topic, produce, read, sort_acked

pytest.importorskip("pyspark")

QUERY_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def standalone_spark(spark_standalone):
    from kafkalite.spark import KafkaliteDataSource
    from kafkalite.testing.spark_cluster import session_builder

    session = session_builder(spark_standalone, "kafkalite-datasource-standalone") \
        .config("spark.sql.session.timeZone", "UTC").getOrCreate()
    session.dataSource.register(KafkaliteDataSource)
    try:
        yield session
    finally:
        session.stop()


def test_batch_read_and_write_on_executors(standalone_spark, boot):
    spark = standalone_spark
    create_topic(boot, "sa-in", partitions=4)
    acked = produce(boot, "sa-in", 400, partitions=4)
    df = read(spark, boot, subscribe="sa-in", includeHeaders="true", minPartitions="8")
    assert df.rdd.getNumPartitions() == 8
    assert as_records(df.collect()) == sort_acked(acked)
    create_topic(boot, "sa-out", partitions=2)
    (df.selectExpr("key", "value", "headers").write.format("kafkalite").option("kafka.bootstrap.servers", boot)
     .option("topic", "sa-out").mode("append").save())
    got = consume_all(boot, "sa-out", 2, 400)
    assert sorted(m.key() for m in got) == sorted(a["key"] for a in acked)


def test_streaming_query_with_a_checkpoint_on_executors(standalone_spark, boot, tmp_path):
    spark = standalone_spark
    create_topic(boot, "sa-stream", partitions=3)
    first = produce(boot, "sa-stream", 150)

    def run() -> None:
        rows = (spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", boot)
                .option("subscribe", "sa-stream").option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "60").load()
                .selectExpr("partition", "offset", "cast(key as string) as key"))
        query = (rows.writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        assert query.awaitTermination(QUERY_TIMEOUT_S)
        assert query.exception() is None

    run()
    second = produce(boot, "sa-stream", 90, first=150)
    run()
    got = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r["partition"], r["offset"]) for r in got) == sorted((a["partition"], a["offset"])
                                                                      for a in first + second)
