"""The `kafkalite` sink, batch and streaming: Spark's Kafka sink columns (`value` required;
`key`, `topic`, `partition`, `headers` optional; the `topic` option overrides the column).

Each task writes its rows with its own idempotent acks=all producer and flushes before it
reports success; a failed delivery raises, so the task fails and Spark retries it. A retry
writes the task's rows again: at-least-once, as Spark's Kafka sink.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from kafkalite.spark import client
from kafkalite.spark.errors import KafkaliteSparkOptionError
from kafkalite.spark.options import SinkOptions, parse_sink_options

log = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 120.0
BUFFER_FULL_WAIT_S = 0.1


@dataclass
class WrittenRows(WriterCommitMessage):
    rows: int


def check_schema(schema: StructType, options: SinkOptions) -> None:
    """Spark's sink checks, on the driver before any task runs; errors name the column.

    Column names are matched exactly, as Spark's KafkaWriter does (`_.name == "value"`,
    whatever spark.sql.caseSensitive says), and as each task looks them up. Where Spark
    would ignore a column named like a sink column but for case (`Key`: every key null),
    or fail for lack of the column (`Value`), it is refused here, naming it."""
    types = {f.name: f.dataType for f in schema.fields}
    used = ["key", "value", "partition", "headers"] + (["topic"] if options.topic is None else [])
    for name in used:
        near = [f for f in types if f != name and f.lower() == name]
        if name not in types and near:
            raise KafkaliteSparkOptionError(name, f"column {near[0]!r} is not the sink's {name!r} column: column "
                                                  f"names are case-sensitive, as in Spark's Kafka sink; rename it "
                                                  f"to {name!r}")
    if "value" not in types:
        raise KafkaliteSparkOptionError("value", "the sink requires a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], StringType | BinaryType):
            raise KafkaliteSparkOptionError(name, f"the '{name}' column must be string or binary, not {types[name]}")
    if options.topic is None:
        if "topic" not in types:
            raise KafkaliteSparkOptionError("topic", "the sink needs a 'topic' option or a 'topic' column")
        if not isinstance(types["topic"], StringType):
            raise KafkaliteSparkOptionError("topic", f"the 'topic' column must be a string, not {types['topic']}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise KafkaliteSparkOptionError("partition", f"the 'partition' column must be an int, not {types['partition']}")
    if "headers" in types:
        h = types["headers"]
        ok = isinstance(h, ArrayType) and isinstance(h.elementType, StructType) and \
            [f.name for f in h.elementType.fields] == ["key", "value"] and \
            isinstance(h.elementType.fields[0].dataType, StringType) and \
            isinstance(h.elementType.fields[1].dataType, BinaryType)
        if not ok:
            raise KafkaliteSparkOptionError("headers", f"the 'headers' column must be array<struct<key: string, "
                                                       f"value: binary>>, not {h}")


def _bytes(value) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


def write_rows(options: SinkOptions, rows: Iterator) -> WrittenRows:
    """One task: produce every row, flush, and raise unless every delivery succeeded."""
    producer = client.open_producer(client.producer_config(options.bootstrap_servers, options.client_config))
    failures: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            failures.append(f"{msg.topic()}-{msg.partition()}: {err}")

    count = 0
    for row in rows:
        fields = row.asDict()
        topic = options.topic or fields.get("topic")
        if topic is None:
            raise KafkaliteSparkOptionError("topic", "a row has a null 'topic' and no 'topic' option is set")
        kwargs = {}
        if fields.get("partition") is not None:
            kwargs["partition"] = fields["partition"]
        headers = fields.get("headers")
        if headers:
            kwargs["headers"] = [(h["key"], _bytes(h["value"])) for h in headers]
        while True:
            try:
                producer.produce(topic, value=_bytes(fields["value"]), key=_bytes(fields.get("key")),
                                 on_delivery=delivered, **kwargs)
                break
            except BufferError:  # the local queue is full: serve delivery reports and retry
                producer.poll(BUFFER_FULL_WAIT_S)
        producer.poll(0)
        count += 1
        if failures:
            break
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if failures:
        raise RuntimeError(f"kafkalite sink: {len(failures)} deliveries failed, first {failures[0]}; the task fails "
                           "so that Spark retries it")
    if remaining:
        raise RuntimeError(f"kafkalite sink: {remaining} records not delivered within {FLUSH_TIMEOUT_S} s")
    return WrittenRows(count)


def _checked(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    sink = parse_sink_options(options)
    check_schema(schema, sink)
    if sink.topic is not None:
        client.check_topic_writable(sink.bootstrap_servers, sink.client_config, sink.topic)
    return sink


class KafkaliteBatchWriter(DataSourceWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = _checked(options, schema)

    def write(self, iterator: Iterator) -> WriterCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages: list) -> None:
        log.info("kafkalite sink wrote %d rows", sum(m.rows for m in messages if m is not None))

    def abort(self, messages: list) -> None:
        # Records of tasks that succeeded stay written: Kafka has no rollback without transactions.
        log.warning("kafkalite sink aborted; rows written by succeeded tasks stay in the topic")


class KafkaliteStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = _checked(options, schema)

    def write(self, iterator: Iterator) -> WriterCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages: list, batchId: int) -> None:
        log.info("kafkalite sink batch %d wrote %d rows", batchId, sum(m.rows for m in messages if m is not None))

    def abort(self, messages: list, batchId: int) -> None:
        log.warning("kafkalite sink batch %d aborted; rows written by succeeded tasks stay in the topic", batchId)
