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
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from kafkalite import leader_lookups
from kafkalite.spark.errors import KafkaliteDataLossError, KafkaliteSparkOptionError
from kafkalite.spark.offsets import OffsetRange, Watermarks
from kafkalite.spark.options import BOOTSTRAP as BOOTSTRAP_OPTION
from kafkalite.spark.options import SourceOptions

log = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 30.0
BATCH_ROWS_MAX = 4096  # rows per Arrow record batch
CONSUME_MESSAGES_MAX = 1000  # per Consumer.consume call
CONSUME_WAIT_S = 0.5
# librdkafka (>= 2.4) stops fetching a partition once queued.min.messages (100,000) are queued
# and looks again only after fetch.queue.backoff.ms, 1000 ms by default: an executor that
# drains 100,000 records in well under a second then sits idle for the rest of it (measured:
# ~1 s without a record, two or three times per 300,000-record read). A user's
# kafka.fetch.queue.backoff.ms still wins.
FETCH_QUEUE_BACKOFF_MS = 10

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
    config: dict[str, str] = {"group.id": f"{options.group_id_prefix}-{uuid.uuid4().hex}",
                              "fetch.queue.backoff.ms": str(FETCH_QUEUE_BACKOFF_MS)}
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
    """Each partition's log start and log end, from its leader (`kafkalite.leader_lookups`:
    never stuck on a leader that died). A partition whose leader is moving answers a
    retriable error: asked again up to `retries` times (fetchOffset.numRetries,
    fetchOffset.retryIntervalMs apart); one that no broker answers, until METADATA_TIMEOUT_S."""
    result = {}
    for topic, partition in partitions:
        def retrying(e: KafkaException, topic=topic, partition=partition) -> None:
            log.info("watermarks of %s-%d: %s; asking again", topic, partition, e)
        low, high = leader_lookups.watermarks(consumer, topic, partition, timeout_s=METADATA_TIMEOUT_S,
                                              retries=retries, retry_interval_s=retry_interval_ms / 1000,
                                              on_retry=retrying)
        result[(topic, partition)] = Watermarks(low, high)
    return result


def offsets_for_times(consumer: Consumer, requests: Mapping[tuple[str, int], int], *, retries: int = 0,
                      retry_interval_ms: int = 0) -> dict[tuple[str, int], int | None]:
    """The first offset whose timestamp is >= the requested ms per partition; None if none.
    From the leaders, asked again as `watermarks_of` (never stuck on one that died)."""
    if not requests:
        return {}

    def retrying(e: KafkaException) -> None:
        log.info("offsets for times of %s: %s; asking again", sorted(requests), e)
    found = leader_lookups.offsets_for_times(consumer, requests, timeout_s=METADATA_TIMEOUT_S, retries=retries,
                                             retry_interval_s=retry_interval_ms / 1000, on_retry=retrying)
    return {tp: offset if offset >= 0 else None for tp, offset in found.items()}


# -- executor: one offset range -------------------------------------------------------------

class _Rows:
    """The messages of the record batch being built. Its columns are made when it is taken,
    one comprehension per column: cheaper than appending to seven lists per message (the
    executor's Python loop is most of a read's CPU). Every message is of the one partition
    being read, so topic and partition are constants."""

    def __init__(self, r: OffsetRange, include_headers: bool) -> None:
        self.topic = pa.scalar(r.topic, pa.string())
        self.partition = pa.scalar(r.partition, pa.int32())
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self.messages: list = []

    def __len__(self) -> int:
        return len(self.messages)

    def take(self) -> pa.RecordBatch:
        messages, self.messages = self.messages, []
        n = len(messages)
        timestamps = [m.timestamp() for m in messages]
        columns = [pa.array([m.key() for m in messages], pa.binary()),
                   pa.array([m.value() for m in messages], pa.binary()),
                   pa.repeat(self.topic, n), pa.repeat(self.partition, n),
                   pa.array([m.offset() for m in messages], pa.int64()),
                   pa.array([ts * 1000 if ts_type != 0 and ts >= 0 else None for ts_type, ts in timestamps],
                            pa.timestamp("us", tz="UTC")),
                   pa.array([_TIMESTAMP_TYPE.get(ts_type, -1) for ts_type, _ in timestamps], pa.int32())]
        if self.include_headers:
            columns.append(_headers_column(messages))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _headers_column(messages: list) -> pa.Array:
    """The headers of each message as one list<struct<key, value>> array, built from flat
    keys, values and list offsets (half the time of converting a dict per header); a
    message without headers is null, as in Spark."""
    offsets = [0]
    keys: list = []
    values: list = []
    absent = []
    for m in messages:
        headers = m.headers()
        absent.append(not headers)
        for key, value in headers or ():
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
    pairs = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())],
                                       fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pairs, type=HEADER_TYPE, mask=pa.array(absent))


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
    rows = _Rows(r, include_headers)
    pending = rows.messages
    until = r.until_offset
    position = r.from_offset
    deadline = time.monotonic() + poll_timeout_ms / 1000
    while position < until:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no progress reading {r.topic}-{r.partition} at offset {position} (until "
                               f"{until}) within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}")
        progressed = position
        # Never ask for more than the range still holds: consume() waits its whole timeout
        # for a count that is not there (a partition EOF does not end the wait), which cost
        # every range ending at the HW CONSUME_WAIT_S at its end.
        for msg in consumer.consume(min(CONSUME_MESSAGES_MAX, until - position), CONSUME_WAIT_S):
            if msg.error() is not None:
                position = _after_error(consumer, r, position, msg, fail_on_data_loss)
                continue
            offset = msg.offset()
            if offset >= until:
                position = until
                break
            if offset < position:  # a re-delivery after a seek
                continue
            pending.append(msg)
            position = offset + 1
            if len(pending) >= BATCH_ROWS_MAX:
                yield rows.take()
                pending = rows.messages
        if position != progressed:
            deadline = time.monotonic() + poll_timeout_ms / 1000
    if len(rows):
        yield rows.take()


def _after_error(consumer: Consumer, r: OffsetRange, position: int, msg: Message, fail_on_data_loss: bool) -> int:
    """The position to go on from after a consume error (`msg` is the error's message);
    raises on anything else."""
    err = msg.error()
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        # The fetch position has reached the log end, msg.offset(). Offsets below it that no
        # record was delivered for are not in the log (compacted away, or control records):
        # the range is read up to there. A range whose tail was compacted away ends here, as
        # Spark's reader skips offsets its consumer's position has passed; below `until`,
        # more may come (the range ends at or below the HW the driver saw).
        return max(position, min(msg.offset(), r.until_offset))
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, high = leader_lookups.watermarks(consumer, r.topic, r.partition, timeout_s=METADATA_TIMEOUT_S)
        if low <= position < high:
            # The log holds the offset: the error was transient (e.g. a fetch that reached a
            # replica whose log was behind), nothing is lost. Read it again; if it keeps
            # failing, pollTimeoutMs ends the read, as for any lack of progress. (Spark's
            # reader also goes on from the offset, but only after reporting data loss, which
            # fails the task when failOnDataLoss=true although nothing was lost.)
            log.warning("offset %d of %s-%d was out of range, but the log is [%d, %d): reading it again",
                        position, r.topic, r.partition, low, high)
            consumer.assign([TopicPartition(r.topic, r.partition, position)])
            return position
        message = (f"offsets from {position} of {r.topic}-{r.partition} are gone (the log is now [{low}, {high})); "
                   f"the query wanted until {r.until_offset}")
        if fail_on_data_loss:
            raise KafkaliteDataLossError(message + ". Some data may have been lost; set failOnDataLoss=false to "
                                                   "skip it with a warning")
        log.warning("%s: skipping (failOnDataLoss=false)", message)
        if low >= r.until_offset or low <= position:
            return r.until_offset
        # Assign again, not seek: with auto.offset.reset=error librdkafka has stopped this
        # partition's fetcher, and a seek on a stopped fetcher fails (_STATE).
        consumer.assign([TopicPartition(r.topic, r.partition, low)])
        return low
    if err.retriable():
        return position
    raise KafkaException(err)


# -- sink: one task's producer ----------------------------------------------------------------

def producer_config(bootstrap_servers: str, client_config: Mapping[str, str]) -> dict[str, str]:
    config = dict(client_config)
    config.update({"bootstrap.servers": bootstrap_servers, "enable.idempotence": "true", "acks": "all"})
    return config


def check_topic_writable(bootstrap_servers: str, client_config: Mapping[str, str], topic: str) -> None:
    """On the driver, before any task: the sink's `topic` option names a topic that exists
    (or that the brokers create on first use, auto.create.topics.enable, as a producer's
    metadata request allows). Otherwise every task would wait out the client's metadata
    timeout before failing, and Spark would retry each."""
    producer = open_producer(producer_config(bootstrap_servers, client_config))
    try:
        metadata = producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    except KafkaException as e:
        raise KafkaliteSparkOptionError(BOOTSTRAP_OPTION, f"no answer from the cluster at {bootstrap_servers}: {e}") from None
    finally:
        producer.flush(0)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        reason = found.error.str() if found is not None else "not in the cluster's metadata"
        raise KafkaliteSparkOptionError("topic", f"cannot write to topic {topic!r}: {reason} (create it first, e.g. "
                                                 f"`kafkalite topics create {topic}`)")


def open_producer(config: Mapping[str, str]) -> Producer:
    try:
        return Producer(dict(config))
    except KafkaException as e:
        raise KafkaliteSparkOptionError("kafka.*", f"the Kafka client refused its configuration: {e}") from None
