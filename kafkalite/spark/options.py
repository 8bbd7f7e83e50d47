"""Options of the kafkalite Spark source and sink, parsed and validated into typed values.

Pure: no pyspark, no confluent-kafka. The names, defaults and rules are those of Spark's
built-in Kafka source and sink (KafkaSourceProvider), so a job ports by changing the
format name. Spark compares option names case-insensitively; so do we. Where Spark
silently picks one of two contradictory options (startingTimestamp over
startingOffsetsByTimestamp over startingOffsets) we refuse the pair instead, naming both.
Options Spark does not know are refused too (Spark ignores them): a misspelt option
should not silently read the wrong range.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkalite.spark.errors import KafkaliteSparkOptionError

log = logging.getLogger(__name__)

# Kafka's sentinel offsets in per-partition JSON, as in Spark.
EARLIEST = -2
LATEST = -1
# The range of Kafka's offsets and timestamps (a Java long), which Spark parses them into.
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

TopicPartition = tuple[str, int]

BOOTSTRAP = "kafka.bootstrap.servers"
KAFKA_PREFIX = "kafka."

# Source options besides kafka.* (lower case, as compared).
_STRATEGY_KEYS = ("subscribe", "subscribepattern", "assign")
_SOURCE_KEYS = frozenset({
    *_STRATEGY_KEYS,
    "startingoffsets", "endingoffsets", "startingtimestamp", "endingtimestamp",
    "startingoffsetsbytimestamp", "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay", "minpartitions",
    "failondataloss", "includeheaders", "groupidprefix",
    "kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms",
})
_SINK_KEYS = frozenset({"topic", "includeheaders"})
# Options Spark itself passes to every data source (streaming checkpoints, file paths, and
# the name of a streaming query, which DataStreamWriter.queryName adds to the options).
_SPARK_OWN_KEYS = frozenset({"path", "checkpointlocation", "queryname"})

# Kafka client options Spark refuses, with Spark's reasons.
_SOURCE_REFUSED = {
    "auto.offset.reset": "is not supported. Instead set the source option 'startingOffsets' to 'earliest' or "
                         "'latest' to specify where to start; offsets are managed by the query, not by Kafka",
    "key.deserializer": "is not supported, as keys are always read as byte arrays. Use DataFrame operations "
                        "to deserialize the keys explicitly",
    "value.deserializer": "is not supported, as values are always read as byte arrays. Use DataFrame "
                          "operations to deserialize the values explicitly",
    "enable.auto.commit": "is not supported, as the source never commits offsets to Kafka",
    "interceptor.classes": "is not supported, as the source reads raw bytes",
}
_SINK_REFUSED = {
    "key.serializer": "is not supported, as keys are always written as byte arrays. Use DataFrame operations "
                      "to serialize the keys into strings or byte arrays",
    "value.serializer": "is not supported, as values are always written as byte arrays. Use DataFrame "
                        "operations to serialize the values into strings or byte arrays",
    "interceptor.classes": "is not supported, as the sink writes raw bytes",
}

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark: spark.network.timeout
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000  # Spark's maxTriggerDelay default, "15m"
DEFAULT_FETCH_OFFSET_RETRIES = 3  # Spark's fetchOffset.numRetries
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1000  # Spark's fetchOffset.retryIntervalMs, 10 ms there
DEFAULT_GROUP_ID_PREFIX = "spark-kafkalite"


# -- where to start or stop reading --------------------------------------------------------

@dataclass(frozen=True)
class Earliest:
    """Every partition from its log start offset."""


@dataclass(frozen=True)
class Latest:
    """Every partition from its log end offset."""


@dataclass(frozen=True)
class SpecificOffsets:
    """Per-partition offsets; EARLIEST (-2) and LATEST (-1) are allowed as values."""
    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class GlobalTimestamp:
    """Every partition from the first offset whose timestamp is >= timestamp_ms."""
    timestamp_ms: int


@dataclass(frozen=True)
class SpecificTimestamps:
    """Per-partition timestamps (ms)."""
    timestamps_ms: Mapping[TopicPartition, int]


OffsetSpec = Earliest | Latest | SpecificOffsets | GlobalTimestamp | SpecificTimestamps


# -- which partitions ------------------------------------------------------------------------

@dataclass(frozen=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    pattern: str  # matched against the whole topic name, as Java's Pattern.matcher().matches()

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    partitions: tuple[TopicPartition, ...]


Strategy = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    strategy: Strategy
    starting: OffsetSpec
    ending: OffsetSpec | None  # None for streaming queries
    timestamp_no_match_latest: bool  # startingOffsetsByTimestampStrategy=latest
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    client_rack: str | None
    # Streaming only: a trigger waits for minOffsetsPerTrigger new records, at most
    # maxTriggerDelay since the last batch.
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    group_id_prefix: str = DEFAULT_GROUP_ID_PREFIX
    fetch_offset_retries: int = DEFAULT_FETCH_OFFSET_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    # Every other kafka.* option with the prefix stripped, for the librdkafka client.
    client_config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None  # the `topic` option; a `topic` column is used when it is None
    client_config: Mapping[str, str] = field(default_factory=dict)


# -- parsing -----------------------------------------------------------------------------------

def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bool(opts: dict[str, str], key: str, name: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise KafkaliteSparkOptionError(name, f"must be 'true' or 'false', not {raw!r}")
    return raw.strip().lower() == "true"


def _positive_int(opts: dict[str, str], key: str, name: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise KafkaliteSparkOptionError(name, f"must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise KafkaliteSparkOptionError(name, f"must be positive, but it was {value}")
    return _long(value, name)


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(opts: dict[str, str], key: str, name: str, default: int) -> int:
    """Spark's time strings ("15m", "30s", "500ms"; a bare number is milliseconds)."""
    raw = opts.get(key)
    if raw is None:
        return default
    m = _DURATION.match(raw)
    if m is None:
        raise KafkaliteSparkOptionError(name, f"must be a duration such as '30s', '15m' or '500ms', not {raw!r}")
    return int(m.group(1)) * _DURATION_MS[(m.group(2) or "ms").lower()]


def _int(raw: str, name: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise KafkaliteSparkOptionError(name, f"must be an integer, not {raw!r}") from None
    return _long(value, name)


def _long(value: int, name: str, what: str = "") -> int:
    """A value that fits Kafka's (and Spark's) 64-bit long, as every offset, timestamp and
    count handed to the client must: a larger one used to pass here and fail only when the
    query was planned, with an OverflowError from the client."""
    if not LONG_MIN <= value <= LONG_MAX:
        raise KafkaliteSparkOptionError(name, f"{what or 'the value'} {value} does not fit a 64-bit long "
                                              f"([{LONG_MIN}, {LONG_MAX}])")
    return value


def _json_object(raw: str, name: str) -> dict:
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise KafkaliteSparkOptionError(name, f"is not valid JSON ({e}): {raw!r}") from None
    if not isinstance(value, dict) or not value:
        raise KafkaliteSparkOptionError(name, f"must be a non-empty JSON object, not {raw!r}")
    return value


def parse_partition_json(raw: str, name: str) -> dict[TopicPartition, int]:
    """Spark's per-partition JSON, `{"topic":{"0":23,"1":-2}}`, as {(topic, 0): 23, ...}."""
    result: dict[TopicPartition, int] = {}
    for topic, per_partition in _json_object(raw, name).items():
        if not isinstance(per_partition, dict):
            raise KafkaliteSparkOptionError(name, f"topic {topic!r} must map partitions to numbers, as "
                                                  '{"topic":{"0":23}}')
        for partition, value in per_partition.items():
            try:
                p = int(partition)
            except ValueError:
                raise KafkaliteSparkOptionError(name, f"partition {partition!r} of topic {topic!r} is not a number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise KafkaliteSparkOptionError(name, f"the value for {topic}-{p} must be an integer, not {value!r}")
            if p < 0:
                raise KafkaliteSparkOptionError(name, f"partition {p} of topic {topic!r} is negative")
            result[(topic, p)] = _long(value, name, f"the value for {topic}-{p}")
    return result


def partition_json(offsets: Mapping[TopicPartition, int]) -> str:
    """The inverse of parse_partition_json, sorted: the format of Spark's Kafka offsets
    (and of a streaming checkpoint's offsets)."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), value in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = value
    return json.dumps(nested, separators=(",", ":"))


def _strategy(opts: dict[str, str]) -> Strategy:
    given = [k for k in _STRATEGY_KEYS if k in opts]
    if not given:
        raise KafkaliteSparkOptionError("subscribe", "one of the options 'subscribe', 'subscribePattern' or "
                                                     "'assign' must be specified")
    if len(given) > 1:
        names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
        raise KafkaliteSparkOptionError(names[given[1]], "only one of 'subscribe', 'subscribePattern' or 'assign' "
                                                         f"may be specified, got {[names[g] for g in given]}")
    key = given[0]
    raw = opts[key]
    if key == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise KafkaliteSparkOptionError("subscribe", f"no topics to subscribe to in {raw!r}")
        return Subscribe(topics)
    if key == "subscribepattern":
        if not raw.strip():
            raise KafkaliteSparkOptionError("subscribePattern", "the pattern to subscribe is empty")
        try:
            re.compile(raw.strip())
        except re.error as e:
            raise KafkaliteSparkOptionError("subscribePattern", f"is not a valid regular expression: {e}") from None
        return SubscribePattern(raw.strip())
    partitions: list[TopicPartition] = []
    for topic, numbers in _json_object(raw, "assign").items():
        if not isinstance(numbers, list) or not numbers or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                                   for n in numbers):
            raise KafkaliteSparkOptionError("assign", f"topic {topic!r} must map to a list of partition numbers, as "
                                                      '{"topicA":[0,1]}')
        partitions.extend((topic, n) for n in numbers)
    return Assign(tuple(sorted(set(partitions))))


def _offset_spec(opts: dict[str, str], prefix: str, display: str) -> OffsetSpec | None:
    """startingOffsets/startingTimestamp/startingOffsetsByTimestamp (prefix 'starting'), or
    the ending ones; at most one of the three may be given."""
    keys = {f"{prefix}timestamp": f"{display}Timestamp", f"{prefix}offsetsbytimestamp": f"{display}OffsetsByTimestamp",
            f"{prefix}offsets": f"{display}Offsets"}
    given = [k for k in keys if k in opts]
    if len(given) > 1:
        raise KafkaliteSparkOptionError(keys[given[1]], f"contradicts option '{keys[given[0]]}': give only one of "
                                                        f"{list(keys.values())}")
    if not given:
        return None
    key, name = given[0], keys[given[0]]
    raw = opts[key]
    if key.endswith("offsetsbytimestamp"):
        timestamps = parse_partition_json(raw, name)
        if any(ts < 0 for ts in timestamps.values()):
            raise KafkaliteSparkOptionError(name, "timestamps must not be negative")
        return SpecificTimestamps(timestamps)
    if key.endswith("timestamp"):
        ts = _int(raw, name)
        if ts < 0:
            raise KafkaliteSparkOptionError(name, f"must not be negative, but it was {ts}")
        return GlobalTimestamp(ts)
    word = raw.strip().lower()
    if word == "earliest":
        return Earliest()
    if word == "latest":
        return Latest()
    offsets = parse_partition_json(raw, name)
    for tp, value in offsets.items():
        if value < EARLIEST:
            raise KafkaliteSparkOptionError(name, f"offset {value} for {tp[0]}-{tp[1]} is invalid: use an offset, "
                                                  "-2 for earliest or -1 for latest")
    return SpecificOffsets(offsets)


def _client_config(opts: dict[str, str], refused: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    bootstrap = opts.get(BOOTSTRAP, "").strip()
    if not bootstrap:
        raise KafkaliteSparkOptionError(BOOTSTRAP, "must be specified for configuring the Kafka client")
    config: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith(KAFKA_PREFIX) or key == BOOTSTRAP:
            continue
        name = key[len(KAFKA_PREFIX):]
        if name in refused:
            raise KafkaliteSparkOptionError(key, f"Kafka option '{name}' {refused[name]}")
        config[name] = value
    return bootstrap, config


def _refuse_unknown(opts: dict[str, str], known: frozenset[str], what: str) -> None:
    for key in sorted(opts):
        if not key.startswith(KAFKA_PREFIX) and key not in known and key not in _SPARK_OWN_KEYS:
            raise KafkaliteSparkOptionError(key, f"is not an option of the kafkalite {what}")


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Spark's Kafka source options for a batch (streaming=False) or streaming query."""
    opts = _lower(options)
    _refuse_unknown(opts, _SOURCE_KEYS, "source")
    bootstrap, config = _client_config(opts, _SOURCE_REFUSED)
    strategy = _strategy(opts)
    starting = _offset_spec(opts, "starting", "starting")
    ending = _offset_spec(opts, "ending", "ending")
    if streaming:
        if ending is not None:
            raise KafkaliteSparkOptionError("endingOffsets", "ending offsets are not valid in streaming queries")
        starting = starting or Latest()
    else:
        for key, name in (("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
                          ("minoffsetspertrigger", "minOffsetsPerTrigger"), ("maxtriggerdelay", "maxTriggerDelay")):
            if key in opts:  # Spark ignores them in batch queries too; say so
                log.warning("option '%s' applies to streaming queries only; this batch query reads its whole range", name)
        starting = starting or Earliest()
        ending = ending or Latest()
        _check_batch_bounds(starting, ending)
    strategy_raw = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_raw not in ("error", "latest"):
        raise KafkaliteSparkOptionError("startingOffsetsByTimestampStrategy",
                                        f"must be 'error' or 'latest', not {strategy_raw!r}")
    poll = _positive_int(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    return SourceOptions(
        bootstrap_servers=bootstrap,
        strategy=strategy,
        starting=starting,
        ending=ending,
        timestamp_no_match_latest=strategy_raw == "latest",
        max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        poll_timeout_ms=poll or DEFAULT_POLL_TIMEOUT_MS,
        client_rack=config.get("client.rack"),
        min_offsets_per_trigger=_positive_int(opts, "minoffsetspertrigger", "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(opts, "maxtriggerdelay", "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        group_id_prefix=_group_id_prefix(opts),
        fetch_offset_retries=_non_negative_int(opts, "fetchoffset.numretries", "fetchOffset.numRetries",
                                               DEFAULT_FETCH_OFFSET_RETRIES),
        fetch_offset_retry_interval_ms=_non_negative_int(opts, "fetchoffset.retryintervalms",
                                                         "fetchOffset.retryIntervalMs",
                                                         DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS),
        client_config=config,
    )


def _group_id_prefix(opts: dict[str, str]) -> str:
    raw = opts.get("groupidprefix", DEFAULT_GROUP_ID_PREFIX).strip()
    if not raw:
        raise KafkaliteSparkOptionError("groupIdPrefix", "must not be empty")
    return raw


def _non_negative_int(opts: dict[str, str], key: str, name: str, default: int) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    value = _int(raw, name)
    if value < 0:
        raise KafkaliteSparkOptionError(name, f"must not be negative, but it was {value}")
    return value


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's batch rules: a batch query cannot start at 'latest' nor end at 'earliest'."""
    if isinstance(starting, Latest):
        raise KafkaliteSparkOptionError("startingOffsets", "starting offset can't be latest for batch queries")
    if isinstance(starting, SpecificOffsets):
        for (topic, partition), value in starting.offsets.items():
            if value == LATEST:
                raise KafkaliteSparkOptionError("startingOffsets", f"starting offset for {topic}-{partition} can't "
                                                                   "be latest for batch queries")
    if isinstance(ending, Earliest):
        raise KafkaliteSparkOptionError("endingOffsets", "ending offset can't be earliest for batch queries")
    if isinstance(ending, SpecificOffsets):
        for (topic, partition), value in ending.offsets.items():
            if value == EARLIEST:
                raise KafkaliteSparkOptionError("endingOffsets", f"ending offset for {topic}-{partition} can't be "
                                                                 "earliest for batch queries")


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Spark's Kafka sink options: the bootstrap servers, an optional default `topic`, and
    kafka.* for the producer (which is always idempotent with acks=all)."""
    opts = _lower(options)
    _refuse_unknown(opts, _SINK_KEYS, "sink")
    bootstrap, config = _client_config(opts, _SINK_REFUSED)
    if config.get("enable.idempotence", "true").lower() != "true":
        raise KafkaliteSparkOptionError("kafka.enable.idempotence", "the sink's producer is always idempotent")
    if config.get("acks", "all").lower() not in ("all", "-1"):
        raise KafkaliteSparkOptionError("kafka.acks", "the sink's producer always uses acks=all")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise KafkaliteSparkOptionError("topic", "must not be empty")
    return SinkOptions(bootstrap_servers=bootstrap, topic=topic.strip() if topic else None, client_config=config)
