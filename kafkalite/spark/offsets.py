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
        names = sorted(t for t in topics if strategy.matches(t) and not t.startswith("__"))
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
