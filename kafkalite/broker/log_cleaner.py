"""The log cleaner in the broker: `log.cleaner.threads` loops on the event loop, each
choosing a compacted log (kafkalite.log.cleaner_manager), running one pass in a worker
process (kafkalite.log.cleaner_worker) and swapping the result in on the loop.

Why a process and not a thread: a pass decodes and re-encodes records in Python, and a
thread doing that would hold the GIL against the event loop, which then waits up to the
switch interval at every syscall (produce and fetch latency would grow while it cleans).
A fresh process per pass also returns the offset map's memory after each pass. Its reads
and writes are limited to log.cleaner.io.max.bytes.per.second (shared by the threads).

Only the swap runs on the loop: a few renames per segment, with no await between checking
that the log still holds what the pass read and replacing the segments (STYLE habit 3).
A failed swap (an OSError between renames) leaves files that the next start completes,
but a Log that no longer matches them, so the broker exits (on_fatal), as it would for
any disk failure in the middle of changing a log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kafkalite.clock import wall_ms
from kafkalite.log.cleaner import CleanJob, CleanResult
from kafkalite.log.cleaner_manager import LogCleanerManager, PlannedCleaning
from kafkalite.log.errors import CorruptRecordError

if TYPE_CHECKING:
    from kafkalite.broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class CleanerWorkerError(Exception):
    """A worker process answered with an OSError (a segment deleted under it, a full disk)."""


class CleanerWorkerCrash(CleanerWorkerError):
    """A worker process ended without an answer: a bug (its traceback is in the broker's
    log, which the worker shares) or a kill (the OOM killer)."""


class SubprocessRunner:
    """Runs each pass in a new `python -m kafkalite.log.cleaner_worker` process."""

    WORKER = (sys.executable, "-m", "kafkalite.log.cleaner_worker")

    def __init__(self, worker: tuple[str, ...] = WORKER) -> None:
        self.worker = worker  # the command, to which the broker's pid is appended
        self._procs: set[asyncio.subprocess.Process] = set()

    async def run(self, job: CleanJob, io_bytes_per_second: float) -> CleanResult:
        proc = await asyncio.create_subprocess_exec(
            *self.worker, str(os.getpid()), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        self._procs.add(proc)
        try:
            out, _ = await proc.communicate(pickle.dumps((job, io_bytes_per_second)))
        except BaseException:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            raise
        finally:
            self._procs.discard(proc)
        if proc.returncode != 0 or not out:
            raise CleanerWorkerCrash(f"cleaner worker exited with status {proc.returncode}")
        kind, payload = pickle.loads(out)
        if kind == "ok":
            assert isinstance(payload, CleanResult)
            return payload
        if kind == "corrupt":
            raise CorruptRecordError(payload)
        raise CleanerWorkerError(payload)

    async def close(self) -> None:
        for proc in list(self._procs):
            if proc.returncode is None:
                proc.kill()
        for proc in list(self._procs):
            await proc.wait()


class LogCleanerDriver:
    def __init__(self, manager: LogCleanerManager, high_watermarks: Callable[[], dict[TopicPartition, int]],
                 metrics: BrokerMetrics, on_fatal: Callable[[BaseException], None],
                 write_checkpoints: Callable[[], object], runner: SubprocessRunner | None = None) -> None:
        self.manager = manager
        self.config = manager.config
        self.high_watermarks = high_watermarks
        self.metrics = metrics
        self.on_fatal = on_fatal
        self.write_checkpoints = write_checkpoints  # a coroutine function: cleaner checkpoints, off the loop
        self.runner = runner or SubprocessRunner()
        self.busy = 0

    async def run(self) -> None:
        await asyncio.gather(*(self._cleaner_thread() for _ in range(self.config.threads)))

    async def _cleaner_thread(self) -> None:
        backoff_s = self.config.backoff_ms / 1000
        while True:
            planned = self.manager.next_cleaning(self.high_watermarks(), wall_ms())
            if planned is None:
                await asyncio.sleep(backoff_s)
                continue
            if not await self.clean_one(planned):
                await asyncio.sleep(backoff_s)

    async def clean_one(self, planned: PlannedCleaning) -> bool:
        """Run one planned pass and swap it in; returns whether the pass succeeded."""
        tp = planned.tp
        started = time.monotonic()
        io_rate = self.config.io_max_bytes_per_second / self.config.threads
        self.busy += 1
        try:
            result = await self.runner.run(planned.job, io_rate)
        except (CorruptRecordError, CleanerWorkerCrash) as e:
            # Retrying would fail the same way, again and again: skip the log until restart
            # (kafkalite_log_cleaner_uncleanable_partitions counts them), as Kafka does.
            log.error("log cleaner: %s-%d will not be cleaned until restart: %s", *tp, e)
            self.manager.abort(planned, uncleanable=True)
            self.metrics.cleaner_pass("failed", time.monotonic() - started)
            return False
        except (CleanerWorkerError, OSError) as e:
            log.warning("log cleaner: pass over %s-%d failed: %s", *tp, e)
            self.manager.abort(planned, uncleanable=False)
            self.metrics.cleaner_pass("failed", time.monotonic() - started)
            return False
        except BaseException:  # cancelled at shutdown: the worker is killed, its files removed
            self.manager.abort(planned, uncleanable=False)
            raise
        finally:
            self.busy -= 1
        try:
            swapped = self.manager.complete(planned, result)
        except OSError as e:
            self.on_fatal(e)
            raise
        elapsed = time.monotonic() - started
        self.metrics.cleaner_pass("swapped" if swapped else "discarded", elapsed, result.stats)
        if swapped:
            stats = result.stats
            log.info("log cleaner: %s-%d %s pass (dirty ratio %.2f) in %.2f s: read %.2f MB, wrote %.2f MB, %d of %d records kept, "
                     "%d segments became %d, first dirty offset %d", *tp, planned.job.kind.value, planned.dirty_ratio, elapsed,
                     stats.bytes_read / 1e6, stats.bytes_written / 1e6, stats.records_kept, stats.records_read,
                     stats.segments_replaced, stats.segments_written, planned.log.first_dirty_offset)
            try:
                await self.write_checkpoints()
            except OSError as e:  # a stale checkpoint only makes the next start redo work
                log.warning("log cleaner: writing cleaner-offset-checkpoint failed: %s", e)
        return True

    async def close(self) -> None:
        await self.runner.close()
