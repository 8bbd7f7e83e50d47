"""The log cleaner's pure decisions: which log, which segments, how grouped, each record's
and batch's fate. No files, no clock (time is an argument)."""

from __future__ import annotations

import ast
import pathlib

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.log import cleaner_decisions
from kafkalite.log.cleaner_decisions import (
    HORIZON_UNKNOWN,
    BatchAction,
    Fate,
    LogView,
    PassKind,
    SegmentInfo,
    batch_action,
    choose_log,
    cleanable_range,
    delete_horizon_after,
    group_segments,
    record_fate,
)


def segments_from(sizes: list[int], spans: list[int], timestamps: list[int] | None = None) -> tuple[SegmentInfo, ...]:
    out = []
    base = 0
    for i, (size, span) in enumerate(zip(sizes, spans)):
        ts = timestamps[i] if timestamps else 1_000
        out.append(SegmentInfo(base, base + span, size, ts, size // 100))
        base += span
    return tuple(out)


def view(segments, *, first_dirty=0, hw=None, ratio=0.5, lag=0, horizon=None, compact=True, name="t-0") -> LogView:
    hw = segments[-1].next_offset if hw is None else hw
    return LogView(name, segments, segments[0].base_offset, first_dirty, hw, compact, ratio, lag, horizon)


logs = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 50)), min_size=1, max_size=12).map(
    lambda pairs: segments_from([s for s, _ in pairs], [max(1, n) for _, n in pairs])
)


@settings(max_examples=300)
@given(logs, st.integers(0, 600), st.integers(0, 700), st.integers(0, 5_000), st.integers(0, 10_000))
def test_the_cleanable_range_never_reaches_the_active_segment_nor_the_hw(segments, first_dirty, hw, lag, now):
    v = view(segments, first_dirty=first_dirty, hw=hw, lag=lag)
    r = cleanable_range(v, now)
    cleanable = segments[: r.cleanable_segments]
    assert r.cleanable_segments < len(segments)  # the active segment is never cleanable
    assert all(s.next_offset <= hw for s in cleanable)
    assert r.first_uncleanable_offset == (cleanable[-1].next_offset if cleanable else segments[0].base_offset)
    assert segments[0].base_offset <= r.first_dirty_offset <= r.first_uncleanable_offset
    assert r.clean_bytes + r.dirty_bytes == sum(s.size_bytes for s in cleanable)
    assert 0.0 <= r.dirty_ratio <= 1.0
    if lag:  # no cleanable segment is younger than the lag
        assert all(now - s.max_timestamp_ms >= lag for s in cleanable)


@settings(max_examples=300)
@given(logs, st.integers(0, 600), st.floats(0.0, 1.0), st.integers(0, 10_000))
def test_a_log_is_cleaned_for_its_dirt_only_at_or_above_its_min_cleanable_dirty_ratio(segments, first_dirty, ratio, now):
    v = view(segments, first_dirty=first_dirty, ratio=ratio, horizon=None)
    r = cleanable_range(v, now)
    choice = choose_log([v], now)
    if r.dirty_bytes > 0 and r.dirty_ratio >= ratio:
        assert choice is not None and choice.kind is PassKind.DIRTY
    else:
        assert choice is None  # and no tombstone is due (horizon None)


def test_the_dirtiest_log_goes_first_and_tombstone_passes_only_when_nothing_is_dirty():
    segs = segments_from([100, 100, 100, 100], [10, 10, 10, 10])
    half = view(segs, first_dirty=10, name="half")  # 200 dirty of 300
    most = view(segs, first_dirty=0, name="most")  # 300 of 300
    clean_due = view(segs, first_dirty=30, ratio=0.5, horizon=500, name="due")
    assert choose_log([half, most, clean_due], 1_000).view.name == "most"
    due = choose_log([clean_due], 1_000)
    assert (due.view.name, due.kind) == ("due", PassKind.TOMBSTONES)
    assert choose_log([clean_due], 499) is None  # its horizon has not passed
    unknown = view(segs, first_dirty=30, horizon=HORIZON_UNKNOWN, name="unknown")
    assert choose_log([clean_due, unknown], 1_000).view.name == "unknown"  # never looked at since start-up
    assert choose_log([view(segs, first_dirty=0, compact=False)], 1_000) is None
    empty_clean = view(segs, first_dirty=0, ratio=1.1 - 0.1, horizon=HORIZON_UNKNOWN)  # nothing clean yet: no tombstone pass
    assert choose_log([empty_clean], 1_000).kind is PassKind.DIRTY


def test_min_compaction_lag_keeps_young_segments_and_everything_after_them():
    segs = segments_from([100] * 5, [10] * 5, timestamps=[100, 9_500, 200, 300, 9_900])
    r = cleanable_range(view(segs, lag=1_000), 10_000)
    assert r.cleanable_segments == 1  # the second is too young, so the third and fourth wait too


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(1, 500), st.integers(1, 3), st.integers(0, 20)), min_size=1, max_size=20),
       st.integers(1, 1_500), st.integers(1, 30))
def test_groups_are_consecutive_and_within_the_limits(parts, size_max, entries_max):
    segments = []
    base = 0
    for size, span, entries in parts:
        segments.append(SegmentInfo(base, base + span, size, 0, entries))
        base += span
    groups = group_segments(segments, size_max, entries_max)
    assert [s for g in groups for s in g] == segments
    for g in groups:
        if len(g) > 1:
            assert sum(s.size_bytes for s in g) <= size_max
            assert sum(s.index_entries for s in g) <= entries_max
    for g, nxt in zip(groups, groups[1:]):  # greedy: the next segment did not fit
        size = sum(s.size_bytes for s in g) + nxt[0].size_bytes
        entries = sum(s.index_entries for s in g) + nxt[0].index_entries
        assert size > size_max or entries > entries_max


def test_groups_stay_within_relative_offsets_of_the_index():
    huge = 1 << 31  # the last offset of a group is at most base + 2^31 - 1
    segments = [SegmentInfo(0, 10, 10, 0, 0), SegmentInfo(10, huge, 10, 0, 0), SegmentInfo(huge, huge + 5, 10, 0, 0)]
    assert [len(g) for g in group_segments(segments, 10**9, 10**6)] == [2, 1]
    segments = [SegmentInfo(0, 10, 10, 0, 0), SegmentInfo(10, huge + 1, 10, 0, 0)]
    assert [len(g) for g in group_segments(segments, 10**9, 10**6)] == [1, 1]


def test_record_fates():
    end = 20  # where the pass cleans through
    assert record_fate(5, True, False, 9, None, 0, end_offset=end) is Fate.SUPERSEDED
    assert record_fate(9, True, False, 9, None, 0, end_offset=end) is Fate.KEEP  # the latest
    assert record_fate(12, True, False, 9, None, 0, end_offset=end) is Fate.KEEP  # past its key's entry
    assert record_fate(5, True, False, None, None, 0, end_offset=end) is Fate.KEEP  # key not in the map
    assert record_fate(5, False, False, None, None, 0, end_offset=end) is Fate.KEEP  # no key: kept
    assert record_fate(9, True, True, 9, None, 10**12, end_offset=end) is Fate.KEEP  # tombstone never cleaned before
    assert record_fate(9, True, True, 9, 1_000, 999, end_offset=end) is Fate.KEEP  # before its horizon
    assert record_fate(9, True, True, 9, 1_000, 1_000, end_offset=end) is Fate.EXPIRED_TOMBSTONE
    assert record_fate(5, True, True, 9, 2_000, 1_000, end_offset=end) is Fate.SUPERSEDED


def test_a_tombstone_at_or_past_the_end_of_the_pass_is_kept_whatever_its_horizon():
    """Older values of its key may still be in the clean section: dropping it would bring
    them back (a full map stopped mid-segment, and the pass cleaned that whole segment)."""
    assert record_fate(20, True, True, None, 1_000, 5_000, end_offset=20) is Fate.KEEP
    assert record_fate(25, True, True, None, 1_000, 5_000, end_offset=20) is Fate.KEEP
    assert record_fate(19, True, True, None, 1_000, 5_000, end_offset=20) is Fate.EXPIRED_TOMBSTONE


def test_batch_actions():
    assert batch_action(record_count=3, kept=3, is_control=False, horizon_changes=False, keep_header=False) is BatchAction.COPY
    assert batch_action(record_count=3, kept=3, is_control=False, horizon_changes=True, keep_header=False) is BatchAction.REWRITE
    assert batch_action(record_count=3, kept=1, is_control=False, horizon_changes=False, keep_header=False) is BatchAction.REWRITE
    assert batch_action(record_count=3, kept=0, is_control=False, horizon_changes=False, keep_header=False) is BatchAction.DROP
    assert batch_action(record_count=3, kept=0, is_control=False, horizon_changes=False, keep_header=True) is BatchAction.EMPTY
    # An empty header kept by an earlier pass stays only while it is still needed.
    assert batch_action(record_count=0, kept=0, is_control=False, horizon_changes=False, keep_header=True) is BatchAction.COPY
    assert batch_action(record_count=0, kept=0, is_control=False, horizon_changes=False, keep_header=False) is BatchAction.DROP
    assert batch_action(record_count=2, kept=0, is_control=True, horizon_changes=False, keep_header=False) is BatchAction.COPY


def test_delete_horizons():
    assert delete_horizon_after(None, True, 1_000, 500, below_end=True) == 1_500  # first cleaning keeping a tombstone
    assert delete_horizon_after(1_200, True, 5_000, 500, below_end=True) == 1_200  # kept, never pushed back
    assert delete_horizon_after(1_200, False, 5_000, 500, below_end=True) is None  # no tombstone left
    assert delete_horizon_after(None, False, 5_000, 500, below_end=True) is None


def test_a_batch_reaching_the_end_of_the_pass_gets_no_delete_horizon():
    assert delete_horizon_after(None, True, 1_000, 500, below_end=False) is None
    assert delete_horizon_after(1_200, True, 5_000, 500, below_end=False) == 1_200  # one it had stays
    assert delete_horizon_after(1_200, False, 5_000, 500, below_end=False) is None


def test_the_decisions_module_does_no_io():
    tree = ast.parse(pathlib.Path(cleaner_decisions.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "enum", "collections", "dataclasses"}
