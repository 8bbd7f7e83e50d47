"""confluent-kafka I/O of the Spark source and sink: the driver's view of partitions and
offsets, an executor's read of one offset range as Arrow record batches, and a task's
idempotent producer. Everything an executor needs arrives as arguments (no driver state).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kafkalite.spark.errors import KafkaliteDataLossError, KafkaliteSparkOptionError
from kafkalite.spark.offsets import OffsetRange, Watermarks
from kafkalite.spark.options import SourceOptions

log = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 30.0
BATCH_ROWS_MAX = 4096  # rows per Arrow record batch
CONSUME_MESSAGES_MAX = 1000  # per Consumer.consume call
CONSUME_WAIT_S = 0.5

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
# librdkafka's timestamp types (none, create, log append) as Kafka's ids, as Spark shows them.
_TIMESTAMP_TYPE = {0: -1, 1: 0, 2: 1}


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def consumer_config(options: SourceOptions) -> dict[str, str]:
    """A consumer that reads by assignment only: a group id because librdkafka wants one, but
    nothing is ever committed; an offset out of range is an error, never a silent reset."""
    config: dict[str, str] = {"group.id": f"{options.group_id_prefix}-{uuid.uuid4().hex}"}
    config.update(options.client_config)
    config.update({"bootstrap.servers": options.bootstrap_servers, "enable.auto.commit": "false",
                   "enable.auto.offset.store": "false", "auto.offset.reset": "error", "enable.partition.eof": "true"})
    return config


def open_consumer(config: Mapping[str, str]) -> Consumer:
    try:
        return Consumer(dict(config))
    except KafkaException as e:  # an unknown or invalid kafka.* option
        raise KafkaliteSparkOptionError("kafka.*", f"the Kafka client refused its configuration: {e}") from None


@dataclass(frozen=True)
class DriverView:
    topics: dict[str, int]  # topic -> partition count
    watermarks: dict[tuple[str, int], Watermarks]


def topic_partition_counts(consumer: Consumer) -> dict[str, int]:
    metadata = consumer.list_topics(timeout=METADATA_TIMEOUT_S)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def watermarks_of(consumer: Consumer, partitions: list[tuple[str, int]], *, retries: int = 0,
                  retry_interval_ms: int = 0) -> dict[tuple[str, int], Watermarks]:
    """Each partition's log start and log end, from its leader. A partition whose leader is
    moving answers a retriable error: asked again up to `retries` times (fetchOffset.numRetries,
    fetchOffset.retryIntervalMs apart)."""
    result = {}
    for topic, partition in partitions:
        for attempt in range(retries + 1):
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                           timeout=METADATA_TIMEOUT_S, cached=False)
                break
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if attempt == retries or (err is not None and not _retriable_lookup(err)):
                    raise
                log.info("watermarks of %s-%d: %s; asking again in %d ms", topic, partition, e, retry_interval_ms)
                time.sleep(retry_interval_ms / 1000)
        result[(topic, partition)] = Watermarks(low, high)
    return result


def _retriable_lookup(err: KafkaError) -> bool:
    return err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.LEADER_NOT_AVAILABLE,
                                             KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.OFFSET_NOT_AVAILABLE,
                                             KafkaError._ALL_BROKERS_DOWN)


def offsets_for_times(consumer: Consumer, requests: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int | None]:
    """The first offset whose timestamp is >= the requested ms per partition; None if none."""
    if not requests:
        return {}
    found = consumer.offsets_for_times([TopicPartition(t, p, ts) for (t, p), ts in requests.items()],
                                       timeout=METADATA_TIMEOUT_S)
    result: dict[tuple[str, int], int | None] = {}
    for tp in found:
        if tp.error is not None:
            raise KafkaException(tp.error)
        result[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
    return result


# -- executor: one offset range -------------------------------------------------------------

class _Rows:
    """Columns of the record batch being built."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.columns: dict[str, list] = {name: [] for name in arrow_schema(include_headers).names}

    def __len__(self) -> int:
        return len(self.columns["offset"])

    def add(self, msg) -> None:
        c = self.columns
        ts_type, ts = msg.timestamp()
        c["key"].append(msg.key())
        c["value"].append(msg.value())
        c["topic"].append(msg.topic())
        c["partition"].append(msg.partition())
        c["offset"].append(msg.offset())
        c["timestamp"].append(ts * 1000 if ts_type != 0 and ts >= 0 else None)
        c["timestampType"].append(_TIMESTAMP_TYPE.get(ts_type, -1))
        if self.include_headers:
            headers = msg.headers()
            c["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else None)

    def take(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pydict(self.columns, schema=arrow_schema(self.include_headers))
        self.columns = {name: [] for name in self.columns}
        return batch


def read_range(r: OffsetRange, config: Mapping[str, str], *, include_headers: bool, fail_on_data_loss: bool,
               poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    """The records of [from, until) of one partition as Arrow record batches. A compacted
    log has gaps, so the read stops once the position reaches `until`, not after a count.
    Offsets deleted since planning are data loss: an error, or skipped with a warning."""
    if r.size == 0:
        return
    consumer = open_consumer(config)
    try:
        yield from _read_assigned(consumer, r, include_headers=include_headers, fail_on_data_loss=fail_on_data_loss,
                                  poll_timeout_ms=poll_timeout_ms)
    finally:
        consumer.close()


def _read_assigned(consumer: Consumer, r: OffsetRange, *, include_headers: bool, fail_on_data_loss: bool,
                   poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    tp = TopicPartition(r.topic, r.partition, r.from_offset)
    consumer.assign([tp])
    rows = _Rows(include_headers)
    position = r.from_offset
    deadline = time.monotonic() + poll_timeout_ms / 1000
    while position < r.until_offset:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no progress reading {r.topic}-{r.partition} at offset {position} (until "
                               f"{r.until_offset}) within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}")
        for msg in consumer.consume(CONSUME_MESSAGES_MAX, CONSUME_WAIT_S):
            err = msg.error()
            if err is not None:
                position = _after_error(consumer, r, position, err, fail_on_data_loss)
                continue
            if msg.offset() >= r.until_offset:
                position = r.until_offset
                break
            if msg.offset() < position:  # a re-delivery after a seek
                continue
            rows.add(msg)
            position = msg.offset() + 1
            deadline = time.monotonic() + poll_timeout_ms / 1000
            if len(rows) >= BATCH_ROWS_MAX:
                yield rows.take()
    if len(rows):
        yield rows.take()


def _after_error(consumer: Consumer, r: OffsetRange, position: int, err: KafkaError, fail_on_data_loss: bool) -> int:
    """The position to go on from after a consume error; raises on anything else."""
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        return position  # more may come (the range ends at or below the HW seen by the driver)
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, high = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=METADATA_TIMEOUT_S,
                                                   cached=False)
        message = (f"offsets from {position} of {r.topic}-{r.partition} are gone (the log is now [{low}, {high})); "
                   f"the query wanted until {r.until_offset}")
        if fail_on_data_loss:
            raise KafkaliteDataLossError(message + ". Some data may have been lost; set failOnDataLoss=false to "
                                                   "skip it with a warning")
        log.warning("%s: skipping (failOnDataLoss=false)", message)
        if low >= r.until_offset or low <= position:
            return r.until_offset
        consumer.seek(TopicPartition(r.topic, r.partition, low))
        return low
    if err.retriable():
        return position
    raise KafkaException(err)


# -- sink: one task's producer ----------------------------------------------------------------

def producer_config(bootstrap_servers: str, client_config: Mapping[str, str]) -> dict[str, str]:
    config = dict(client_config)
    config.update({"bootstrap.servers": bootstrap_servers, "enable.idempotence": "true", "acks": "all"})
    return config


def open_producer(config: Mapping[str, str]) -> Producer:
    try:
        return Producer(dict(config))
    except KafkaException as e:
        raise KafkaliteSparkOptionError("kafka.*", f"the Kafka client refused its configuration: {e}") from None
