"""KafkaliteDataSource: Spark's Kafka source and sink on PySpark 4's Python Data Source API.

Register with `spark.dataSource.register(KafkaliteDataSource)`, then use the format
`kafkalite`. The batch reader plans offset ranges on the driver and reads each range on an
executor by assignment (no consumer group). The writers live in `kafkalite.spark.sink`.
Streaming reads are not built yet.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamWriter, DataSourceWriter, InputPartition
from pyspark.sql.types import StructType

from kafkalite.spark import client
from kafkalite.spark.errors import KafkaliteSparkOptionError
from kafkalite.spark.offsets import OffsetRange, plan_batch, resolve_offsets, select_partitions, timestamp_requests
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


def plan_ranges(options: SourceOptions) -> tuple[OffsetRange, ...]:
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
        marks = client.watermarks_of(consumer, partitions)
        start_name = _spec_option(options.starting, "starting")
        end_name = _spec_option(options.ending, "ending")
        starts = resolve_offsets(options.starting, partitions, marks,
                                 client.offsets_for_times(consumer, timestamp_requests(options.starting, partitions, start_name)),
                                 option=start_name, no_match_latest=options.timestamp_no_match_latest)
        ends = resolve_offsets(options.ending, partitions, marks,
                               client.offsets_for_times(consumer, timestamp_requests(options.ending, partitions, end_name)),
                               option=end_name, no_match_latest=True)
    finally:
        consumer.close()
    plan = plan_batch(starts, ends, marks, fail_on_data_loss=options.fail_on_data_loss,
                      min_partitions=options.min_partitions)
    for warning in plan.warnings:
        log.warning("%s: skipping (failOnDataLoss=false)", warning)
    return plan.ranges


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
        config = client.consumer_config(self.options)
        return [RangePartition(r, config, include_headers=self.options.include_headers,
                               fail_on_data_loss=self.options.fail_on_data_loss,
                               poll_timeout_ms=self.options.poll_timeout_ms) for r in plan_ranges(self.options)]

    def read(self, partition: InputPartition) -> Iterator:
        assert isinstance(partition, RangePartition), partition
        yield from client.read_range(partition.offset_range, partition.consumer_config,
                                     include_headers=partition.include_headers,
                                     fail_on_data_loss=partition.fail_on_data_loss,
                                     poll_timeout_ms=partition.poll_timeout_ms)
