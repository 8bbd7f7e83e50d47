"""The plain-Python reference's append-mode rules (kafkalite.pipeline.reference) against a
real local Spark streaming query: the same events, in the same micro-batches, through
withWatermark + a tumbling-window groupBy in append mode, give exactly the reference's
emitted windows. Batches are pinned with the file source and maxFilesPerTrigger=1 (one
file per micro-batch), so this checks the watermark semantics without the kafkalite data
source."""

from __future__ import annotations

import json
import os
from decimal import Decimal

import pytest

pytest.importorskip("pyspark")

from kafkalite.pipeline.events import ORDER, GeneratorConfig, Rejection, generate, validate
from kafkalite.pipeline.reference import WATERMARK_DELAY_MS, WINDOW_MS, WindowKey, append_mode_output

PER_BATCH = 50
QUERY_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("reference-vs-spark")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    try:
        yield session
    finally:
        session.stop()


def _batches(seed: int, batches: int):
    config = GeneratorConfig(seed=seed, rate_per_s=10, bad_fraction=0.1, late_fraction=0.15, late_by_ms=30_000)
    records = generate(config, batches * PER_BATCH)
    events = [e for e in (validate(r.value) for r in records) if not isinstance(e, Rejection)]
    size = -(-len(events) // batches)
    return [events[i:i + size] for i in range(0, len(events), size)]


def _write_batches(directory, batches) -> None:
    directory.mkdir()
    for i, batch in enumerate(batches):
        path = directory / f"batch-{i:03d}.json"
        with open(path, "w") as f:
            for e in batch:
                f.write(json.dumps({
                    "event_type": e.event_type, "currency": e.currency if e.event_type == ORDER else "",
                    "amount": str(e.amount) if e.event_type == ORDER else "0", "ts_ms": e.event_time_ms}) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the file source orders by mtime


@pytest.mark.parametrize(("seed", "batch_count"), [(3, 8), (11, 5)])
def test_spark_append_mode_emits_exactly_the_reference_windows(spark, tmp_path, seed, batch_count):
    from pyspark.sql import functions as F

    batches = _batches(seed, batch_count)
    expected = append_mode_output(batches)
    assert expected.dropped_late, "the example must exercise late-row dropping"
    assert expected.emitted and expected.open_windows
    _write_batches(tmp_path / "in", batches)

    rows = (spark.readStream.schema("event_type string, currency string, amount string, ts_ms long")
            .option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
            .withColumn("event_time", F.timestamp_millis("ts_ms"))
            .withWatermark("event_time", f"{WATERMARK_DELAY_MS // 1000} seconds")
            .groupBy(F.window("event_time", f"{WINDOW_MS // 1000} seconds"), "event_type", "currency")
            .agg(F.count("*").alias("count"), F.sum(F.col("amount").cast("decimal(18,2)")).alias("amount_sum")))
    query = (rows.writeStream.outputMode("append").format("memory").queryName(f"reference_check_{seed}")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish"
        data_batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert len(data_batches) == len(batches), [p["numInputRows"] for p in query.recentProgress]
        got = {}
        for r in spark.sql(f"select * from reference_check_{seed}").collect():
            key = WindowKey(int(r["window"]["start"].timestamp() * 1000), r["event_type"], r["currency"])
            assert key not in got
            got[key] = (r["count"], Decimal(r["amount_sum"]))
    finally:
        query.stop()
    want = {k: (a.count, a.amount_sum) for k, a in expected.emitted.items()}
    assert got == want
