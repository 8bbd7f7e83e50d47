"""Offset planning for the Spark source: resolving start/end specs against watermarks and
timestamp lookups, data loss per failOnDataLoss, and minPartitions splitting as Spark's
KafkaOffsetRangeCalculator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.spark.errors import KafkaliteDataLossError, KafkaliteSparkOptionError
from kafkalite.spark.offsets import (
    OffsetRange,
    Watermarks,
    plan_batch,
    resolve_offsets,
    select_partitions,
    split_ranges,
    timestamp_requests,
)
from kafkalite.spark.options import (
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
)

TPS = [("t", 0), ("t", 1)]
MARKS = {("t", 0): Watermarks(10, 100), ("t", 1): Watermarks(0, 5)}


def test_select_partitions_by_strategy():
    topics = {"t": 2, "u": 1, "__consumer_offsets": 50}
    assert select_partitions(Subscribe(("t", "missing")), topics) == (TPS, [])
    assert select_partitions(SubscribePattern(".*"), topics) == ([("t", 0), ("t", 1), ("u", 0)], [])
    assert select_partitions(Assign((("t", 1), ("t", 7))), topics) == ([("t", 1)], [("t", 7)])


def test_resolve_earliest_latest_and_sentinels():
    assert resolve_offsets(Earliest(), TPS, MARKS, {}, option="s", no_match_latest=False) == {("t", 0): 10, ("t", 1): 0}
    assert resolve_offsets(Latest(), TPS, MARKS, {}, option="s", no_match_latest=False) == {("t", 0): 100, ("t", 1): 5}
    spec = SpecificOffsets({("t", 0): 42, ("t", 1): -1})
    assert resolve_offsets(spec, TPS, MARKS, {}, option="s", no_match_latest=False) == {("t", 0): 42, ("t", 1): 5}
    spec = SpecificOffsets({("t", 0): -2, ("t", 1): 3})
    assert resolve_offsets(spec, TPS, MARKS, {}, option="s", no_match_latest=False) == {("t", 0): 10, ("t", 1): 3}


def test_specific_offsets_must_name_every_partition_read():
    with pytest.raises(KafkaliteSparkOptionError, match="startingOffsets"):
        resolve_offsets(SpecificOffsets({("t", 0): 1}), TPS, MARKS, {}, option="startingOffsets", no_match_latest=False)


def test_timestamps_resolve_through_lookups_and_no_match_per_strategy():
    assert timestamp_requests(GlobalTimestamp(7), TPS, "s") == {("t", 0): 7, ("t", 1): 7}
    assert timestamp_requests(SpecificTimestamps({("t", 0): 1, ("t", 1): 2}), TPS, "s") == {("t", 0): 1, ("t", 1): 2}
    assert timestamp_requests(Earliest(), TPS, "s") == {}
    found = {("t", 0): 50, ("t", 1): None}
    with pytest.raises(KafkaliteSparkOptionError, match="startingTimestamp"):
        resolve_offsets(GlobalTimestamp(7), TPS, MARKS, found, option="startingTimestamp", no_match_latest=False)
    assert resolve_offsets(GlobalTimestamp(7), TPS, MARKS, found, option="s", no_match_latest=True) == {("t", 0): 50, ("t", 1): 5}


def test_retention_deleted_start_is_data_loss_or_a_warning():
    starts, ends = {("t", 0): 3, ("t", 1): 0}, {("t", 0): 100, ("t", 1): 5}
    with pytest.raises(KafkaliteDataLossError, match="t-0"):
        plan_batch(starts, ends, MARKS, fail_on_data_loss=True, min_partitions=None)
    plan = plan_batch(starts, ends, MARKS, fail_on_data_loss=False, min_partitions=None)
    assert plan.ranges == (OffsetRange("t", 0, 10, 100), OffsetRange("t", 1, 0, 5))
    assert len(plan.warnings) == 1
    assert "t-0" in plan.warnings[0]


def test_end_beyond_the_log_end_is_data_loss_and_start_after_end_an_error():
    with pytest.raises(KafkaliteDataLossError):
        plan_batch({("t", 1): 0}, {("t", 1): 9}, MARKS, fail_on_data_loss=True, min_partitions=None)
    plan = plan_batch({("t", 1): 0}, {("t", 1): 9}, MARKS, fail_on_data_loss=False, min_partitions=None)
    assert plan.ranges == (OffsetRange("t", 1, 0, 5),)
    with pytest.raises(KafkaliteSparkOptionError, match="endingOffsets"):
        plan_batch({("t", 1): 4}, {("t", 1): 2}, MARKS, fail_on_data_loss=False, min_partitions=None)


def test_whole_range_gone_leaves_nothing_to_read():
    plan = plan_batch({("t", 0): 0}, {("t", 0): 5}, MARKS, fail_on_data_loss=False, min_partitions=None)
    assert plan.ranges == ()


def test_min_partitions_splits_large_ranges_in_proportion():
    ranges = [OffsetRange("a", 0, 0, 1000), OffsetRange("b", 0, 0, 10), OffsetRange("c", 0, 5, 5)]
    out = split_ranges(ranges, 10)
    assert OffsetRange("b", 0, 0, 10) in out  # small ranges stay whole
    assert all(r.size > 0 for r in out)  # empty ranges are dropped
    assert len([r for r in out if r.topic == "a"]) == 9
    assert split_ranges(ranges, None) == ranges[:2]
    assert split_ranges(ranges, 2) == ranges[:2]


range_lists = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 5000)), min_size=1, max_size=8).map(
    lambda pairs: [OffsetRange(f"t{i}", i % 3, start, start + size) for i, (start, size) in enumerate(pairs)])


@given(range_lists, st.one_of(st.none(), st.integers(1, 64)))
def test_splitting_covers_exactly_the_same_offsets(ranges, min_partitions):
    out = split_ranges(ranges, min_partitions)
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in out:
        assert r.size > 0
        covered.setdefault((r.topic, r.partition), []).append((r.from_offset, r.until_offset))
    for r in ranges:
        pieces = sorted(covered.pop((r.topic, r.partition), []))
        if r.size == 0:
            assert pieces == []
            continue
        assert pieces[0][0] == r.from_offset
        assert pieces[-1][1] == r.until_offset
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert covered == {}
    nonempty = sum(1 for r in ranges if r.size > 0)
    if min_partitions is not None and nonempty < min_partitions:
        assert len(out) >= nonempty
        assert len(out) <= min_partitions + nonempty
