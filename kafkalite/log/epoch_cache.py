"""Leader epoch -> start offset cache (Kafka's LeaderEpochFileCache), persisted atomically
in <partition dir>/leader-epoch-checkpoint on every change. KIP-101 / KIP-279.

Invariant: epochs strictly increase and start offsets strictly increase along the list.
"""

from __future__ import annotations

import bisect
import logging

from kafkalite.log import checkpoint

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


class LeaderEpochCache:
    def __init__(self, path: str | None, entries: list[tuple[int, int]] | None = None) -> None:
        self.dirty = False
        self.path = path  # None: in memory only (tests)
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for epoch, offset in entries or []:
            self._append_checked(epoch, offset)

    @classmethod
    def load(cls, path: str) -> LeaderEpochCache:
        """Read the checkpoint; a malformed or non-monotonic file is discarded (the cache is
        rebuilt from the batches' partition leader epochs during recovery)."""
        try:
            entries = checkpoint.read_epochs(path)
            cache = cls(path)
            for epoch, offset in entries:
                if not cache._is_monotonic_after_last(epoch, offset):
                    raise checkpoint.CheckpointError(f"{path}: non-monotonic entry {epoch} {offset}")
                cache._append_checked(epoch, offset)
            return cache
        except checkpoint.CheckpointError as e:
            log.warning("ignoring unreadable leader epoch checkpoint: %s", e)
            return cls(path)

    def _is_monotonic_after_last(self, epoch: int, offset: int) -> bool:
        return not self._epochs or (epoch > self._epochs[-1] and offset > self._offsets[-1])

    def _append_checked(self, epoch: int, offset: int) -> None:
        assert epoch >= 0
        assert offset >= 0
        assert self._is_monotonic_after_last(epoch, offset)
        self._epochs.append(epoch)
        self._offsets.append(offset)

    def _flush(self) -> None:
        # Deferred (as Kafka does since KAFKA-15046): an fsync'd checkpoint per leadership
        # change would cost seconds when thousands of partitions change leader at once.
        # Log.flush() persists it before the recovery point passes any batch of a new
        # epoch, and recovery rebuilds epochs from the batches after the recovery point, so
        # a crash loses only entries that no flushed batch depends on.
        self.dirty = True

    def persist(self) -> None:
        """Write the checkpoint if it changed (temp file, fsync, rename, fsync dir)."""
        if self.dirty and self.path is not None:
            self.dirty = False
            checkpoint.write_epochs(self.path, self.epoch_entries())

    # ------------------------------------------------------------------ queries

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        return self._epochs[0] if self._epochs else UNDEFINED_EPOCH

    def epoch_entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets))

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds `offset`, or -1 below the first entry."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) per Kafka's LeaderEpochFileCache.endOffsetFor (OffsetsForLeaderEpoch):

        - requested -1: (-1, -1)
        - requested == latest epoch: (requested, LEO)
        - no epoch above requested (requested > latest, or empty cache): (-1, -1)
        - requested below the first epoch: (requested, start offset of the first epoch)
        - otherwise: (largest epoch <= requested, start offset of the first epoch > requested)
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    # ------------------------------------------------------------------ changes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (Kafka's assign). Entries that would
        break monotonicity (epoch >= new epoch or start offset >= new start offset) are
        removed first. Returns whether the cache changed."""
        assert epoch >= 0
        assert start_offset >= 0
        if self._epochs:
            last_epoch, last_offset = self._epochs[-1], self._offsets[-1]
            if epoch == last_epoch and start_offset >= last_offset:
                return False  # already known; a later offset in the same epoch
        keep = len(self._epochs)
        while keep > 0 and (self._epochs[keep - 1] >= epoch or self._offsets[keep - 1] >= start_offset):
            keep -= 1
        if keep < len(self._epochs):
            # An epoch that starts where the new one does held no batch: replacing it is
            # routine (a new partition's first leadership changes); anything else is news.
            routine = all(o == start_offset for o in self._offsets[keep:])
            log.log(
                logging.DEBUG if routine else logging.INFO,
                "%s: assigning epoch %d at %d removes entries %s",
                self.path, epoch, start_offset, self.epoch_entries()[keep:],
            )
        del self._epochs[keep:], self._offsets[keep:]
        self._append_checked(epoch, start_offset)
        self._flush()
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries whose start offset >= end_offset (the log was truncated to end_offset)."""
        keep = bisect.bisect_left(self._offsets, end_offset)
        if end_offset < 0 or keep == len(self._offsets):
            return False
        del self._epochs[keep:], self._offsets[keep:]
        self._flush()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved to start_offset: drop entries wholly below it and move the
        entry that covers it up to start at start_offset."""
        floor = bisect.bisect_right(self._offsets, start_offset) - 1
        if floor < 0 or (floor == 0 and self._offsets[0] == start_offset):
            return False
        del self._epochs[:floor], self._offsets[:floor]
        self._offsets[0] = start_offset
        self._flush()
        return True

    def clear(self) -> None:
        if not self._epochs:
            return
        self._epochs.clear()
        self._offsets.clear()
        self._flush()
