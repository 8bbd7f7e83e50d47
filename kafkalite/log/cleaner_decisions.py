"""The log cleaner's decisions, pure and synchronous (STYLE habits 1 and 2): which log to
clean, which of its segments, how they are grouped, and each record's and batch's fate.
Time is an argument; nothing here reads a clock, a file or a socket. The file work is in
kafkalite.log.cleaner, the scheduling in kafkalite.log.cleaner_manager.

Terms (Kafka's LogCleaner / LogCleanerManager):
- the *clean* section of a log is [log start, first dirty offset): cleaned before, it holds
  at most one record per key; the *dirty* section runs from the first dirty offset up to
  the *first uncleanable offset*, which is the base offset of the first segment that may not
  be cleaned: the active segment, a segment reaching the high watermark (records above it
  may still be truncated away, so they must not make older records disappear), or a
  segment younger than min.compaction.lag.ms (and every segment after it).
- the dirty ratio is dirty bytes / (clean + dirty bytes); a log is cleaned when it reaches
  min.cleanable.dirty.ratio.
- tombstones (a key with a null value) delete their key. A tombstone outlives the first
  cleaning that keeps it by delete.retention.ms (KIP-534): that cleaning stamps the batch
  with a delete horizon (attribute bit 6, the horizon in base_timestamp); a cleaning after
  the horizon removes it. A log whose earliest horizon has passed is cleaned for that alone.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

MAX_RELATIVE_OFFSET = (1 << 31) - 1  # offset index entries are int32 relative offsets


@dataclass(frozen=True)
class SegmentInfo:
    """One segment as the decisions see it."""

    base_offset: int
    next_offset: int  # last offset + 1 of its last batch; the next segment's base offset
    size_bytes: int
    max_timestamp_ms: int  # largest batch timestamp, -1 if none
    index_entries: int

    def __post_init__(self) -> None:
        assert self.base_offset >= 0
        assert self.next_offset >= self.base_offset
        assert self.size_bytes >= 0


@dataclass(frozen=True)
class LogView:
    """A log's state for the cleaner, snapshotted on the event-loop thread."""

    name: str
    segments: tuple[SegmentInfo, ...]  # every segment in offset order, the active one last
    log_start_offset: int
    first_dirty_offset: int  # from the cleaner checkpoint; clamped here
    high_watermark: int
    compact: bool
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    # Earliest delete horizon of a tombstone kept in the clean section: None when there is
    # none, HORIZON_UNKNOWN when no cleaning since start-up has looked.
    earliest_delete_horizon_ms: int | None

    def __post_init__(self) -> None:
        assert self.segments, "a log has at least its active segment"
        assert self.segments[0].base_offset <= self.log_start_offset  # DeleteRecords moves it inside a segment
        for earlier, later in zip(self.segments, self.segments[1:]):
            assert earlier.next_offset <= later.base_offset


HORIZON_UNKNOWN = -(1 << 63)


@dataclass(frozen=True)
class CleanableRange:
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    cleanable_segments: int  # how many segments from the log start may be cleaned

    def __post_init__(self) -> None:
        assert self.first_dirty_offset <= self.first_uncleanable_offset
        assert self.clean_bytes >= 0
        assert self.dirty_bytes >= 0

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(view: LogView, now_ms: int) -> CleanableRange:
    """The cleanable prefix of the log's segments and its clean/dirty split. Never the
    active segment, never a segment holding offsets at or above the HW, never a segment
    younger than min.compaction.lag.ms nor any after it."""
    count = 0
    for segment in view.segments[:-1]:
        if segment.next_offset > view.high_watermark:
            break
        if view.min_compaction_lag_ms > 0 and segment.max_timestamp_ms >= 0 \
                and now_ms - segment.max_timestamp_ms < view.min_compaction_lag_ms:
            break
        count += 1
    cleanable = view.segments[:count]
    first_uncleanable = cleanable[-1].next_offset if cleanable else view.log_start_offset
    first_dirty = min(max(view.first_dirty_offset, view.log_start_offset), first_uncleanable)
    clean_bytes = sum(s.size_bytes for s in cleanable if s.next_offset <= first_dirty)
    dirty_bytes = sum(s.size_bytes for s in cleanable if s.next_offset > first_dirty)
    return CleanableRange(first_dirty, first_uncleanable, clean_bytes, dirty_bytes, count)


class PassKind(enum.Enum):
    DIRTY = "dirty"  # map the dirty section, clean everything up to where the map ends
    TOMBSTONES = "tombstones"  # no map: recopy the clean section to drop expired tombstones


@dataclass(frozen=True)
class CleaningChoice:
    view: LogView
    cleanable: CleanableRange
    kind: PassKind


def choose_log(views: Sequence[LogView], now_ms: int) -> CleaningChoice | None:
    """The log to clean next (Kafka's grabFilthiestCompactedLog): the compacted log with
    the highest dirty ratio among those at or above their min.cleanable.dirty.ratio; if
    none, a log whose clean section holds a tombstone past its delete horizon (or that no
    cleaning has looked at since start-up), earliest horizon first; else None."""
    best: CleaningChoice | None = None
    due: list[tuple[int, CleaningChoice]] = []
    for view in views:
        if not view.compact:
            continue
        cleanable = cleanable_range(view, now_ms)
        if cleanable.dirty_bytes > 0 and cleanable.dirty_ratio >= view.min_cleanable_dirty_ratio:
            if best is None or cleanable.dirty_ratio > best.cleanable.dirty_ratio:
                best = CleaningChoice(view, cleanable, PassKind.DIRTY)
            continue
        horizon = view.earliest_delete_horizon_ms
        if cleanable.clean_bytes > 0 and horizon is not None and horizon <= now_ms:
            due.append((horizon, CleaningChoice(view, cleanable, PassKind.TOMBSTONES)))
    if best is not None:
        return best
    if due:
        return min(due, key=lambda d: d[0])[1]
    return None


def group_segments(segments: Sequence[SegmentInfo], segment_bytes_max: int, index_entries_max: int) -> list[list[SegmentInfo]]:
    """Consecutive segments cleaned into one (Kafka's groupSegmentsBySize), so a log of
    many small segments shrinks to few: a group stays within segment.bytes and the offset
    index limit (both counted before cleaning, an upper bound of the result), and its
    offsets within the int32 range of relative index offsets."""
    groups: list[list[SegmentInfo]] = []
    for segment in segments:
        if groups:
            group = groups[-1]
            size = sum(s.size_bytes for s in group) + segment.size_bytes
            entries = sum(s.index_entries for s in group) + segment.index_entries
            span = segment.next_offset - 1 - group[0].base_offset
            if size <= segment_bytes_max and entries <= index_entries_max and span <= MAX_RELATIVE_OFFSET:
                group.append(segment)
                continue
        groups.append([segment])
    return groups


class Fate(enum.Enum):
    KEEP = "keep"
    SUPERSEDED = "superseded"  # a later record of the same key is in the offset map
    EXPIRED_TOMBSTONE = "expired_tombstone"  # its batch's delete horizon has passed


def record_fate(offset: int, has_key: bool, is_tombstone: bool, latest_offset: int | None,
                delete_horizon_ms: int | None, now_ms: int, *, end_offset: int) -> Fate:
    """What happens to one record of a batch being cleaned. `latest_offset` is the offset
    map's entry for its key (None: not in the map); the map holds only offsets below where
    the map ends, so a record at or past its key's entry is the latest the map knows of.
    `end_offset` is where the pass cleans through (where the map ends; the first dirty
    offset for a tombstones pass). A record at or past it is in a segment the pass cleans
    only because the segment straddles that offset: older records of its key may still be
    in the clean section, so it is kept whatever its batch's horizon says (dropping a
    tombstone there would bring back the value it deleted).
    Records without a key (only possible if written before the topic was compacted, as
    Produce refuses them now) are kept: the cleaner never drops what it cannot reason about."""
    if not has_key:
        return Fate.KEEP
    if offset >= end_offset:
        return Fate.KEEP
    if latest_offset is not None and offset < latest_offset:
        return Fate.SUPERSEDED
    if is_tombstone and delete_horizon_ms is not None and delete_horizon_ms <= now_ms:
        return Fate.EXPIRED_TOMBSTONE
    return Fate.KEEP


class BatchAction(enum.Enum):
    COPY = "copy"  # bytes unchanged
    REWRITE = "rewrite"  # the kept records, same base offset and last offset delta
    EMPTY = "empty"  # the header alone, no records (Kafka's RETAIN_EMPTY)
    DROP = "drop"


def batch_action(*, record_count: int, kept: int, is_control: bool, horizon_changes: bool, keep_header: bool) -> BatchAction:
    """What happens to a batch once its records' fates are known. Control batches are
    never cleaned (kafkalite has no transactions; clients may not write them). A batch
    whose records all go stays as an empty header when `keep_header`: it is the last batch
    of its producer (its base sequence and last offset delta are the producer's state,
    which a new leader rebuilds from batch headers), or the last batch of the segment
    being written (so the cleaned segment ends where the old ones did and the next
    segment's base offset still follows it)."""
    assert 0 <= kept <= record_count
    if is_control:
        return BatchAction.COPY
    if record_count == 0:  # an empty header an earlier pass kept: kept again only if still needed
        return BatchAction.COPY if keep_header else BatchAction.DROP
    if kept == record_count and not horizon_changes:
        return BatchAction.COPY
    if kept > 0:
        return BatchAction.REWRITE
    return BatchAction.EMPTY if keep_header else BatchAction.DROP


def delete_horizon_after(old_horizon_ms: int | None, keeps_tombstones: bool, now_ms: int, delete_retention_ms: int,
                         *, below_end: bool) -> int | None:
    """The delete horizon a batch carries after this cleaning (KIP-534): set at the first
    cleaning that keeps a tombstone of it, kept while it keeps one, cleared when none is
    left (so a log does not stay due for a tombstone pass for ever). Set only when the
    whole batch is below where the pass cleans through (`below_end`): a tombstone past it
    has not yet had the older values of its key removed, and the horizon is what later
    lets a pass without a map drop the tombstone."""
    assert delete_retention_ms >= 0
    if not keeps_tombstones:
        return None
    if old_horizon_ms is not None:
        return old_horizon_ms
    return now_ms + delete_retention_ms if below_end else None
