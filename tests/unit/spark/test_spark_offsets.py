"""Offset planning for the Spark source: resolving start/end specs against watermarks and
timestamp lookups, data loss per failOnDataLoss, and minPartitions splitting as Spark's
KafkaOffsetRangeCalculator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.core.group_messages import OFFSETS_TOPIC
from kafkalite.spark.errors import KafkaliteDataLossError, KafkaliteSparkOptionError
from kafkalite.spark.offsets import (
    INTERNAL_TOPICS,
    OffsetRange,
    Watermarks,
    backlog,
    next_end,
    offsets_from_dict,
    offsets_to_dict,
    plan_batch,
    plan_micro_batch,
    rate_limit,
    resolve_offsets,
    select_partitions,
    skip_trigger,
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


def test_a_pattern_leaves_out_only_internal_topics_not_every_double_underscore_name():
    # Kafka lets users name topics '__events'; Spark's pattern subscription leaves out only
    # the internal topics (kafkalite's: __consumer_offsets).
    topics = {"__consumer_offsets": 50, "__events": 1, "_x": 1}
    assert select_partitions(SubscribePattern("_.*"), topics) == ([("__events", 0), ("_x", 0)], [])
    assert select_partitions(Subscribe(("__consumer_offsets",)), topics)[0] == [("__consumer_offsets", p)
                                                                                 for p in range(50)]
    assert INTERNAL_TOPICS == {OFFSETS_TOPIC}, "the topics the broker's metadata marks is_internal"


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


# -- streaming ---------------------------------------------------------------------------------

def test_stream_offsets_round_trip_as_sparks_json():
    offsets = {("t", 0): 5, ("t", 10): 7, ("u", 1): 0}
    nested = offsets_to_dict(offsets)
    assert nested == {"t": {"0": 5, "10": 7}, "u": {"1": 0}}
    assert offsets_from_dict(nested) == offsets
    for bad in ({"t": 5}, {"t": {"0": -1}}, {"t": {"0": "5"}}, {"t": {"0": True}}):
        with pytest.raises(ValueError, match="not a kafkalite stream offset"):
            offsets_from_dict(bad)


def test_rate_limit_shares_by_backlog_and_starves_nobody():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 100}
    assert rate_limit(start, latest, 100) == {("t", 0): 90, ("t", 1): 10, ("t", 2): 100}
    # a tiny backlog still gets one record per trigger
    assert rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 10_000, ("t", 1): 1}, 10) == {("t", 0): 9, ("t", 1): 1}
    assert rate_limit(start, start, 5) == start


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8), st.integers(1, 5000))
def test_rate_limit_never_passes_the_end_nor_much_more_than_the_limit(pairs, limit):
    start = {("t", i): min(a, b) for i, (a, b) in enumerate(pairs)}
    latest = {("t", i): max(a, b) for i, (a, b) in enumerate(pairs)}
    out = rate_limit(start, latest, limit)
    assert all(start[tp] <= out[tp] <= latest[tp] for tp in latest)
    taken = sum(out[tp] - start[tp] for tp in latest)
    backlog_total = sum(latest[tp] - start[tp] for tp in latest)
    assert taken <= min(backlog_total, limit + len(latest))  # ceil() of tiny shares may add one each
    assert taken > 0 or backlog_total == 0


def test_next_end_discovers_new_partitions_from_their_log_start_and_caps_available_now():
    start = {("t", 0): 10}
    latest = {("t", 0): 50, ("t", 1): 30, ("u", 0): 5}
    earliest = {("t", 0): 0, ("t", 1): 20, ("u", 0): 0}
    assert next_end(start, latest, earliest, max_rows=None, cap=None) == latest
    # new partitions count from their log start when sharing the limit: backlogs 40, 10, 5
    assert next_end(start, latest, earliest, max_rows=11, cap=None) == {("t", 0): 18, ("t", 1): 22, ("u", 0): 1}
    # AvailableNow: nothing beyond the target, partitions born after it are not read
    assert next_end(start, latest, earliest, max_rows=None, cap={("t", 0): 40}) == {("t", 0): 40}
    assert backlog(start, latest, earliest) == 40 + 10 + 5


def test_plan_micro_batch_reads_new_partitions_and_reports_loss_per_fail_on_data_loss():
    marks = {("t", 0): Watermarks(0, 100), ("t", 1): Watermarks(20, 40), ("t", 2): Watermarks(0, 10)}
    start = {("t", 0): 10, ("t", 1): 5, ("t", 3): 7}
    end = {("t", 0): 60, ("t", 1): 40, ("t", 2): 10}
    with pytest.raises(KafkaliteDataLossError, match="t-3 is gone"):
        plan_micro_batch(start, end, marks, fail_on_data_loss=True, min_partitions=None)
    plan = plan_micro_batch(start, end, marks, fail_on_data_loss=False, min_partitions=None)
    assert plan.ranges == (OffsetRange("t", 0, 10, 60), OffsetRange("t", 1, 20, 40), OffsetRange("t", 2, 0, 10))
    assert len(plan.warnings) == 2 and "deleted by retention" in plan.warnings[1]
    # a log truncated below the start: the offset went back
    plan = plan_micro_batch({("t", 0): 90}, {("t", 0): 80}, {("t", 0): Watermarks(0, 80)}, fail_on_data_loss=False,
                            min_partitions=None)
    assert plan.ranges == () and "went back from 90 to 80" in plan.warnings[0]
    # an end beyond the log end (truncated after latestOffset) is loss too
    with pytest.raises(KafkaliteDataLossError, match="log ends at 40"):
        plan_micro_batch({("t", 1): 20}, {("t", 1): 45}, marks, fail_on_data_loss=True, min_partitions=None)
    assert plan_micro_batch({("t", 0): 0}, {("t", 0): 100}, marks, fail_on_data_loss=True, min_partitions=4).ranges == \
        (OffsetRange("t", 0, 0, 25), OffsetRange("t", 0, 25, 50), OffsetRange("t", 0, 50, 75), OffsetRange("t", 0, 75, 100))


def test_min_offsets_per_trigger_waits_at_most_max_trigger_delay():
    wait = dict(min_records=100, max_delay_ms=30_000, available_now=False)
    assert skip_trigger(99, waited_ms=1_000, **wait)
    assert not skip_trigger(100, waited_ms=1_000, **wait)
    assert not skip_trigger(1, waited_ms=30_000, **wait)
    assert not skip_trigger(0, waited_ms=0, min_records=None, max_delay_ms=30_000, available_now=False)
    assert not skip_trigger(1, waited_ms=0, min_records=100, max_delay_ms=30_000, available_now=True)
