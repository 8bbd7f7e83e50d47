"""Offset planning for the Spark source: which partitions, from which offset until which,
split into input partitions. Pure: the driver fetches metadata, watermarks and
timestamp lookups with a client and passes them in; nothing here does I/O.

The same functions serve the batch reader and (later) the streaming reader, whose offsets
are the per-partition JSON of `options.partition_json`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafkalite.spark.errors import KafkaliteDataLossError, KafkaliteSparkOptionError
from kafkalite.spark.options import (
    EARLIEST,
    LATEST,
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetSpec,
    SpecificOffsets,
    SpecificTimestamps,
    Strategy,
    Subscribe,
    SubscribePattern,
    TopicPartition,
)

# The topics a subscribePattern never matches: the cluster's internal topics, which Spark's
# pattern subscription leaves out (Kafka's Admin.listTopics lists none). kafkalite's one is
# the groups' offsets topic (the broker's metadata marks only it is_internal); librdkafka's
# metadata does not carry the flag, hence the name here.
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})


@dataclass(frozen=True)
class Watermarks:
    """A partition's log start offset and log end offset (the HW, as consumers see it)."""
    earliest: int
    latest: int

    def __post_init__(self) -> None:
        assert 0 <= self.earliest, self
        assert self.earliest <= self.latest, self


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [from_offset, until_offset) of one partition: one Spark input partition."""
    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        assert 0 <= self.from_offset, self
        assert self.from_offset <= self.until_offset, self

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


@dataclass(frozen=True)
class Plan:
    ranges: tuple[OffsetRange, ...]
    # Data loss skipped because failOnDataLoss is false: one message each, to log.
    warnings: tuple[str, ...]


def select_partitions(strategy: Strategy, topics: Mapping[str, int]) -> tuple[list[TopicPartition], list[TopicPartition]]:
    """The partitions a strategy reads, given every topic's partition count, and the assigned
    partitions that do not exist (for `assign` only; a subscribed topic that does not exist
    simply has no partitions, as in Spark)."""
    if isinstance(strategy, Assign):
        present = [tp for tp in strategy.partitions if tp[1] < topics.get(tp[0], 0)]
        missing = [tp for tp in strategy.partitions if tp[1] >= topics.get(tp[0], 0)]
        return present, missing
    if isinstance(strategy, Subscribe):
        names = [t for t in strategy.topics if t in topics]
    else:
        assert isinstance(strategy, SubscribePattern)
        names = sorted(t for t in topics if strategy.matches(t) and t not in INTERNAL_TOPICS)
    return [(t, p) for t in names for p in range(topics[t])], []


def timestamp_requests(spec: OffsetSpec, partitions: Iterable[TopicPartition], option: str) -> dict[TopicPartition, int]:
    """The (partition -> timestamp ms) lookups a spec needs; empty unless it is by timestamp."""
    partitions = list(partitions)
    if isinstance(spec, GlobalTimestamp):
        return {tp: spec.timestamp_ms for tp in partitions}
    if isinstance(spec, SpecificTimestamps):
        _check_same_partitions(spec.timestamps_ms, partitions, option)
        return {tp: spec.timestamps_ms[tp] for tp in partitions}
    return {}


def _check_same_partitions(given: Mapping[TopicPartition, int], partitions: list[TopicPartition], option: str) -> None:
    # Spark: "If startingOffsets contains specific offsets, you must specify all TopicPartitions."
    if set(given) != set(partitions):
        raise KafkaliteSparkOptionError(option, "specific offsets or timestamps must name exactly the partitions "
                                                f"read; use -1 for latest, -2 for earliest. Specified: {sorted(given)}, "
                                                f"assigned: {sorted(partitions)}")


def resolve_offsets(spec: OffsetSpec, partitions: Iterable[TopicPartition], watermarks: Mapping[TopicPartition, Watermarks],
                    found_by_timestamp: Mapping[TopicPartition, int | None], *, option: str,
                    no_match_latest: bool) -> dict[TopicPartition, int]:
    """Concrete offsets for a spec. `found_by_timestamp` holds the first offset whose
    timestamp is >= the requested one, or None when no record is that recent: then the
    latest offset if `no_match_latest` (Spark's 'latest' strategy, and always for ending
    timestamps), else an error naming the option."""
    partitions = list(partitions)
    if isinstance(spec, SpecificOffsets):
        _check_same_partitions(spec.offsets, partitions, option)
    result: dict[TopicPartition, int] = {}
    for tp in partitions:
        marks = watermarks[tp]
        if isinstance(spec, Earliest):
            result[tp] = marks.earliest
        elif isinstance(spec, Latest):
            result[tp] = marks.latest
        elif isinstance(spec, SpecificOffsets):
            value = spec.offsets[tp]
            result[tp] = marks.earliest if value == EARLIEST else marks.latest if value == LATEST else value
        else:
            found = found_by_timestamp.get(tp)
            if found is None:
                if not no_match_latest:
                    raise KafkaliteSparkOptionError(option, f"no offset of {tp[0]}-{tp[1]} has a timestamp at or "
                                                            "after the one requested (set "
                                                            "startingOffsetsByTimestampStrategy=latest to start at the "
                                                            "latest offset instead)")
                found = marks.latest
            result[tp] = found
    return result


def clamp_range(tp: TopicPartition, start: int, end: int, marks: Watermarks, *,
                fail_on_data_loss: bool) -> tuple[OffsetRange | None, list[str]]:
    """One partition's range, checked against its watermarks: offsets below the log start
    (deleted by retention) or beyond the log end (truncated) are data loss, an error or a
    warning and a smaller range per failOnDataLoss. None: nothing left to read."""
    topic, partition = tp
    if start > end:
        raise KafkaliteSparkOptionError("endingOffsets", f"the starting offset {start} of {topic}-{partition} is after "
                                                         f"its ending offset {end}")
    lost: list[str] = []
    if start < marks.earliest:
        lost.append(f"offsets [{start}, {min(end, marks.earliest)}) of {topic}-{partition} are gone: the log starts at "
                    f"{marks.earliest} (deleted by retention)")
    if end > marks.latest:
        lost.append(f"offsets [{max(start, marks.latest)}, {end}) of {topic}-{partition} do not exist: the log ends at "
                    f"{marks.latest} (truncated, or never written)")
    if lost and fail_on_data_loss:
        raise KafkaliteDataLossError("; ".join(lost) + ". Some data may have been lost; set failOnDataLoss=false "
                                                       "to skip it with a warning")
    lo = min(max(start, marks.earliest), marks.latest)
    hi = max(min(end, marks.latest), lo)
    return (OffsetRange(topic, partition, lo, hi) if hi > lo else None), lost


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: empty ranges are dropped; with minPartitions and
    fewer ranges than that, ranges larger than total/minPartitions are split into pieces
    in proportion to their size, so the result has about minPartitions ranges."""
    nonempty = sorted(r for r in ranges if r.size > 0)
    if min_partitions is None or len(nonempty) >= min_partitions:
        return nonempty
    total = sum(r.size for r in nonempty)
    ideal = total / min_partitions
    large = [r for r in nonempty if r.size > ideal]
    small = [r for r in nonempty if r.size <= ideal]
    large_total = sum(r.size for r in large)
    result = list(small)
    for r in large:
        parts = max(math.floor(r.size / large_total * (min_partitions - len(small)) + 0.5), 1)
        result.extend(_divide(r, parts))
    return sorted(result)


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    bounds = [r.from_offset + r.size * i // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def plan_batch(starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int],
               watermarks: Mapping[TopicPartition, Watermarks], *, fail_on_data_loss: bool,
               min_partitions: int | None) -> Plan:
    """The input partitions of a batch read (or of one micro-batch) from resolved offsets."""
    assert set(starts) == set(ends), (starts, ends)
    ranges: list[OffsetRange] = []
    warnings: list[str] = []
    for tp in sorted(starts):
        r, lost = clamp_range(tp, starts[tp], ends[tp], watermarks[tp], fail_on_data_loss=fail_on_data_loss)
        warnings.extend(lost)
        if r is not None:
            ranges.append(r)
    return Plan(tuple(split_ranges(ranges, min_partitions)), tuple(warnings))


# -- streaming: offsets as JSON per partition, and one micro-batch's plan ---------------------

def offsets_to_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """A stream's offset as PySpark keeps it in the checkpoint: Spark's Kafka offset JSON,
    {"topic": {"0": 23, "1": 7}}, as a dict."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), value in sorted(offsets.items()):
        assert value >= 0, (topic, partition, value)
        nested.setdefault(topic, {})[str(partition)] = value
    return nested


def offsets_from_dict(nested: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of offsets_to_dict; a checkpoint that is not one is an error, not a guess."""
    result: dict[TopicPartition, int] = {}
    for topic, per_partition in nested.items():
        if not isinstance(per_partition, Mapping):
            raise ValueError(f"not a kafkalite stream offset (topic {topic!r} does not map partitions): {nested!r}")
        for partition, value in per_partition.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"not a kafkalite stream offset ({topic}-{partition}: {value!r}): {nested!r}")
            result[(topic, int(partition))] = value
    return result


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_rows: int) -> dict[TopicPartition, int]:
    """Spark's KafkaMicroBatchStream.rateLimit: at most about `max_rows` new records in all,
    shared among partitions in proportion to their backlog; a partition with a backlog gets
    at least one record (none is starved). `start` holds every partition of `latest`."""
    assert max_rows > 0, max_rows
    sizes = {tp: latest[tp] - start[tp] for tp in latest if latest[tp] > start[tp]}
    total = sum(sizes.values())
    if total == 0:
        return dict(latest)
    result = {}
    for tp, end in latest.items():
        if tp not in sizes:
            result[tp] = end
            continue
        share = max_rows * sizes[tp] / total
        result[tp] = min(end, start[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return result


def next_end(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
             earliest: Mapping[TopicPartition, int], *, max_rows: int | None,
             cap: Mapping[TopicPartition, int] | None) -> dict[TopicPartition, int]:
    """The end offset of the next micro-batch (what `latestOffset(start, limit)` answers).

    - `latest`: every partition the query reads now, at its log end. A partition new since
      `start` (a new topic matching the subscription, or more partitions) starts at its
      log start, `earliest`, as in Spark.
    - `cap`: Trigger.AvailableNow's target, taken once when the query started: no
      partition goes beyond it, and partitions that appeared later are not read.
    - `max_rows`: maxOffsetsPerTrigger (None: all available).
    Partitions of `start` that no longer exist are left out (the plan reports their loss).
    A log end below a partition's start (an unclean truncation) is answered as it is, and
    planning reports the loss."""
    if cap is not None:
        latest = {tp: min(end, cap[tp]) for tp, end in latest.items() if tp in cap}
    if max_rows is None:
        return dict(latest)
    begin = {tp: start[tp] if tp in start else earliest[tp] for tp in latest}
    return rate_limit(begin, latest, max_rows)


def backlog(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
            earliest: Mapping[TopicPartition, int]) -> int:
    """Records between two stream offsets (partitions new in `end` counted from their log start)."""
    return sum(max(0, e - (start[tp] if tp in start else earliest.get(tp, e))) for tp, e in end.items())


def skip_trigger(new_records: int, *, min_records: int | None, waited_ms: float, max_delay_ms: int,
                 available_now: bool) -> bool:
    """minOffsetsPerTrigger: a trigger with fewer new records than that is skipped (the
    query waits) until maxTriggerDelay has passed since the last batch. Never under
    Trigger.AvailableNow, which must not wait for data that may never come."""
    if min_records is None or available_now:
        return False
    return new_records < min_records and waited_ms < max_delay_ms


def plan_micro_batch(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                     watermarks: Mapping[TopicPartition, Watermarks], *, fail_on_data_loss: bool,
                     min_partitions: int | None) -> Plan:
    """The input partitions of the micro-batch (start, end], as Spark's
    KafkaMicroBatchStream.planInputPartitions:

    - a partition in `end` but not in `start` is new: it is read from its log start;
    - a partition in `start` but not in `end` was deleted: data loss;
    - an end below its start (the log was truncated and rewritten): data loss;
    - a start below the log start (deleted by retention): data loss, read from the log start;
    - an end beyond the log end (truncated since latestOffset): data loss, read to the log end.

    A leader's log end (its high watermark) never goes back across a failover: a new leader
    answers OFFSET_NOT_AVAILABLE until its high watermark has reached its epoch's start
    (KIP-207), so an end beyond it is a real truncation."""
    ranges: list[OffsetRange] = []
    lost: list[str] = []
    for tp in sorted(set(start) - set(end)):
        lost.append(f"{tp[0]}-{tp[1]} is gone (its topic was deleted, or it is no longer assigned); "
                    f"offsets from {start[tp]} were not read")
    for tp in sorted(end):
        topic, partition = tp
        marks = watermarks[tp]
        begin = start.get(tp, marks.earliest)
        if end[tp] < begin:
            lost.append(f"the offset of {topic}-{partition} went back from {begin} to {end[tp]} (the log was "
                        "truncated); records may have been missed")
            continue
        r, loss = clamp_range(tp, begin, end[tp], marks, fail_on_data_loss=False)
        lost.extend(loss)
        if r is not None:
            ranges.append(r)
    if lost and fail_on_data_loss:
        raise KafkaliteDataLossError("; ".join(lost) + ". Some data may have been lost; set failOnDataLoss=false "
                                                       "to skip it with a warning")
    return Plan(tuple(split_ranges(ranges, min_partitions)), tuple(lost))
