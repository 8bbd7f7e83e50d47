"""The broker's log cleaner driver with its real worker processes (no broker): a pass runs
in `python -m kafkalite.log.cleaner_worker` and is swapped in; bad data and a crashing
worker make the log uncleanable until restart; a pass cancelled at shutdown kills its
worker and leaves no cleaned files."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "log"))

from compaction_testkit import TP, BatchSpec, all_records, append_batches, open_manager

from kafkalite.broker.log_cleaner import LogCleanerDriver, SubprocessRunner
from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.log.cleaner_manager import CleanerConfig, LogCleanerManager


class Checkpoints:
    def __init__(self) -> None:
        self.writes = 0

    async def __call__(self) -> None:
        self.writes += 1


def make_driver(logs, io_rate: float = float("inf"), runner: SubprocessRunner | None = None
                ) -> tuple[LogCleanerDriver, Checkpoints, list[BaseException]]:
    fatal: list[BaseException] = []
    checkpoints = Checkpoints()
    manager = LogCleanerManager(logs, CleanerConfig(io_max_bytes_per_second=io_rate, dedupe_buffer_bytes=1 << 20))
    driver = LogCleanerDriver(manager, lambda: {TP: logs.get(*TP).log_end_offset}, BrokerMetrics(), fatal.append, checkpoints,
                              runner)
    return driver, checkpoints, fatal


def flip_bit(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x10]))


def dirty_log(tmp_path):
    logs, plog = open_manager(str(tmp_path))
    append_batches(plog, [BatchSpec(((b"k%d" % (i % 5), b"v%d" % i), (b"j", b"w%d" % i))) for i in range(200)])
    return logs, plog


async def test_a_pass_runs_in_a_worker_process_and_is_swapped_in(tmp_path):
    logs, plog = dirty_log(tmp_path)
    driver, checkpoints, fatal = make_driver(logs)
    active_base = plog.active_segment.base_offset
    planned = driver.manager.next_cleaning({TP: plog.log_end_offset}, 50_000)
    assert await driver.clean_one(planned)
    cleaned = [r for r in all_records(plog) if r.offset < active_base]
    assert sorted(r.key for r in cleaned) == [b"j"] + [b"k%d" % i for i in range(5)]
    assert plog.first_dirty_offset == active_base
    assert checkpoints.writes == 1 and fatal == [] and driver.busy == 0
    assert driver.metrics.cleaner_passes.labels("swapped")._value.get() == 1


async def test_a_corrupt_segment_makes_the_log_uncleanable_until_restart(tmp_path):
    logs, plog = dirty_log(tmp_path)
    flip_bit(plog.segments[1].log_path, 70)  # in a record, past the header
    before = {s.base_offset: s.read_at(0, s.size) for s in plog.segments}
    driver, _, fatal = make_driver(logs)
    planned = driver.manager.next_cleaning({TP: plog.log_end_offset}, 50_000)
    assert not await driver.clean_one(planned)
    assert driver.manager.uncleanable == {TP}
    assert driver.manager.next_cleaning({TP: plog.log_end_offset}, 50_000) is None
    assert {s.base_offset: s.read_at(0, s.size) for s in plog.segments} == before  # nothing sealed with a new CRC
    assert not [n for n in os.listdir(plog.dir) if n.endswith(".cleaned")]
    assert fatal == []


async def test_a_crashing_worker_makes_the_log_uncleanable_until_restart(tmp_path):
    logs, plog = dirty_log(tmp_path)
    crashing = SubprocessRunner((sys.executable, "-c", "import sys; sys.stdin.buffer.read(); raise AssertionError('a bug')"))
    driver, _, fatal = make_driver(logs, runner=crashing)
    planned = driver.manager.next_cleaning({TP: plog.log_end_offset}, 50_000)
    assert not await driver.clean_one(planned)
    assert driver.manager.uncleanable == {TP} and fatal == []
    assert driver.metrics.cleaner_passes.labels("failed")._value.get() == 1


async def test_a_pass_cancelled_at_shutdown_kills_its_worker_and_leaves_no_cleaned_files(tmp_path):
    logs, plog = dirty_log(tmp_path)
    driver, _, _ = make_driver(logs, io_rate=2_000)  # slow enough to be cancelled mid-pass
    runner = driver.runner
    assert isinstance(runner, SubprocessRunner)
    planned = driver.manager.next_cleaning({TP: plog.log_end_offset}, 50_000)
    task = asyncio.create_task(driver.clean_one(planned))
    for _ in range(200):
        if runner._procs:
            break
        await asyncio.sleep(0.01)
    (proc,) = runner._procs
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert proc.returncode is not None  # killed and reaped
    await driver.close()
    assert not [n for n in os.listdir(plog.dir) if n.endswith(".cleaned")]
    assert driver.manager.in_progress == set()


async def test_two_cleaner_threads_clean_two_logs_at_once_never_the_same_one(tmp_path):
    logs, plog = dirty_log(tmp_path)
    other = logs.get_or_create("u", 0, plog.config, now_ms=0)
    append_batches(other, [BatchSpec(((b"x%d" % (i % 3), b"v%d" % i),)) for i in range(200)])
    manager = LogCleanerManager(logs, CleanerConfig(threads=2, dedupe_buffer_bytes=1 << 20, backoff_ms=50))
    hws = lambda: {tp: lg.log_end_offset for tp, lg in logs.logs().items()}  # noqa: E731
    driver = LogCleanerDriver(manager, hws, BrokerMetrics(), lambda e: None, Checkpoints())
    seen_busy = 0
    task = asyncio.create_task(driver.run())
    try:
        for _ in range(400):
            seen_busy = max(seen_busy, len(manager.in_progress))
            if all(lg.first_dirty_offset == lg.active_segment.base_offset for lg in logs.logs().values()):
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await driver.close()
    assert all(lg.first_dirty_offset == lg.active_segment.base_offset for lg in logs.logs().values())
    assert seen_busy == 2  # both logs at once, each by one thread
