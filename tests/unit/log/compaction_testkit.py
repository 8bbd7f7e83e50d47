"""Helpers shared by the log cleaner's unit tests: write keyed batches into a real Log,
read every record back (CRC checked), run cleaning passes to the end."""

from __future__ import annotations

import dataclasses
import os

from kafkalite.log.cleaner import CleanResult, clean
from kafkalite.log.cleaner_manager import CleanerConfig, LogCleanerManager, PlannedCleaning
from kafkalite.log.config import POLICY_COMPACT, LogConfig
from kafkalite.log.log import Log
from kafkalite.log.log_manager import LogManager
from kafkalite.log.records import Record, decode_records, encode_batch, validate_batches

TP = ("t", 0)
RETENTION_MS = 10_000
COMPACT = LogConfig(segment_bytes=700, index_interval_bytes=150, cleanup_policy=frozenset({POLICY_COMPACT}),
                    delete_retention_ms=RETENTION_MS, min_cleanable_dirty_ratio=0.0)


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    records: tuple[tuple[bytes | None, bytes | None], ...]  # (key, value); value None = tombstone
    producer_id: int = -1
    compression: int = 0


def open_manager(dir_path: str, config: LogConfig = COMPACT) -> tuple[LogManager, Log]:
    logs = LogManager([dir_path], config)
    logs.open_all(now_ms=0)
    plog = logs.get_or_create(*TP, config, now_ms=0)
    return logs, plog


def append_batches(plog: Log, batches: list[BatchSpec], start_ms: int = 1_000) -> dict[int, tuple[int, int]]:
    """Append as leader; returns producer id -> (epoch, last sequence) as written."""
    sequences: dict[int, int] = {}
    for i, spec in enumerate(batches):
        now = start_ms + i
        seq = sequences.get(spec.producer_id, 0) if spec.producer_id >= 0 else -1
        batch = encode_batch([(k, v, ()) for k, v in spec.records], base_timestamp=now, compression=spec.compression,
                             producer_id=spec.producer_id, producer_epoch=0 if spec.producer_id >= 0 else -1, base_sequence=seq)
        plog.append_as_leader(batch, 0, now)
        if spec.producer_id >= 0:
            sequences[spec.producer_id] = seq + len(spec.records)
    return {pid: (0, seq - 1) for pid, seq in sequences.items()}


def segment_batches(plog: Log) -> list[tuple[int, bytes]]:
    """(segment base offset, batch bytes) of every batch, CRC-checked."""
    out = []
    for segment in plog.segments:
        data = segment.read_at(0, segment.size)
        for pos, header in validate_batches(data, from_client=False):
            out.append((segment.base_offset, data[pos : pos + header.size_bytes]))
    return out


def all_records(plog: Log) -> list[Record]:
    return [r for _, batch in segment_batches(plog) for r in decode_records(batch)]


def read_as_consumer(plog: Log, max_bytes: int = 300) -> list[Record]:
    """Fetch from the log start to the LEO as a consumer does: from each batch's last
    offset + 1, so gaps left by the cleaner are stepped over."""
    out = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, max_bytes)
        assert data, f"no batch at or after offset {offset} below the LEO {plog.log_end_offset}"
        for pos, header in validate_batches(data, from_client=False):
            out += [r for r in decode_records(data, pos) if r.offset >= offset]
            offset = header.last_offset + 1
    return out


def new_manager(logs: LogManager, map_entries_max: int = 1000) -> LogCleanerManager:
    return LogCleanerManager(logs, CleanerConfig(), map_entries_max)


def run_passes(manager: LogCleanerManager, plog: Log, now_ms: int, limit: int = 500) -> list[CleanResult]:
    """Clean (in this process) until the manager finds nothing to do."""
    results = []
    for _ in range(limit):
        planned = manager.next_cleaning({TP: plog.log_end_offset}, now_ms)
        if planned is None:
            return results
        result = clean(planned.job)
        assert manager.complete(planned, result)
        results.append(result)
    raise AssertionError(f"still cleaning after {limit} passes")


def plan(manager: LogCleanerManager, plog: Log, now_ms: int) -> PlannedCleaning | None:
    return manager.next_cleaning({TP: plog.log_end_offset}, now_ms)


def files_in(dir_path: str) -> set[str]:
    return set(os.listdir(dir_path))
