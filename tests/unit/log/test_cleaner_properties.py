"""The log cleaner on real logs, against a model (Hypothesis): latest value per key in the
cleaned segments, the active segment untouched, offsets preserved and increasing, tombstones
kept until delete.retention.ms after their first cleaning then gone, the offset map's bound
(several passes when it is full), producer state and reads across the gaps."""

from __future__ import annotations

import dataclasses
import os
import tempfile

from compaction_testkit import (
    COMPACT,
    RETENTION_MS,
    TP,
    BatchSpec,
    all_records,
    append_batches,
    new_manager,
    open_manager,
    plan,
    read_as_consumer,
    run_passes,
    segment_batches,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core.producer_state import BatchHeader as ProducerBatch
from kafkalite.core.producer_state import ProducerStateTable, last_sequence
from kafkalite.log import cleaner_worker
from kafkalite.log.cleaner import clean
from kafkalite.log.cleaner_decisions import PassKind
from kafkalite.log.log import Log
from kafkalite.log.records import (
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    Record,
    decode_header,
    encode_batch,
    iter_headers,
)

KEYS = [b"k%d" % i for i in range(12)] + [b"a-long-key-past-the-raw-limit-%d" % i for i in range(3)]

batch_specs = st.lists(
    st.builds(
        BatchSpec,
        records=st.lists(
            st.tuples(st.sampled_from(KEYS), st.none() | st.binary(min_size=0, max_size=40)),
            min_size=1, max_size=6,
        ).map(tuple),
        producer_id=st.sampled_from([-1, -1, 7, 9]),
        compression=st.sampled_from([COMPRESSION_NONE, COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_ZSTD]),
    ),
    min_size=1, max_size=60,
)


def latest_per_key(recs: list[Record]) -> dict[bytes, Record]:
    out: dict[bytes, Record] = {}
    for r in recs:
        out[r.key] = r
    return out


def producer_state(plog: Log) -> dict[int, tuple[int, int]]:
    table = ProducerStateTable.rebuild(
        ProducerBatch(h.producer_id, h.producer_epoch, h.base_sequence, last_sequence(h.base_sequence, h.last_offset_delta + 1),
                      h.base_offset, h.last_offset)
        for h in plog.iter_batch_headers() if h.producer_id >= 0
    )
    return {pid: (table.entry(pid).producer_epoch, table.entry(pid).last_seq) for pid in (7, 9) if table.entry(pid) is not None}


@settings(max_examples=200, deadline=None)
@given(batch_specs, st.sampled_from([1, 2, 5, 1000]))
def test_cleaning_keeps_the_latest_record_per_key_and_offsets(batches, map_entries_max):
    with tempfile.TemporaryDirectory() as tmp:
        logs, plog = open_manager(tmp)
        written = append_batches(plog, batches)
        before = all_records(plog)
        before_by_offset = {r.offset: r for r in before}
        batch_spans_before = {(h.base_offset, h.last_offset) for h in plog.iter_batch_headers()}
        active_before = plog.active_segment.read_at(0, plog.active_segment.size)
        active_base = plog.active_segment.base_offset
        leo, start = plog.log_end_offset, plog.log_start_offset
        now = 50_000

        results = run_passes(new_manager(logs, map_entries_max), plog, now)

        after = all_records(plog)
        cleaned = [r for r in after if r.offset < active_base]
        expected_cleaned = latest_per_key([r for r in before if r.offset < active_base])
        # Exactly the latest record of each key among the cleaned segments, tombstones too
        # (delete.retention.ms has not passed since their first cleaning).
        assert {r.key: r for r in cleaned} == expected_cleaned
        assert len(cleaned) == len(expected_cleaned)
        # Every survivor is the original record at its original offset.
        assert all(before_by_offset[r.offset] == r for r in after)
        offsets = [r.offset for r in after]
        assert offsets == sorted(set(offsets))
        # The active segment is untouched; the log's ends too.
        assert plog.active_segment.read_at(0, plog.active_segment.size) == active_before
        assert (plog.log_start_offset, plog.log_end_offset) == (start, leo)
        # Batches keep their base offset and last offset delta; segments stay contiguous.
        assert {(h.base_offset, h.last_offset) for h in plog.iter_batch_headers()} <= batch_spans_before
        for earlier, later in zip(plog.segments, plog.segments[1:]):
            assert earlier.next_offset == later.base_offset
        # Empty headers stay only where needed: a segment's last batch, a producer's last.
        empty = [h for h in plog.iter_batch_headers() if h.record_count == 0]
        assert len(empty) <= len(plog.segments) + len(written)
        # The offset map's bound: never more keys than it holds, so more passes when the
        # dirty section has more keys.
        assert all(r.stats.map_entries <= map_entries_max for r in results)
        keys_before_active = {r.key for r in before if r.offset < active_base}
        if len(keys_before_active) > map_entries_max:
            assert len([r for r in results if r.stats.records_read]) >= 2
        assert plog.first_dirty_offset == active_base
        # Idempotent producers: a new leader rebuilding from headers finds each producer's
        # epoch and last sequence as written.
        assert producer_state(plog) == {pid: state for pid, state in written.items()}
        # A consumer stepping over the gaps sees exactly the surviving records.
        assert read_as_consumer(plog) == after
        # A fetch at any offset, in a gap or not, starts with the first batch ending at or
        # after it (the index finds it), and counts as many bytes as it could read.
        spans = [(h.base_offset, h.last_offset) for h in plog.iter_batch_headers()]
        for offset in range(start, leo):
            data = plog.read(offset, 1)
            first = decode_header(data)
            assert (first.base_offset, first.last_offset) == next(sp for sp in spans if sp[1] >= offset)
            assert plog.bytes_available(offset, leo) == sum(h.size_bytes for h in plog.iter_batch_headers() if h.last_offset >= offset)
        # Reopened after a crash (indexes rebuilt) or a clean stop: the same log.
        plog.close()
        for clean_shutdown in (False, True):
            reopened = Log.open(plog.dir, plog.config, clean_shutdown=clean_shutdown, now_ms=now)
            assert all_records(reopened) == after
            assert read_as_consumer(reopened) == after
            reopened.close()


@settings(max_examples=150, deadline=None)
@given(batch_specs)
def test_tombstones_stay_until_delete_retention_ms_after_their_first_cleaning(batches):
    with tempfile.TemporaryDirectory() as tmp:
        logs, plog = open_manager(tmp)
        append_batches(plog, batches)
        active_base = plog.active_segment.base_offset
        first = 50_000
        manager = new_manager(logs)
        run_passes(manager, plog, first)
        cleaned = [r for r in all_records(plog) if r.offset < active_base]
        tombstones = [r for r in cleaned if r.value is None]

        # Just before the horizon nothing is due; a pass forced then keeps every tombstone.
        assert plan(manager, plog, first + RETENTION_MS - 1) is None
        restarted = new_manager(logs)  # after a restart the horizon is unknown: one pass looks
        assert run_passes(restarted, plog, first + RETENTION_MS - 1) != [] or not cleaned
        assert [r for r in all_records(plog) if r.offset < active_base] == cleaned
        assert plan(restarted, plog, first + RETENTION_MS - 1) is None

        # At the horizon: a pass runs for the tombstones alone and removes them, and only them.
        results = run_passes(manager, plog, first + RETENTION_MS)
        after = [r for r in all_records(plog) if r.offset < active_base]
        assert after == [r for r in cleaned if r.value is not None]
        if tombstones:
            assert results and sum(r.stats.tombstones_removed for r in results) == len(tombstones)
        # Nothing more to do afterwards (no horizon left to wait for).
        assert run_passes(manager, plog, first + 10 * RETENTION_MS) == []
        assert read_as_consumer(plog) == all_records(plog)
        plog.close()


def test_a_pass_changes_nothing_when_every_key_is_already_unique(tmp_path):
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"k%d" % i, b"v"),)) for i in range(40)])
    before = segment_batches(plog)
    results = run_passes(new_manager(logs), plog, 50_000)
    assert results and all(r.cleaned == [] for r in results)  # nothing rewritten, nothing swapped
    assert segment_batches(plog) == before


def test_the_dirty_section_is_mapped_only_from_the_first_dirty_offset(tmp_path):
    """A second pass maps only what was appended since the first; records of the clean
    section are deduplicated against it."""
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"k%d" % (i % 5), b"old%d" % i),)) for i in range(40)])
    manager = new_manager(logs)
    run_passes(manager, plog, 50_000)
    first_dirty = plog.first_dirty_offset
    append_batches(plog, [BatchSpec(((b"k1", b"new%d" % i),)) for i in range(40)], start_ms=5_000)
    dirty = [r for r in all_records(plog) if first_dirty <= r.offset < plog.active_segment.base_offset]
    results = run_passes(manager, plog, 60_000)
    # Only the dirty section's keys are mapped: k1, and those of the old active segment.
    assert results[0].stats.map_entries == len({r.key for r in dirty}) < 5
    # Segments merged; the empty headers that ended the old ones went with them.
    assert len([h for h in plog.iter_batch_headers() if h.record_count == 0]) <= len(plog.segments)
    assert plog.first_dirty_offset > first_dirty
    active_base = plog.active_segment.base_offset
    latest = latest_per_key([r for r in all_records(plog) if r.offset < active_base])
    assert latest[b"k1"].value.startswith(b"new")
    assert sorted(latest) == [b"k%d" % i for i in range(5)]


def test_a_truncation_makes_the_truncated_offsets_dirty_again(tmp_path):
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"k%d" % (i % 3), b"v%d" % i),)) for i in range(60)])
    run_passes(new_manager(logs), plog, 50_000)
    assert plog.first_dirty_offset == plog.active_segment.base_offset
    plog.truncate_to(plog.first_dirty_offset - 1)
    assert plog.first_dirty_offset == plog.log_end_offset


def test_a_pass_planned_before_a_truncation_is_discarded(tmp_path):
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"k%d" % (i % 3), b"v%d" % i),)) for i in range(60)])
    manager = new_manager(logs)
    planned = plan(manager, plog, 50_000)
    result = clean(planned.job)
    assert result.cleaned
    plog.truncate_to(plog.log_end_offset - 1)
    before = segment_batches(plog)
    assert not manager.complete(planned, result)
    assert segment_batches(plog) == before
    assert not [n for n in os.listdir(plog.dir) if n.endswith(".cleaned")]
    assert manager.in_progress == set()


def test_a_pass_is_discarded_when_retention_deleted_a_segment_meanwhile(tmp_path):
    logs, plog = open_manager(str(tmp_path))
    plog.config = plog.config.__class__(**{**plog.config.__dict__, "cleanup_policy": frozenset({"compact", "delete"}),
                                          "retention_ms": 1})
    append_batches(plog, [BatchSpec(((b"k%d" % (i % 3), b"v%d" % i),)) for i in range(60)])
    manager = new_manager(logs)
    planned = plan(manager, plog, 50_000)
    result = clean(planned.job)
    assert plog.delete_retained_segments(10**12) > 0
    assert not manager.complete(planned, result)
    assert all_records(plog)  # what retention left is readable
    assert read_as_consumer(plog) == all_records(plog)


def test_only_offsets_below_the_high_watermark_are_cleaned(tmp_path):
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"same", b"v%d" % i),)) for i in range(60)])
    segments = plog.segments
    hw = segments[2].base_offset  # inside the log: only the first two segments end at or below it
    planned = new_manager(logs).next_cleaning({TP: hw}, 50_000)
    assert [s.info.base_offset for s in planned.job.segments] == [segments[0].base_offset, segments[1].base_offset]
    assert all(s.info.next_offset <= hw for s in planned.job.segments)


def test_batch_headers_in_the_cleaned_log_are_whole_batches_of_the_original(tmp_path):
    """Rewritten batches keep base offset, last offset delta, leader epoch and producer
    fields; emptied ones have no records and no compression."""
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"k", b"v%d" % i), (b"j%d" % i, b"w")), producer_id=7, compression=COMPRESSION_GZIP)
                          for i in range(30)])
    original = {h.base_offset: h for h in plog.iter_batch_headers()}
    run_passes(new_manager(logs), plog, 50_000)
    for _, batch in segment_batches(plog):
        for _, h in iter_headers(batch):
            o = original[h.base_offset]
            assert (h.last_offset_delta, h.partition_leader_epoch, h.producer_id, h.producer_epoch, h.base_sequence) == \
                (o.last_offset_delta, o.partition_leader_epoch, o.producer_id, o.producer_epoch, o.base_sequence)
            if h.record_count == 0:
                assert h.compression == 0


def _no_deleted_key_is_back(before: list[Record], after: list[Record]) -> None:
    """Each key's latest record is as written, or gone if that was a tombstone: cleaning
    never lets an older value of a key show through."""
    latest_before, latest_after = latest_per_key(before), latest_per_key(after)
    for key, record in latest_before.items():
        if key in latest_after:
            assert latest_after[key] == record, f"key {key!r}: {latest_after[key]} shows instead of {record}"
        else:
            assert record.value is None, f"key {key!r} lost its latest value {record}"


def test_a_tombstone_past_where_a_full_map_stopped_keeps_its_key_deleted(tmp_path):
    """The map fills inside a segment; the pass cleans that whole segment. A tombstone past
    the map's end must get no delete horizon there (older values of its key were not yet
    removed), else a later pass without a map drops it and the deleted value is back."""
    config = dataclasses.replace(COMPACT, segment_bytes=2_000, roll_ms=100_000, delete_retention_ms=100,
                                 min_cleanable_dirty_ratio=0.5)
    logs, plog = open_manager(str(tmp_path), config)
    now = 200_000

    def put(key: bytes, value: bytes | None, at_ms: int) -> None:
        plog.append_as_leader(encode_batch([(key, value, ())], base_timestamp=at_ms), 0, at_ms)

    put(b"k0", b"x" * 900, now)
    put(b"k1", b"x" * 900, now + 1)  # big enough that the dirty ratio stays low after one pass
    plog.maybe_roll(400_000)
    for i, (key, value) in enumerate([(b"A", b"alive"), (b"B", b"b"), (b"C", b"c"), (b"A", None)]):
        put(key, value, 400_000 + i)  # one segment: A, B, C, then A's tombstone
    plog.maybe_roll(600_000)
    put(b"Z", b"z", 600_000)
    before = all_records(plog)
    manager = new_manager(logs, map_entries_max=4)

    planned = plan(manager, plog, 700_000)
    result = clean(planned.job)
    assert manager.complete(planned, result)
    tombstone = next(r for r in before if r.key == b"A" and r.value is None)
    assert result.first_dirty_offset <= tombstone.offset  # the map stopped before the tombstone
    for now_ms in (800_000, 10**9):  # past any horizon the first pass could have set
        run_passes(manager, plog, now_ms)
        _no_deleted_key_is_back(before, read_as_consumer(plog))
        assert tombstone in read_as_consumer(plog)  # still dirty (the ratio is low): unmapped, so kept


@settings(max_examples=150, deadline=None)
@given(batch_specs, st.sampled_from([1, 2, 3, 5]), st.sampled_from([0.0, 0.3, 0.6]), st.lists(st.integers(0, 2 * RETENTION_MS), max_size=8))
def test_no_deleted_key_comes_back_whatever_the_passes(batches, map_entries_max, dirty_ratio, waits_ms):
    """Passes one at a time, each after a wait (so tombstone passes come between passes
    that stopped mid-segment on a full map); after each, every key reads as written last."""
    with tempfile.TemporaryDirectory() as tmp:
        logs, plog = open_manager(tmp, dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=dirty_ratio))
        append_batches(plog, batches)
        before = all_records(plog)
        manager = new_manager(logs, map_entries_max)
        now = 50_000
        for wait_ms in [*waits_ms, 10 * RETENTION_MS]:
            now += wait_ms
            planned = plan(manager, plog, now)
            if planned is not None:
                assert manager.complete(planned, clean(planned.job))
            _no_deleted_key_is_back(before, read_as_consumer(plog))
        plog.close()


def test_a_batch_with_records_out_of_offset_order_stops_the_pass_as_bad_data(tmp_path):
    """Such a batch (a client's offset deltas 0, 0, 2, appended before Produce refused
    them) made OffsetMap.put's assertion fail: the worker died, and did so again after
    every restart. It is bad data in the log: the pass reports it, the log is marked
    uncleanable, no `.cleaned` file is left."""
    logs, plog = open_manager(str(tmp_path))
    records_out_of_order = [Record(offset=d, timestamp=1_000, key=k, value=b"v", headers=()) for d, k in ((0, b"a"), (0, b"b"), (2, b"c"))]
    plog.append_as_leader(encode_batch(records_out_of_order, base_offset=0), 0, 1_000)
    append_batches(plog, [BatchSpec(((b"k%d" % i, b"x" * 50),)) for i in range(30)], start_ms=1_001)
    planned = plan(new_manager(logs), plog, 50_000)
    assert planned.job.kind is PassKind.DIRTY
    assert cleaner_worker.run(planned.job, float("inf"), os.getppid())[0] == "corrupt"
    assert not [n for n in os.listdir(plog.dir) if n.endswith(".cleaned")]
