"""Crash safety of swapping cleaned segments in (the .cleaned / .swap / .deleted protocol):
a crash between any two file operations, of the swap or of the recovery that completes it,
leaves a log that reopens readable, with either the old segments or the new ones, and the
same latest-per-key view."""

from __future__ import annotations

import os

import pytest
from compaction_testkit import BatchSpec, all_records, append_batches, new_manager, open_manager, plan, read_as_consumer, run_passes

from kafkalite.log import segment_swap
from kafkalite.log.cleaner import clean
from kafkalite.log.log import Log


class SimulatedCrash(Exception):
    pass


class CrashingFileOps(segment_swap.FileOps):
    """Real file operations until the `crash_at`-th, which raises instead of running."""

    def __init__(self, crash_at: int) -> None:
        self.crash_at = crash_at
        self.done = 0

    def _step(self) -> None:
        if self.done == self.crash_at:
            raise SimulatedCrash(f"crash before file operation {self.done}")
        self.done += 1

    def rename(self, src: str, dst: str) -> None:
        self._step()
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self._step()
        super().remove(path)

    def fsync_dir(self, dir_path: str) -> None:
        self._step()
        super().fsync_dir(dir_path)


def latest_per_key(plog: Log) -> dict[bytes, tuple[int, bytes | None]]:
    return {r.key: (r.offset, r.value) for r in all_records(plog)}


def build(dir_path: str):
    """A compacted log cleaned once, then written to again, and the second pass written but
    not swapped in: it merges the small cleaned segments (several per group) and cleans the
    new ones (many updates of few keys, two tombstones, an idempotent producer)."""
    logs, plog = open_manager(dir_path)
    specs = [BatchSpec(((b"k%d" % (i % 4), b"v%d" % i), (b"j%d" % (i % 3), b"w%d" % i)), producer_id=7 if i % 5 == 0 else -1)
             for i in range(40)]
    specs[30] = BatchSpec(((b"k1", None),))
    specs[33] = BatchSpec(((b"j2", None),))
    append_batches(plog, specs)
    manager = new_manager(logs)
    run_passes(manager, plog, 40_000)
    append_batches(plog, specs[:25], start_ms=2_000)
    planned = plan(manager, plog, 50_000)
    result = clean(planned.job)
    assert any(len(replaced) > 1 for _, replaced in result.cleaned), "a group merges several segments"
    assert len(result.cleaned) > 1
    return logs, plog, manager, planned, result


def segment_bytes(plog: Log) -> dict[int, bytes]:
    return {s.base_offset: s.read_at(0, s.size) for s in plog.segments}


def abandon(plog: Log) -> None:
    """The process died: descriptors go, nothing is written on the way out."""
    for segment in plog.segments:
        try:
            segment.close()
        except OSError:
            pass


def reopen(plog: Log) -> Log:
    return Log.open(plog.dir, plog.config, recovery_point=plog.log_start_offset, clean_shutdown=False, now_ms=60_000)


def check_recovered(reopened: Log, old: dict[int, bytes], new: dict[int, bytes], groups: list[tuple[int, ...]],
                    view: dict, leo: int) -> str:
    """Each group of replaced segments is either all there as before, or replaced by its
    cleaned segment, byte for byte; the rest of the log is as before. Returns "old", "new"
    or "mixed" (some groups swapped in)."""
    now = segment_bytes(reopened)
    swapped = 0
    for replaced in groups:
        if replaced[0] in now and now[replaced[0]] == new[replaced[0]] and not any(b in now for b in replaced[1:]):
            swapped += 1
        else:
            assert all(now.get(b) == old[b] for b in replaced), f"group {replaced} is neither old nor new"
    replaced_bases = {b for group in groups for b in group}
    assert {b: d for b, d in now.items() if b not in replaced_bases} == {b: d for b, d in old.items() if b not in replaced_bases}
    assert latest_per_key(reopened) == view
    assert reopened.log_end_offset == leo
    assert read_as_consumer(reopened) == all_records(reopened)
    leftovers = [n for n in os.listdir(reopened.dir) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert leftovers == []
    return "old" if swapped == 0 else "new" if swapped == len(groups) else "mixed"


def test_a_crash_at_every_step_of_the_swap_leaves_the_old_or_the_new_log(tmp_path):
    reference_dir = str(tmp_path / "reference")
    os.makedirs(reference_dir)
    _, ref_log, ref_manager, ref_planned, ref_result = build(reference_dir)
    ref_manager.complete(ref_planned, ref_result)
    new = segment_bytes(ref_log)
    groups = [replaced for _, replaced in ref_result.cleaned]
    abandon(ref_log)
    steps = 0
    outcomes = set()
    while True:
        run_dir = str(tmp_path / f"run{steps}")
        os.makedirs(run_dir)
        logs, plog, manager, planned, result = build(run_dir)
        old = segment_bytes(plog)
        view, leo = latest_per_key(plog), plog.log_end_offset
        try:
            manager.complete(planned, result, fs=CrashingFileOps(steps))
            crashed = False
        except SimulatedCrash:
            crashed = True
        abandon(plog)
        reopened = reopen(plog)
        outcomes.add(check_recovered(reopened, old, new, groups, view, leo))
        reopened.close()
        if not crashed:
            break
        steps += 1
    assert steps >= 20, "the swap has many steps; a crash was tried before each"
    assert outcomes == {"old", "mixed", "new"}


def test_a_crash_during_recovery_is_recovered_at_the_next_open(tmp_path):
    """Crash in the middle of the swap, then again before every file operation of the
    recovery at the next open: the open after that completes or undoes each group."""
    reference_dir = str(tmp_path / "reference")
    os.makedirs(reference_dir)
    _, ref_log, ref_manager, ref_planned, ref_result = build(reference_dir)
    probe = CrashingFileOps(10**9)
    ref_manager.complete(ref_planned, ref_result, fs=probe)
    new = segment_bytes(ref_log)
    groups = [replaced for _, replaced in ref_result.cleaned]
    abandon(ref_log)
    tried = 0
    for swap_crash in range(1, probe.done, 3):
        for recovery_crash in range(0, 8):
            run_dir = str(tmp_path / f"r{swap_crash}-{recovery_crash}")
            os.makedirs(run_dir)
            _, plog, manager, planned, result = build(run_dir)
            old = segment_bytes(plog)
            view, leo = latest_per_key(plog), plog.log_end_offset
            with pytest.raises(SimulatedCrash):
                manager.complete(planned, result, fs=CrashingFileOps(swap_crash))
            abandon(plog)
            try:
                segment_swap.recover(os.path.join(run_dir, "t-0"), CrashingFileOps(recovery_crash))
            except SimulatedCrash:
                tried += 1
            reopened = reopen(plog)
            check_recovered(reopened, old, new, groups, view, leo)
            reopened.close()
    assert tried > 0


def test_cleaned_files_of_a_pass_never_swapped_in_are_removed_at_open(tmp_path):
    """A crash while the worker writes, or before the swap starts: .cleaned files (whole or
    cut short) are removed and the old segments stay."""
    _, plog, manager, planned, result = build(str(tmp_path))
    old = all_records(plog)
    cleaned_log = os.path.join(plog.dir, f"{result.cleaned[0][0].base_offset:020d}.log.cleaned")
    with open(cleaned_log, "r+b") as f:
        f.truncate(os.path.getsize(cleaned_log) // 2)
    abandon(plog)
    reopened = reopen(plog)
    assert all_records(reopened) == old
    assert not [n for n in os.listdir(reopened.dir) if n.endswith(".cleaned")]
    reopened.close()


def test_a_failed_pass_leaves_no_cleaned_files(tmp_path):
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"k%d" % (i % 3), b"v%d" % i),)) for i in range(60)])
    planned = plan(new_manager(logs), plog, 50_000)
    calls = 0

    def io(n: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 12:
            raise OSError("disk full")

    with pytest.raises(OSError):
        clean(planned.job, io)
    assert not [n for n in os.listdir(plog.dir) if n.endswith(".cleaned")]


def test_recover_leaves_a_directory_without_swap_files_alone(tmp_path):
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"k", b"v%d" % i),)) for i in range(20)])
    before = sorted(os.listdir(plog.dir))
    ops = CrashingFileOps(0)  # any file operation would crash
    assert segment_swap.recover(plog.dir, ops) == set()
    assert sorted(os.listdir(plog.dir)) == before
