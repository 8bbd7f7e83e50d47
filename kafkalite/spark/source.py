"""KafkaliteDataSource: Spark's Kafka source and sink on PySpark 4's Python Data Source API.

Register with `spark.dataSource.register(KafkaliteDataSource)`, then use the format
`kafkalite`. The batch reader plans offset ranges on the driver and reads each range on an
executor by assignment (no consumer group). The streaming reader keeps Spark's Kafka
offsets (JSON per partition) in the query's checkpoint and plans each micro-batch the same
way. The writers live in `kafkalite.spark.sink`.

Every decision (which offsets, how many per trigger, what counts as data loss) is a pure
function of `kafkalite.spark.offsets`; this module only asks the cluster for the facts.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from kafkalite.spark import client
from kafkalite.spark.errors import KafkaliteSparkOptionError
from kafkalite.spark.offsets import (
    OffsetRange,
    Plan,
    backlog,
    next_end,
    offsets_from_dict,
    offsets_to_dict,
    plan_batch,
    plan_micro_batch,
    resolve_offsets,
    select_partitions,
    skip_trigger,
    timestamp_requests,
)
from kafkalite.spark.options import GlobalTimestamp, SourceOptions, SpecificTimestamps, parse_source_options

log = logging.getLogger(__name__)

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"


def _include_headers(options: Mapping[str, str]) -> bool:
    raw = {str(k).lower(): str(v) for k, v in options.items()}.get("includeheaders", "false").strip().lower()
    if raw not in ("true", "false"):
        raise KafkaliteSparkOptionError("includeHeaders", f"must be 'true' or 'false', not {raw!r}")
    return raw == "true"


class KafkaliteDataSource(DataSource):
    """The `kafkalite` format: Spark's Kafka options and schema."""

    @classmethod
    def name(cls) -> str:
        return "kafkalite"

    def schema(self) -> str:
        return SCHEMA + (", " + HEADERS_FIELD if _include_headers(self.options) else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaliteBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaliteStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafkalite.spark.sink import KafkaliteBatchWriter

        return KafkaliteBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafkalite.spark.sink import KafkaliteStreamWriter

        return KafkaliteStreamWriter(self.options, schema)


class RangePartition(InputPartition):
    """One offset range and everything an executor needs to read it (it has no driver state)."""

    def __init__(self, offset_range: OffsetRange, consumer_config: Mapping[str, str], *, include_headers: bool,
                 fail_on_data_loss: bool, poll_timeout_ms: int) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range
        self.consumer_config = dict(consumer_config)
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.poll_timeout_ms = poll_timeout_ms


def _range_partitions(plan: Plan, options: SourceOptions) -> list[InputPartition]:
    for warning in plan.warnings:
        log.warning("%s: skipping (failOnDataLoss=false)", warning)
    config = client.consumer_config(options)
    return [RangePartition(r, config, include_headers=options.include_headers,
                           fail_on_data_loss=options.fail_on_data_loss,
                           poll_timeout_ms=options.poll_timeout_ms) for r in plan.ranges]


def _read(partition: InputPartition) -> Iterator:
    if not isinstance(partition, RangePartition):
        # A plan without ranges (nothing to read): PySpark still runs one task, with a
        # bare InputPartition(None).
        assert partition.value is None, partition
        return
    yield from client.read_range(partition.offset_range, partition.consumer_config,
                                 include_headers=partition.include_headers,
                                 fail_on_data_loss=partition.fail_on_data_loss,
                                 poll_timeout_ms=partition.poll_timeout_ms)


def plan_ranges(options: SourceOptions) -> Plan:
    """The driver's planning of a batch read: metadata, watermarks and timestamp lookups from
    the cluster, the decisions from `offsets`."""
    assert options.ending is not None, "batch reads have an end"
    consumer = client.open_consumer(client.consumer_config(options))
    try:
        partitions, missing = select_partitions(options.strategy, client.topic_partition_counts(consumer))
        if missing:
            message = f"assigned partitions do not exist: {sorted(missing)}"
            if options.fail_on_data_loss:
                raise KafkaliteSparkOptionError("assign", message)
            log.warning("%s: skipping them (failOnDataLoss=false)", message)
        retry = _retry(options)
        marks = client.watermarks_of(consumer, partitions, **retry)
        start_name = _spec_option(options.starting, "starting")
        end_name = _spec_option(options.ending, "ending")
        found = client.offsets_for_times(consumer, timestamp_requests(options.starting, partitions, start_name), **retry)
        starts = resolve_offsets(options.starting, partitions, marks, found, option=start_name,
                                 no_match_latest=options.timestamp_no_match_latest)
        found = client.offsets_for_times(consumer, timestamp_requests(options.ending, partitions, end_name), **retry)
        ends = resolve_offsets(options.ending, partitions, marks, found, option=end_name, no_match_latest=True)
    finally:
        consumer.close()
    return plan_batch(starts, ends, marks, fail_on_data_loss=options.fail_on_data_loss,
                      min_partitions=options.min_partitions)


def _retry(options: SourceOptions) -> dict[str, int]:
    """fetchOffset.numRetries and fetchOffset.retryIntervalMs, which Spark applies to every
    offset lookup of the driver (watermarks and timestamps, batch and streaming)."""
    return {"retries": options.fetch_offset_retries, "retry_interval_ms": options.fetch_offset_retry_interval_ms}


def _spec_option(spec, prefix: str) -> str:
    if isinstance(spec, GlobalTimestamp):
        return f"{prefix}Timestamp"
    if isinstance(spec, SpecificTimestamps):
        return f"{prefix}OffsetsByTimestamp"
    return f"{prefix}Offsets"


class KafkaliteBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return _range_partitions(plan_ranges(self.options), self.options)

    def read(self, partition: InputPartition) -> Iterator:
        return _read(partition)


class KafkaliteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's KafkaMicroBatchStream. Offsets are {"topic": {"partition": offset}}; each
    call asks the cluster afresh (one driver consumer, opened on first use), so a restarted
    query needs nothing but its checkpoint. Executors get everything in the partition."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._consumer = None
        self._available_now: dict | None = None  # Trigger.AvailableNow's target
        # When the last batch ran, for minOffsetsPerTrigger / maxTriggerDelay. Never, at
        # first: the first trigger after a (re)start runs whatever it finds, as in Spark
        # (its lastTriggerMillis starts at 0), instead of waiting up to maxTriggerDelay.
        self._last_trigger = -math.inf

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_consumer"] = None  # a client never travels; read() needs none
        return state

    def _driver(self):
        if self._consumer is None:
            self._consumer = client.open_consumer(client.consumer_config(self.options))
        return self._consumer

    def _current(self) -> dict:
        """The partitions the query reads now, with their watermarks."""
        consumer = self._driver()
        partitions, missing = select_partitions(self.options.strategy, client.topic_partition_counts(consumer))
        if missing:
            log.warning("assigned partitions do not exist (yet): %s", sorted(missing))
        return client.watermarks_of(consumer, partitions, **_retry(self.options))

    def initialOffset(self) -> dict:
        spec = self.options.starting
        marks = self._current()
        consumer = self._driver()
        name = _spec_option(spec, "starting")
        found = client.offsets_for_times(consumer, timestamp_requests(spec, list(marks), name), **_retry(self.options))
        start = resolve_offsets(spec, list(marks), marks, found, option=name,
                                no_match_latest=self.options.timestamp_no_match_latest)
        return offsets_to_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        marks = self._current()
        self._available_now = offsets_to_dict({tp: m.latest for tp, m in marks.items()})
        log.info("Trigger.AvailableNow: reading up to %s", self._available_now)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_dict(start)
        marks = self._current()
        latest = {tp: m.latest for tp, m in marks.items()}
        earliest = {tp: m.earliest for tp, m in marks.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        cap = offsets_from_dict(self._available_now) if self._available_now is not None else None
        end = next_end(begin, latest, earliest, max_rows=max_rows, cap=cap)
        waited_ms = (time.monotonic() - self._last_trigger) * 1000
        if skip_trigger(backlog(begin, end, earliest), min_records=self.options.min_offsets_per_trigger,
                        waited_ms=waited_ms, max_delay_ms=self.options.max_trigger_delay_ms,
                        available_now=self._available_now is not None):
            return start
        self._last_trigger = time.monotonic()
        return offsets_to_dict(end)

    def reportLatestOffset(self) -> dict | None:
        marks = self._current()
        return offsets_to_dict({tp: m.latest for tp, m in marks.items()})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, until = offsets_from_dict(start), offsets_from_dict(end)
        if begin == until:
            return []
        marks = self._current()
        # A partition of `until` that no longer exists (its topic deleted since) is lost:
        # leaving it out of the end makes the plan say so.
        until = {tp: offset for tp, offset in until.items() if tp in marks}
        plan = plan_micro_batch(begin, until, marks, fail_on_data_loss=self.options.fail_on_data_loss,
                                min_partitions=self.options.min_partitions)
        return _range_partitions(plan, self.options)

    def read(self, partition: InputPartition) -> Iterator:
        return _read(partition)

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the cluster, as in Spark

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
