"""The log cleaner's bookkeeping over every log of a broker (Kafka's LogCleanerManager):
what to clean next, and swapping a finished pass in. Synchronous; runs on the event-loop
thread, which owns every Log. The pass itself (kafkalite.log.cleaner.clean) runs elsewhere,
in a worker process (kafkalite.broker.log_cleaner), between `next_cleaning` and `complete`.

Each replica cleans its own copy, as in Kafka: cleaning does not depend on leadership, and
replicas' cleaned segments may differ in which records they still hold, never in the
offset or content of a record they both hold. Only offsets below the high watermark are
cleaned, so a record is never removed because of a later one that a truncation may undo.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kafkalite.log import cleaner_decisions, segment_swap
from kafkalite.log.cleaner import CleanJob, CleanResult, SegmentFile
from kafkalite.log.cleaner_decisions import HORIZON_UNKNOWN, LogView, PassKind
from kafkalite.log.config import DEDUPE_BUFFER_BYTES_MIN
from kafkalite.log.log import Log
from kafkalite.log.log_manager import LogManager, TopicPartition
from kafkalite.log.offset_map import OffsetMap

log = logging.getLogger(__name__)

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class CleanerConfig:
    """Broker-level log.cleaner.* settings (Kafka's names)."""

    enable: bool = True  # log.cleaner.enable
    threads: int = 1  # log.cleaner.threads: passes running at once, each in its own worker process
    dedupe_buffer_bytes: int = 128 * MIB  # log.cleaner.dedupe.buffer.size, shared by the threads
    io_max_bytes_per_second: float = float("inf")  # log.cleaner.io.max.bytes.per.second, shared by the threads
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms: sleep when nothing needs cleaning

    def __post_init__(self) -> None:
        assert self.threads >= 1
        assert self.dedupe_buffer_bytes // self.threads >= DEDUPE_BUFFER_BYTES_MIN
        assert self.io_max_bytes_per_second > 0
        assert self.backoff_ms >= 0

    @property
    def map_entries_max(self) -> int:
        return OffsetMap.for_buffer(self.dedupe_buffer_bytes // self.threads).entries_max


@dataclass(frozen=True)
class PlannedCleaning:
    """A pass handed to a worker: the job and what the log looked like when it was made."""

    tp: TopicPartition
    log: Log
    job: CleanJob
    truncations: int
    dirty_ratio: float


class LogCleanerManager:
    def __init__(self, logs: LogManager, config: CleanerConfig, map_entries_max: int | None = None) -> None:
        """`map_entries_max` overrides the offset map's size the config implies (tests and
        benchmarks use maps smaller than the config's floor)."""
        self.logs = logs
        self.config = config
        self.map_entries_max = config.map_entries_max if map_entries_max is None else map_entries_max
        assert self.map_entries_max >= 1
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()  # a pass failed on bad data: skipped until restart
        # Earliest delete horizon of a kept tombstone in each log's clean section (None: no
        # tombstone), with the Log it was seen in; unknown until a pass has looked since
        # start-up (or since the partition's log was deleted and created again).
        self._horizons: dict[TopicPartition, tuple[Log, int | None]] = {}
        self.max_dirty_ratio = 0.0  # of the last log chosen, for metrics

    def views(self, high_watermarks: Mapping[TopicPartition, int]) -> dict[TopicPartition, LogView]:
        out = {}
        logs = self.logs.logs()
        for tp in [tp for tp, (seen, _) in self._horizons.items() if logs.get(tp) is not seen]:
            del self._horizons[tp]
        for tp, plog in logs.items():
            if tp in self.in_progress or tp in self.uncleanable or not plog.config.compact:
                continue
            out[tp] = LogView(
                name=f"{tp[0]}-{tp[1]}", segments=plog.segment_infos(), log_start_offset=plog.log_start_offset,
                first_dirty_offset=plog.first_dirty_offset, high_watermark=high_watermarks.get(tp, plog.log_start_offset),
                compact=True, min_cleanable_dirty_ratio=plog.config.min_cleanable_dirty_ratio,
                min_compaction_lag_ms=plog.config.min_compaction_lag_ms,
                earliest_delete_horizon_ms=self._horizons[tp][1] if tp in self._horizons else HORIZON_UNKNOWN,
            )
        return out

    def next_cleaning(self, high_watermarks: Mapping[TopicPartition, int], now_ms: int) -> PlannedCleaning | None:
        """Choose a log and describe the pass; the log is in progress until `complete` or
        `abort`."""
        views = self.views(high_watermarks)
        by_name = {v.name: tp for tp, v in views.items()}
        choice = cleaner_decisions.choose_log(list(views.values()), now_ms)
        if choice is None:
            return None
        tp = by_name[choice.view.name]
        plog = self.logs.get(*tp)
        assert plog is not None
        infos = choice.view.segments[: choice.cleanable.cleanable_segments]
        job = CleanJob(
            dir=plog.dir, segments=tuple(SegmentFile(plog.segment_path(i.base_offset), i) for i in infos),
            first_dirty_offset=choice.cleanable.first_dirty_offset, kind=choice.kind, now_ms=now_ms,
            segment_bytes=plog.config.segment_bytes, index_interval_bytes=plog.config.index_interval_bytes,
            max_index_entries=plog.config.max_index_entries, delete_retention_ms=plog.config.delete_retention_ms,
            map_entries_max=self.map_entries_max,
        )
        self.in_progress.add(tp)
        self.max_dirty_ratio = choice.cleanable.dirty_ratio
        return PlannedCleaning(tp, plog, job, plog.truncations, choice.cleanable.dirty_ratio)

    def complete(self, planned: PlannedCleaning, result: CleanResult,
                 fs: segment_swap.FileOps = segment_swap.REAL_FILE_OPS) -> bool:
        """Swap the pass's segments in if the log still holds what the pass read (same Log
        object, no truncation since, every replaced segment still there: retention may
        have deleted some meanwhile). Returns whether it did; if not, the `.cleaned` files
        are removed and the pass is forgotten."""
        self.in_progress.discard(planned.tp)
        plog = planned.log
        current = self.logs.get(*planned.tp)
        valid = current is plog and plog.truncations == planned.truncations \
            and all(plog.holds_segments(replaced) for _, replaced in result.cleaned)
        if not valid:
            log.info("%s-%d: the log changed during cleaning; the pass is discarded", *planned.tp)
            segment_swap.discard(planned.job.dir, [state.base_offset for state, _ in result.cleaned], fs)
            return False
        for state, replaced in result.cleaned:
            plog.swap_in_cleaned(state, replaced, fs)
        if planned.job.kind is PassKind.DIRTY:
            plog.first_dirty_offset = max(plog.first_dirty_offset, result.first_dirty_offset)
        self._horizons[planned.tp] = (plog, result.earliest_delete_horizon_ms)
        return True

    def abort(self, planned: PlannedCleaning, *, uncleanable: bool) -> None:
        """The pass failed. Its `.cleaned` files are gone already (clean() removes them on
        an error; a killed worker's are removed here). `uncleanable`: the log's data is bad,
        skip it until restart (Kafka marks such a partition uncleanable too)."""
        self.in_progress.discard(planned.tp)
        segment_swap.discard(planned.job.dir, [s.info.base_offset for s in planned.job.segments])
        if uncleanable:
            self.uncleanable.add(planned.tp)
