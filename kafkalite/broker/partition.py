"""One partition replica on this broker: its log plus the core's ISR/HW state machine.

The replication rules live in the core (kafkalite.core.replica_manager.Replica over
kafkalite.core.replica_state); this subclass adds what only the broker has: the on-disk Log
behind the core's log port, idempotent-producer state, reading bytes, and the asyncio
waiters (delayed produce / fetch) parked on it. Runs on the event loop thread; never awaits.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from types import TracebackType

from kafkalite.broker.errors import fail
from kafkalite.broker.replication_timing import AppendTimes
from kafkalite.core.producer_state import BatchHeader as ProducerBatch
from kafkalite.core.producer_state import ProducerStateTable, VerdictKind, last_sequence
from kafkalite.core.replica_manager import Replica
from kafkalite.core.replica_state import LeaderAndIsrState
from kafkalite.log import batch_filter
from kafkalite.log.errors import LogDirError, LogDirFailure
from kafkalite.log.log import Log
from kafkalite.log.records import (
    H_BASE_SEQUENCE,
    H_LAST_OFFSET_DELTA,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    H_RECORD_COUNT,
    BatchHeader,
    check_one_client_batch,
    iter_headers,
    validate_batches,
    verify_stored_batches,
)
from kafkalite.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class LogPort:
    """kafkalite.log.Log as the core's ReplicaLog port."""

    def __init__(self, plog: Log) -> None:
        self.log = plog

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self.log.leader_epoch_cache.epoch_entries()

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.log.leader_epoch_cache.assign(epoch, start_offset)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)  # also at the LEO: drops an epoch that starts there

    @property
    def topic_id(self) -> str | None:
        return self.log.topic_id

    def assign_topic_id(self, topic_id: str) -> None:
        try:
            self.log.assign_topic_id(topic_id)
        except OSError as e:  # the log keeps having no id; the next LeaderAndIsr tries again
            log.error("%s: could not write its topic id %s: %s", self.log.dir, topic_id, e)


NOT_THE_DISK = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


class disk_io:  # (lower case: used as a function, `with disk_io(plog):`)
    """An OSError from the log's files is its log dir failing (KIP-112): LogDirFailure,
    which the replica manager answers KAFKA_STORAGE_ERROR and turns into the dir going
    offline. The storage engine's own typed errors pass through. (A class, not a
    generator: it wraps every append and read, and costs a third of one.)"""

    __slots__ = ("plog",)

    def __init__(self, plog: Log) -> None:
        self.plog = plog

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: type[BaseException] | None, e: BaseException | None, _tb: TracebackType | None) -> None:
        if isinstance(e, OSError):
            plog = self.plog
            if e.errno in NOT_THE_DISK:  # the process ran out of descriptors or memory: this request fails, the dir is fine
                raise LogDirError(f"{plog.dir}: {e}") from e
            raise LogDirFailure(os.path.dirname(plog.dir), e) from e


class Partition(Replica):
    def __init__(self, topic: str, partition: int, broker_id: int, plog: Log, initial_hw: int):
        super().__init__(topic, partition, broker_id, LogPort(plog), initial_hw)
        self.log = plog
        self.producers = ProducerStateTable()
        # An empty log (a new partition) has no producers to rebuild: the table is loaded
        # as it is, and kept current by follower appends, so its first leadership (e.g. a
        # controlled shutdown moving thousands) reads no log.
        self._producers_loaded = plog.log_end_offset == plog.log_start_offset
        self.listeners: list[Callable[[Partition, bool], None]] = []
        # Records were truncated away: the recovery point fell below what the last recovery
        # checkpoint says, which must follow before new records land where the old ones
        # were (set by the replica manager; see ReplicaManager._checkpoint_after_truncation).
        self.on_truncated: Callable[[Partition], None] = lambda part: None
        # When recent batches were appended as leader (kafkalite_replication_catch_up_seconds);
        # made at the first append, so a partition never led costs nothing.
        self.append_times: AppendTimes | None = None
        # A follower's lag behind the leader's LEO as its last fetch answer showed it
        # (DescribeLogDirs' offset_lag); 0 on a leader.
        self.lag_behind_leader = 0

    @property
    def leo(self) -> int:  # Replica.leo without the port in between: read on every fetch and append
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def epoch_at(self, offset: int) -> int:
        """The leader epoch the log records for `offset`; -1 outside the log."""
        if not self.log.log_start_offset <= offset < self.leo:
            return -1
        return self.log.leader_epoch_cache.epoch_for_offset(offset)

    def notify(self, *, hw_may_have_moved: bool = True) -> None:
        """Role, HW or log moved: wake whatever waits on this partition. False for
        `hw_may_have_moved` says only the LEO moved: waiting fetches may complete, waiting
        acks=all produces cannot (DelayedOperations.wake)."""
        for cb in list(self.listeners):
            cb(self, hw_may_have_moved)

    # -- role changes (LeaderAndIsr, decided by the core replica manager) --------------
    def make_leader(self, st: LeaderAndIsrState, now_ms: int) -> bool:
        new_epoch = super().make_leader(st, now_ms)
        if self.append_times is not None:
            self.append_times.clear()
        if new_epoch and not self._producers_loaded:
            try:
                self._load_producers()
            except LogDirError as e:  # (a LogDirFailure too) the first idempotent append tries again, and fails there
                log.warning("%s-%d: idempotent producer state not loaded at leadership: %s", self.topic, self.partition, e)
        self.notify()
        return new_epoch

    def make_follower(self, st: LeaderAndIsrState, now_ms: int) -> bool:
        changed = super().make_follower(st, now_ms)
        self.notify()
        return changed

    def _load_producers(self) -> None:
        """Rebuild idempotent-producer state from the log's batch headers. Done once per
        replica (first leadership, or after a truncation); afterwards followers keep it
        current as they append, so a failover does not rescan thousands of logs."""
        with disk_io(self.log):
            self.producers = ProducerStateTable.rebuild(
                _producer_batch(h) for h in self.log.iter_batch_headers() if h.producer_id >= 0 and h.base_sequence >= 0
            )
        # The first batch read may start below a log start DeleteRecords set inside it.
        self.producers.evict_below(self.log.log_start_offset)
        self._producers_loaded = True

    # -- leader: produce ----------------------------------------------------------------
    def append_as_leader(self, records: bytes, *, now_ms: int):
        """Validate and append a client's batches (the core's check_append said this
        broker leads with enough replicas); returns (AppendResult, duplicate_of).
        Raises the storage engine's typed errors for bad batches."""
        assert self.state.is_leader
        checked = check_one_client_batch(records)  # the usual case, checked in a few calls
        if checked is None:  # anything else: judged in full, and refused unless it is one batch
            headers = validate_batches(records)
            if len(headers) != 1:
                # Kafka's rule for Produce v3 and later (all kafkalite serves): one batch per
                # partition. The idempotence check below judges one batch; a second one would
                # go unchecked and unrecorded (a retry of the request would be written twice).
                raise fail(ErrorCode.INVALID_RECORD, f"{len(headers)} record batches for {self.topic}-{self.partition};"
                           " a produce request carries exactly one per partition")
            records = bytes(records)
            checked = check_one_client_batch(records)
            assert checked is not None, "one valid batch"
        fields = checked.fields
        record_count = fields[H_RECORD_COUNT]
        if self.log.config.compact:
            # Only a compacted topic's records are read here (it costs a pass over every
            # record); its cleaner needs each record keyed, and record offsets in order
            # (Kafka's LogValidator refuses both, or rewrites the offsets).
            spans = batch_filter.record_spans(batch_filter.record_data(records), record_count)
            if not batch_filter.offset_deltas_in_order(spans, fields[H_LAST_OFFSET_DELTA]):
                raise fail(ErrorCode.INVALID_RECORD, f"{self.topic}-{self.partition}: the record offset deltas of a batch"
                           f" of {record_count} records must be 0..{record_count - 1}")
            if any(span.key is None for span in spans):
                raise fail(ErrorCode.INVALID_RECORD, f"compacted topic {self.topic} cannot accept a record without a key")
        producer_id = fields[H_PRODUCER_ID]
        if producer_id >= 0:
            if not self._producers_loaded:  # its load at the leadership failed
                self._load_producers()
            producer_epoch, base_sequence = fields[H_PRODUCER_EPOCH], fields[H_BASE_SEQUENCE]
            last_seq = last_sequence(base_sequence, record_count)
            verdict = self.producers.check(producer_id, producer_epoch, base_sequence, last_seq)
            if verdict.kind is VerdictKind.DUPLICATE:
                return None, (verdict.first_offset, verdict.last_offset)
            if verdict.kind is VerdictKind.ERROR:
                raise fail(int(verdict.error), f"producer {producer_id}: {verdict.error.name}")
        with disk_io(self.log):
            result = self.log.append_as_leader(records, self.state.leader_epoch, now_ms, checked=checked)
        if producer_id >= 0:
            self.producers.record(producer_id, producer_epoch, base_sequence, last_seq, result.first_offset, result.last_offset)
        if self.append_times is None:
            self.append_times = AppendTimes()
        self.append_times.appended(result.last_offset + 1, time.monotonic())
        hw_moved = self.leader_appended()
        self.notify(hw_may_have_moved=hw_moved)
        return result, None

    # -- follower -----------------------------------------------------------------------
    def append_as_follower(self, records: bytes, leader_hw: int) -> None:
        if records:
            # (the header is read only for an empty log: not on every follower append)
            if self.log.log_start_offset == self.leo and (first := next(iter_headers(records))[1]).base_offset < self.leo <= first.last_offset:
                # The leader's log start lies inside this batch (DeleteRecords takes any
                # offset) and our log is empty, restarted there: the batch cannot follow our
                # LEO, and every fetch brought it again, for ever. Start the log at the
                # batch's base instead (Kafka's appendRecordsToFollowerOrFutureReplica); the
                # log start then follows the leader's again.
                log.info("%s-%d: the leader's first batch starts at %d, inside our empty log's start %d; starting there",
                         self.topic, self.partition, first.base_offset, self.leo)
                self.truncate_fully_and_start_at(first.base_offset)
            with disk_io(self.log):
                self.log.append_as_follower(records)
            if self._producers_loaded:
                for _, h in iter_headers(records):
                    if h.producer_id >= 0 and h.base_sequence >= 0:
                        b = _producer_batch(h)
                        self.producers.record(b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, b.first_offset, b.last_offset)
        self.follower_appended(leader_hw)
        self.notify()

    def truncate_to(self, offset: int) -> None:
        removed = offset < self.leo
        if removed:
            log.info("truncating %s-%d from %d to %d", self.topic, self.partition, self.leo, offset)
            self._producers_loaded = False  # rebuilt from what is left at the next leadership
            self.producers = ProducerStateTable()  # nothing stale meanwhile
        with disk_io(self.log):
            super().truncate_to(offset)
        if removed:
            self.on_truncated(self)
            # A consumer waiting here (KIP-392) past the new end is answered now, not when
            # the next append or its max_wait comes.
            self.notify(hw_may_have_moved=False)

    def advance_log_start(self, offset: int) -> bool:
        """DeleteRecords on the leader, or a follower following the leader's log start:
        the log start moves up to `offset` (bounded by the HW), the segments wholly below
        it are deleted, the state, the epoch cache and the producer state follow. Returns
        whether it moved; waiters are woken (a DeleteRecords waits on the low watermark)."""
        assert offset <= self.hw
        with disk_io(self.log):
            moved = self.log.maybe_increment_log_start_offset(offset)
        if moved:
            self.after_log_start_moved()
        return moved

    def after_log_start_moved(self) -> None:
        """The log's start moved (advance_log_start, or retention deleted segments)."""
        self.log_start_moved()
        self.producers.evict_below(self.log.log_start_offset)
        self.notify(hw_may_have_moved=False)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with disk_io(self.log):
            self.log.truncate_fully_and_start_at(offset)
        self.on_truncated(self)
        self._producers_loaded = False
        self.state.on_truncate(self.leo, self.log.log_start_offset)
        self.state.maybe_update_log_start_offset(offset)
        self.initial_hw = offset
        self.notify(hw_may_have_moved=False)

    # -- reads --------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, upper: int, min_one: bool = True) -> bytes:
        """Whole batches from `offset` below `upper` (the HW for consumers, LEO for followers).

        Offsets between HW and LEO give an empty set; above LEO or below the log start
        OFFSET_OUT_OF_RANGE (DESIGN.md section 5).
        """
        if offset < self.log.log_start_offset or offset > self.leo:
            raise fail(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} outside [{self.log.log_start_offset}, {self.leo}] of {self.topic}-{self.partition}")
        if offset >= upper:
            return b""
        with disk_io(self.log):
            data = self.log.read(offset, max_bytes, max_offset=upper, min_one=min_one)
        verify_stored_batches(data)  # a flipped bit is not served (CorruptBatchError)
        return data


def _producer_batch(h: BatchHeader) -> ProducerBatch:
    # The last sequence is base sequence + last offset delta (Kafka's
    # DefaultRecordBatch.lastSequence), not + record count - 1: the log cleaner keeps a
    # producer's last batch with fewer records, or none, but its offset span unchanged.
    return ProducerBatch(h.producer_id, h.producer_epoch, h.base_sequence,
                         last_sequence(h.base_sequence, h.last_offset_delta + 1), h.base_offset, h.last_offset)
