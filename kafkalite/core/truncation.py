"""Follower truncation by leader epoch (KIP-101), instead of the seed's "truncate to HW".

Seed 000 section C has a new follower truncate its log to its HW and fetch from there. Kafka
found two ways that breaks (KIP-101), both tested in tests/unit/core/test_core_truncation.py:
1. lost acknowledged write: a follower's HW lags the leader's (it learns the HW one fetch
   late); it restarts, truncates to its HW, losing an acknowledged message, then becomes
   leader and the message is gone everywhere;
2. divergence: after a crash of all replicas, two logs hold different messages at the
   same offset, and truncate-to-HW keeps both (the HW says nothing about which is right).

With leader epochs every batch carries the epoch of the leader that wrote it, and each
replica keeps `(epoch, start_offset)` entries (the leader-epoch checkpoint). A follower asks
the leader for the end offset of its latest epoch (OffsetsForLeaderEpoch) and truncates to
where the logs really diverge. Pure functions over plain lists.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

EpochEntry = tuple[int, int]  # (leader epoch, start offset)


@dataclass(frozen=True)
class EpochEndOffset:
    """An OffsetsForLeaderEpoch answer: the largest epoch <= the requested one that the
    answering replica knows, and the offset where it ended (exclusive)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True)
class TruncationState:
    """Where to truncate, and whether that is final (`completed`) or the follower must ask
    the leader again about an older epoch (Kafka's OffsetTruncationState)."""

    truncate_to: int
    completed: bool


def check_epoch_entries(entries: Sequence[EpochEntry]) -> None:
    """Epochs and start offsets strictly increase (a leader-epoch checkpoint's invariant)."""
    for (epoch_a, start_a), (epoch_b, start_b) in zip(entries, entries[1:]):
        assert epoch_a < epoch_b
        assert start_a <= start_b
    for epoch, start in entries:
        assert epoch >= 0
        assert start >= 0


def latest_epoch(entries: Sequence[EpochEntry]) -> int:
    """The epoch a follower sends in OffsetsForLeaderEpoch (UNDEFINED_EPOCH if none)."""
    return entries[-1][0] if entries else UNDEFINED_EPOCH


def assign_epoch(entries: list[EpochEntry], epoch: int, start_offset: int) -> bool:
    """Record that `epoch` starts at `start_offset` (a leader on election, a follower on
    the first batch of a new epoch). Entries with a start offset at or after it are stale
    and dropped, as Kafka's LeaderEpochFileCache.assign does. Returns whether it changed."""
    if entries and entries[-1][0] >= epoch:
        assert entries[-1][0] == epoch or entries[-1][1] <= start_offset
        return False
    while entries and entries[-1][1] >= start_offset:
        entries.pop()
    entries.append((epoch, start_offset))
    check_epoch_entries(entries)
    return True


def truncate_epochs_from_end(entries: list[EpochEntry], end_offset: int) -> None:
    """The log was truncated to `end_offset`: forget epochs that started at or after it."""
    while entries and entries[-1][1] >= end_offset:
        entries.pop()


def end_offset_for_epoch(
    entries: Sequence[EpochEntry], log_end_offset: int, requested_epoch: int
) -> EpochEndOffset:
    """Answer OffsetsForLeaderEpoch(requested_epoch) from these entries and LEO, exactly as
    Kafka's LeaderEpochFileCache.endOffsetFor:
    - undefined requested epoch, or no entry at all: (UNDEFINED, UNDEFINED);
    - the latest epoch: (it, LEO) — that epoch is still being written;
    - no larger epoch known (requested > latest): (UNDEFINED, UNDEFINED);
    - requested older than every entry: (requested, start offset of the first entry);
    - otherwise: (largest epoch <= requested, start offset of the next larger epoch).
    """
    check_epoch_entries(entries)
    if requested_epoch == UNDEFINED_EPOCH or not entries:
        return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    if entries[-1][0] == requested_epoch:
        return EpochEndOffset(requested_epoch, log_end_offset)
    epochs = [epoch for epoch, _ in entries]
    higher = bisect.bisect_right(epochs, requested_epoch)
    if higher == len(entries):
        return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    higher_start = entries[higher][1]
    if higher == 0:
        return EpochEndOffset(requested_epoch, higher_start)
    floor_epoch = entries[higher - 1][0]
    return EpochEndOffset(floor_epoch, higher_start)


def follower_truncation_state(
    local_epoch_entries: Sequence[EpochEntry],
    local_leo: int,
    leader_answer: EpochEndOffset | tuple[int, int],
    local_hw: int | None = None,
) -> TruncationState:
    """Kafka's AbstractFetcherThread.getOffsetTruncationState.

    The follower asked the leader about `latest_epoch(local_epoch_entries)` and got
    `leader_answer = (epoch, end_offset)`:
    - end offset UNDEFINED: the leader knows no such epoch; fall back to the HW as Kafka
      does (to offset 0 when `local_hw` is not given);
    - epoch UNDEFINED (pre-epoch leader): truncate to min(end offset, LEO);
    - the follower knows the answered epoch: truncate to min(its own end offset for that
      epoch, the leader's end offset, LEO) — the first offset where the logs can differ;
    - it does not (its largest epoch <= the answered one is older): truncate to the end of
      that older epoch and ask again (`completed=False`).
    """
    answer = leader_answer if isinstance(leader_answer, EpochEndOffset) else EpochEndOffset(*leader_answer)
    assert local_leo >= 0
    if answer.end_offset == UNDEFINED_EPOCH_OFFSET:
        if local_hw is None:
            # No HW given: truncate to the start, always safe (the follower refetches
            # from the leader; the leader, not this follower, holds what is committed).
            return TruncationState(truncate_to=0, completed=True)
        return TruncationState(truncate_to=min(local_hw, local_leo), completed=True)
    if answer.epoch == UNDEFINED_EPOCH:
        return TruncationState(truncate_to=min(answer.end_offset, local_leo), completed=True)
    local = end_offset_for_epoch(local_epoch_entries, local_leo, answer.epoch)
    if local.end_offset == UNDEFINED_EPOCH_OFFSET:
        # The follower tracked no epochs that old; the leader answered with an epoch <= the
        # one we asked about, so its end offset is safe to truncate to.
        return TruncationState(truncate_to=min(answer.end_offset, local_leo), completed=True)
    if local.epoch != answer.epoch:
        return TruncationState(truncate_to=min(local.end_offset, local_leo), completed=False)
    truncate_to = min(local.end_offset, answer.end_offset, local_leo)
    return TruncationState(truncate_to=truncate_to, completed=True)


def diverging_epoch_check(
    leader_entries: Sequence[EpochEntry],
    leader_leo: int,
    fetch_offset: int,
    last_fetched_epoch: int,
) -> EpochEndOffset | None:
    """KIP-320 style check a leader makes on a fetch carrying `last_fetched_epoch`: None
    when the follower's log is a prefix of ours, else the (epoch, end offset) to return
    as DIVERGING_EPOCH so the follower truncates without a separate round trip."""
    if last_fetched_epoch == UNDEFINED_EPOCH:
        return None
    answer = end_offset_for_epoch(leader_entries, leader_leo, last_fetched_epoch)
    if answer.epoch != last_fetched_epoch or answer.end_offset < fetch_offset:
        return answer
    return None
