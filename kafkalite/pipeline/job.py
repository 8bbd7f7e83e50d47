"""The pipeline's Spark job: input topic -> validate -> dead letters + windowed aggregates.

Two streaming queries over the same input topic (the `kafkalite` source), each with its own
checkpoint under ``--checkpoint``:

- ``dead-letters``: every record that `events.validate` rejects, with its original key and
  value and the headers ``error.reason`` / ``error.detail``, through the `kafkalite`
  streaming sink to the dead-letter topic.
- ``aggregates``: every record `validate` accepts, ``withWatermark("event_time", "10
  seconds")``, grouped by a 10 s tumbling event-time window and (type, currency): count and
  sum of amounts (``decimal(27,2)``, exact), in append mode -- exactly what
  `kafkalite.pipeline.reference` documents. A `foreachBatch` writes each micro-batch's
  final windows to both the output topic and Parquet: one aggregation, two sinks.

Why two queries and not one: a streaming query has one sink, and the stateful aggregation
must be in the streaming plan (its state lives in the checkpoint), so the rejected records
cannot leave through the aggregation's `foreachBatch`. Each query therefore parses the input
itself: validation runs twice per record. The price is CPU, not correctness: both queries
apply the same pure function, and each keeps its own offsets.

Parsing is Arrow-based (a scalar `arrow_udf`): the Python worker gets Arrow arrays of
values and returns an array of parsed structs, with `validate` applied to each value -- the
very function the reference uses, so the job and the reference cannot disagree about which
records are good. The pure parts (`parse_values`, `window_key`, `window_record`) take and
return Arrow or plain values and are unit-tested without Spark. The DataFrame functions (`parsed_events`,
`dead_letters`, `window_aggregates`, `window_records`) take a DataFrame of the source's
schema, so they work on a batch read just as on a stream.

## Delivery guarantees (what a restart or a task retry can repeat)
- Parquet: exactly once per micro-batch. Batch N is written with mode "overwrite" to
  ``<parquet>/batch=N/``; a batch that Spark re-runs after a failure (same N, and the same
  rows: the state store is versioned per batch) replaces its own directory.
- Output topic: at least once. A batch re-run after a failure between the topic write and
  Spark's commit sends its rows again. A duplicate is byte-identical (same key
  ``window_start|type|currency``, same value): each window row is final when emitted, so a
  reader deduplicates by key.
- Dead-letter topic: at least once, as the `kafkalite` sink (a retried task re-sends).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from kafkalite.pipeline import job_defaults
from kafkalite.pipeline.events import DETAIL_HEADER, ORDER, REASON_HEADER, Rejection, format_event_time, validate
from kafkalite.pipeline.reference import WATERMARK_DELAY_MS, WINDOW_MS

# Stateful queries fix their shuffle partition count in the checkpoint; small, for 2 cores.
SHUFFLE_PARTITIONS = 2
AGGREGATES_QUERY = "aggregates"
DEAD_LETTERS_QUERY = "dead-letters"
BATCH_PARTITION = "batch"  # <parquet>/batch=N/

CENTS = Decimal("0.01")
AMOUNT_SQL_TYPE = "decimal(17,2)"  # events.AMOUNT_INTEGER_DIGITS_MAX integer digits + 2
AMOUNT_ARROW_TYPE = pa.decimal128(17, 2)
PARSED_SQL_TYPE = (f"struct<event_type: string, currency: string, amount: {AMOUNT_SQL_TYPE}, event_time: timestamp, "
                   "reason: string, detail: string>")
PARSED_ARROW_TYPE = pa.struct([
    pa.field("event_type", pa.string()), pa.field("currency", pa.string()), pa.field("amount", AMOUNT_ARROW_TYPE),
    pa.field("event_time", pa.timestamp("us", tz="UTC")), pa.field("reason", pa.string()), pa.field("detail", pa.string())])
# The aggregate rows, as Parquet holds them (plus the batch=N partition column).
WINDOW_COLUMNS = ("window_start", "window_end", "type", "currency", "count", "amount_sum")


class PipelineError(Exception):
    """An operating error of the pipeline that a user can fix (e.g. the directories); one line."""


# -- the pure parts ------------------------------------------------------------------------

def parse_values(values: list[bytes | None]) -> pa.StructArray:
    """`validate` each record value: one PARSED_ARROW_TYPE struct per value, in order. An
    accepted event has reason null; a rejected record has only reason and detail set. A null
    value is rejected as `validate(b"")` is (not_json)."""
    types, currencies, amounts, times, reasons, details = [], [], [], [], [], []
    for value in values:
        result = validate(value if value is not None else b"")
        if isinstance(result, Rejection):
            for column in (types, currencies, amounts, times):
                column.append(None)
            reasons.append(result.reason)
            details.append(result.detail)
            continue
        types.append(result.event_type)
        if result.event_type == ORDER:
            currencies.append(result.currency)
            amounts.append(result.amount.quantize(CENTS))  # exact: validate allows at most 2 places
        else:
            currencies.append("")  # as the reference: clicks group under currency ""
            amounts.append(Decimal(0))
        times.append(result.event_time_ms * 1000)
        reasons.append(None)
        details.append(None)
    return pa.StructArray.from_arrays([
        pa.array(types, pa.string()), pa.array(currencies, pa.string()), pa.array(amounts, AMOUNT_ARROW_TYPE),
        pa.array(times, pa.int64()).cast(pa.timestamp("us", tz="UTC")), pa.array(reasons, pa.string()),
        pa.array(details, pa.string())], fields=list(PARSED_ARROW_TYPE))


def window_key(window_start_ms: int, event_type: str, currency: str) -> str:
    """The output topic's record key of one window row (unique per row; a reader dedupes by it)."""
    return f"{format_event_time(window_start_ms)}|{event_type}|{currency}"


def window_record(window_start_ms: int, event_type: str, currency: str, count: int, amount_sum: Decimal) -> dict[str, Any]:
    """One window row as the output topic's JSON value (decoded). `amount_sum` is a JSON
    number with its exact digits; read it with `json.loads(..., parse_float=Decimal)`."""
    return {"window_start": format_event_time(window_start_ms),
            "window_end": format_event_time(window_start_ms + WINDOW_MS),
            "type": event_type, "currency": currency, "count": count, "amount_sum": amount_sum}


def parse_arrow(values: pa.Array) -> pa.Array:
    """`parse_values` over an Arrow array of values (the signature arrow_udf wants)."""
    return parse_values(values.to_pylist())


# -- the DataFrame transformations (batch or stream) ---------------------------------------

def _parse_column():
    """The Arrow UDF around `parse_values` (a scalar Arrow UDF: no pandas needed, unlike
    mapInArrow/mapInPandas, which PySpark wraps in a pandas UDF)."""
    from pyspark.sql.functions import arrow_udf

    return arrow_udf(parse_arrow, PARSED_SQL_TYPE)


def parsed(records):
    """Source rows -> key, value and `parsed` (the PARSED_SQL_TYPE struct of each value)."""
    return records.select("key", "value", _parse_column()("value").alias("parsed"))


def parsed_events(records):
    """Source rows -> accepted events: event_type, currency ("" for clicks), amount, event_time."""
    from pyspark.sql import functions as F

    return (parsed(records).where(F.col("parsed.reason").isNull())
            .select("parsed.event_type", "parsed.currency", "parsed.amount", "parsed.event_time"))


def dead_letters(records):
    """Source rows -> dead-letter rows for the `kafkalite` sink: the original key and value,
    headers error.reason and error.detail (UTF-8)."""
    from pyspark.sql import functions as F

    def header(name: str, column: str):
        return F.struct(F.lit(name).alias("key"), F.col(column).cast("binary").alias("value"))

    return (parsed(records).where(F.col("parsed.reason").isNotNull())
            .select("key", "value", F.array(header(REASON_HEADER, "parsed.reason"),
                                            header(DETAIL_HEADER, "parsed.detail")).alias("headers")))


def window_aggregates(events):
    """Accepted events -> one row per (10 s window, type, currency): WINDOW_COLUMNS. On a
    stream, in append mode, each row is emitted once, final, when the watermark (10 s behind
    the maximum event time) passes the window's end (reference.py's rules 1-4)."""
    from pyspark.sql import functions as F

    return (events.withWatermark("event_time", f"{WATERMARK_DELAY_MS // 1000} seconds")
            .groupBy(F.window("event_time", f"{WINDOW_MS // 1000} seconds"), "event_type", "currency")
            .agg(F.count("*").alias("count"), F.sum("amount").alias("amount_sum"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    F.col("event_type").alias("type"), "currency", "count", "amount_sum"))


def window_records(windows):
    """Window rows -> output topic rows: key "window_start|type|currency" (as `window_key`),
    value the JSON of `window_record`. Times are formatted in UTC whatever the session's zone."""
    from pyspark.sql import functions as F

    def iso(column: str):
        return F.date_format(F.to_utc_timestamp(F.col(column), F.current_timezone()), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")

    return windows.select(
        F.concat_ws("|", iso("window_start"), "type", "currency").alias("key"),
        F.to_json(F.struct(iso("window_start").alias("window_start"), iso("window_end").alias("window_end"),
                           "type", "currency", "count", "amount_sum")).alias("value"))


# -- the streaming job ---------------------------------------------------------------------

@dataclass(frozen=True)
class PipelineConfig:
    bootstrap: str
    checkpoint_dir: str
    parquet_dir: str
    input_topic: str = job_defaults.INPUT_TOPIC
    output_topic: str = job_defaults.OUTPUT_TOPIC
    dead_letter_topic: str = job_defaults.DEAD_LETTER_TOPIC
    trigger_interval_s: float = job_defaults.TRIGGER_INTERVAL_S
    available_now: bool = False  # Trigger.AvailableNow: process what is there, then stop
    max_offsets_per_trigger: int | None = None

    def __post_init__(self) -> None:
        assert self.trigger_interval_s > 0
        assert self.max_offsets_per_trigger is None or self.max_offsets_per_trigger > 0
        assert len({self.input_topic, self.output_topic, self.dead_letter_topic}) == 3, "topics must differ"

    def checkpoint(self, query: str) -> str:
        return os.path.join(self.checkpoint_dir, query)


def build_session(master: str = job_defaults.MASTER, app_name: str = "kafkalite-pipeline"):
    """A SparkSession for the job: UTC session time, few shuffle partitions, no UI, Python
    workers on this interpreter (so they import kafkalite), the `kafkalite` format registered."""
    from pyspark.sql import SparkSession

    from kafkalite.spark import KafkaliteDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               # Streaming disables adaptive execution anyway (and warns about it twice per query).
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"]))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    spark = builder.getOrCreate()
    spark.dataSource.register(KafkaliteDataSource)
    return spark


class WindowSink:
    """foreachBatch of the aggregates query: batch N's final windows to Parquet
    (``<parquet>/batch=N/``, overwritten if the batch re-runs) and to the output topic.
    Runs on the driver; it holds only strings, so it pickles if Spark needs it to."""

    def __init__(self, config: PipelineConfig) -> None:
        self.parquet_dir = config.parquet_dir
        self.bootstrap = config.bootstrap
        self.output_topic = config.output_topic

    def __call__(self, windows, batch_id: int) -> None:
        windows = windows.persist()  # computed once (the stateful step), then written twice
        try:
            if windows.isEmpty():
                return
            # A micro-batch emits a few rows per closed window: one partition to write, so one
            # Parquet file and one producer per batch (each task of a write costs a producer
            # and a flush). Coalescing after the cache leaves the aggregation's parallelism be.
            rows = windows.coalesce(1)
            rows.write.mode("overwrite").parquet(os.path.join(self.parquet_dir, f"{BATCH_PARTITION}={batch_id}"))
            (window_records(rows).write.format("kafkalite").option("kafka.bootstrap.servers", self.bootstrap)
             .option("topic", self.output_topic).mode("append").save())
        finally:
            windows.unpersist()


def check_directories(config: PipelineConfig) -> None:
    """A fresh checkpoint with a Parquet directory that already holds batches would overwrite
    them (batch ids restart at 0): refuse. A resumed checkpoint overwrites only re-run batches."""
    fresh = not os.path.exists(os.path.join(config.checkpoint(AGGREGATES_QUERY), "metadata"))
    parquet = Path(config.parquet_dir)
    if fresh and parquet.is_dir() and any(p.name.startswith(f"{BATCH_PARTITION}=") for p in parquet.iterdir()):
        raise PipelineError(f"{config.parquet_dir} holds results of another run, but the checkpoint "
                            f"{config.checkpoint_dir} is new; use an empty --parquet directory or the old checkpoint")


def _source(spark, config: PipelineConfig):
    reader = (spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", config.bootstrap)
              .option("subscribe", config.input_topic).option("startingOffsets", "earliest"))
    if config.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    return reader.load()


def _trigger(writer, config: PipelineConfig):
    if config.available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{config.trigger_interval_s} seconds")


@dataclass
class Pipeline:
    """The two running queries."""
    aggregates: Any  # pyspark StreamingQuery
    dead_letters: Any

    @property
    def queries(self) -> tuple[Any, Any]:
        return (self.aggregates, self.dead_letters)

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until both queries stop (AvailableNow) or one fails; True if both stopped.
        A failed query raises its StreamingQueryException here."""
        import time

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for query in self.queries:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not query.awaitTermination(left):
                return False
        return True

    def stop(self) -> None:
        for query in self.queries:
            query.stop()

    def new_progress(self, seen: dict[str, int]) -> list[tuple[str, dict[str, Any]]]:
        """(query name, progress) of the micro-batches finished since `seen` (name -> last
        batch id reported; updated), oldest first."""
        out = []
        for query in self.queries:
            for progress in query.recentProgress:
                if progress["batchId"] > seen.get(query.name, -1):
                    out.append((query.name, progress))
                    seen[query.name] = progress["batchId"]
        return out


def progress_line(name: str, progress: dict[str, Any]) -> str:
    """One line per finished micro-batch: rows in, rate, and for the aggregation the
    watermark, the rows dropped as late and the windows still held in state."""
    line = (f"{name} batch {progress['batchId']}: {progress['numInputRows']} records "
            f"({progress.get('processedRowsPerSecond') or 0:.0f}/s)")
    state = progress.get("stateOperators") or []
    if state:
        watermark = (progress.get("eventTime") or {}).get("watermark", "-")
        line += (f", watermark {watermark}, {state[0].get('numRowsDroppedByWatermark', 0)} late rows dropped, "
                 f"{state[0].get('numRowsTotal', 0)} open windows")
    return line


def start(spark, config: PipelineConfig, window_sink: WindowSink | None = None) -> Pipeline:
    """Start both queries (resuming from their checkpoints if they exist). `window_sink`
    replaces the aggregation's foreachBatch (tests inject failures with it)."""
    check_directories(config)
    Path(config.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    Path(config.parquet_dir).mkdir(parents=True, exist_ok=True)
    letters = (_trigger(dead_letters(_source(spark, config)).writeStream.format("kafkalite")
                        .queryName(DEAD_LETTERS_QUERY)
                        .option("kafka.bootstrap.servers", config.bootstrap).option("topic", config.dead_letter_topic)
                        .option("checkpointLocation", config.checkpoint(DEAD_LETTERS_QUERY)), config)).start()
    try:
        windows = window_aggregates(parsed_events(_source(spark, config)))
        aggregates = (_trigger(windows.writeStream.outputMode("append").queryName(AGGREGATES_QUERY)
                               .foreachBatch(window_sink or WindowSink(config))
                               .option("checkpointLocation", config.checkpoint(AGGREGATES_QUERY)), config)).start()
    except BaseException:
        letters.stop()
        raise
    return Pipeline(aggregates, letters)
