"""Per-log settings, named after Kafka's log.* / topic-level keys with units last."""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000


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
