"""Per-log settings, named after Kafka's log.* / topic-level keys with units last."""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000
POLICY_DELETE = "delete"
POLICY_COMPACT = "compact"
DEDUPE_BUFFER_BYTES_MIN = 64 * 1024  # log.cleaner.dedupe.buffer.size per thread: a few hundred keys per pass at the least


@dataclass
class LogConfig:
    segment_bytes: int = 1 << 30  # log.segment.bytes
    roll_ms: int = 7 * DAY_MS  # log.roll.ms
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    retention_ms: int = 7 * DAY_MS  # log.retention.ms, -1 = unlimited
    retention_bytes: int = -1  # log.retention.bytes, -1 = unlimited
    flush_interval_messages: int | None = None  # log.flush.interval.messages, None = OS decides
    flush_interval_ms: int | None = None  # log.flush.interval.ms, None = OS decides
    # log.index.size.max.bytes / 8: a segment rolls when its offset index is this full.
    max_index_entries: int = (10 * 1024 * 1024) // 8
    # cleanup.policy: "delete" (retention removes old segments), "compact" (the log cleaner
    # keeps the latest record per key), or both.
    cleanup_policy: frozenset[str] = frozenset({POLICY_DELETE})
    delete_retention_ms: int = DAY_MS  # delete.retention.ms: how long tombstones outlive their first cleaning
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: records younger than this stay uncompacted

    @property
    def compact(self) -> bool:
        return POLICY_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return POLICY_DELETE in self.cleanup_policy

    def __post_init__(self) -> None:
        # Bad values are operating errors of whoever built the config (config.py validates
        # user input); here they are programmer errors.
        assert self.segment_bytes >= 14 + 61, "segment_bytes too small to hold a batch"
        assert self.roll_ms > 0
        assert self.index_interval_bytes >= 0
        assert self.retention_ms >= -1
        assert self.retention_bytes >= -1
        assert self.flush_interval_messages is None or self.flush_interval_messages > 0
        assert self.flush_interval_ms is None or self.flush_interval_ms >= 0
        assert self.max_index_entries >= 1
        assert self.cleanup_policy, "cleanup.policy names at least one policy"
        assert self.cleanup_policy <= {POLICY_DELETE, POLICY_COMPACT}
        assert self.delete_retention_ms >= 0
        assert 0.0 <= self.min_cleanable_dirty_ratio <= 1.0
        assert self.min_compaction_lag_ms >= 0


def parse_cleanup_policy(text: str) -> frozenset[str] | None:
    """Kafka's cleanup.policy list ("compact", "delete", "compact,delete"), or None if it
    names anything else or nothing."""
    names = [n.strip().lower() for n in text.split(",")]
    if not names or any(n not in (POLICY_DELETE, POLICY_COMPACT) for n in names):
        return None
    return frozenset(names)
