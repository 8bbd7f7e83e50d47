"""Idempotent-producer de-duplication per partition (Kafka's ProducerStateManager,
simplified: no transactions). DESIGN 4b "InitProducerId ... de-duplicates by (producer
id, epoch, sequence)".

Two steps, because offsets are only known after the leader appends:
- `check(...)` before the append: APPEND, DUPLICATE (answer the client with the original
  batch's offsets, append nothing) or an error verdict;
- `record(...)` after the append, with the offsets the leader assigned.
The shell must `record` a batch before it `check`s the next batch of the same partition
(the single serial loop guarantees it; two checks in a row would both pass).

Rules (Kafka ProducerAppendInfo.checkProducerEpoch / checkSequence, findDuplicateBatch):
- producer id -1: not idempotent, always APPEND;
- exact (epoch, first seq, last seq) of one of the last 5 batches: DUPLICATE;
- epoch older than the producer's current one: INVALID_PRODUCER_EPOCH;
- a newer epoch must start at sequence 0: else OUT_OF_ORDER_SEQUENCE_NUMBER;
- same epoch: first seq must be last seq + 1, wrapping from 2^31-1 to 0: else
  OUT_OF_ORDER_SEQUENCE_NUMBER (also for an old batch no longer cached, as Kafka >= 1.0);
- an unknown producer id is accepted at any sequence: its state may be gone (retention,
  or a new leader whose log never got the producer's unacknowledged batches), and Kafka
  accepts then too rather than failing a producer fatally.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafkalite.core.codes import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SEQUENCE_MAX = 2**31 - 1
BATCHES_KEPT_PER_PRODUCER = 5


class VerdictKind(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    ERROR = "error"


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    error: ErrorCode = ErrorCode.NONE
    first_offset: int = -1
    last_offset: int = -1

    @property
    def is_append(self) -> bool:
        return self.kind is VerdictKind.APPEND


APPEND = Verdict(VerdictKind.APPEND)


def duplicate(first_offset: int, last_offset: int) -> Verdict:
    return Verdict(VerdictKind.DUPLICATE, ErrorCode.NONE, first_offset, last_offset)


def error(code: ErrorCode) -> Verdict:
    assert code is not ErrorCode.NONE
    return Verdict(VerdictKind.ERROR, code)


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True)
class BatchHeader:
    """The fields of a RecordBatch v2 header the table needs (for `rebuild`)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    producer_epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_KEPT_PER_PRODUCER)
    )

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka ProducerStateManager.inSequence: next follows last, wrapping at 2^31-1."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQUENCE_MAX)


def last_sequence(base_sequence: int, record_count: int) -> int:
    """Kafka DefaultRecordBatch.incrementSequence(base, count - 1)."""
    assert record_count >= 1
    increment = record_count - 1
    if base_sequence > SEQUENCE_MAX - increment:
        return increment - (SEQUENCE_MAX - base_sequence) - 1
    return base_sequence + increment


class ProducerStateTable:
    """Per-partition producer state: producer id -> epoch and last batches."""

    def __init__(self, batches_kept: int = BATCHES_KEPT_PER_PRODUCER) -> None:
        assert batches_kept >= 1
        self.batches_kept = batches_kept
        self._entries: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def check(
        self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int
    ) -> Verdict:
        """Before the append; see the module docstring for the rules."""
        if producer_id == NO_PRODUCER_ID:
            return APPEND
        if not _sequence_range_valid(producer_epoch, base_sequence, last_sequence):
            return error(ErrorCode.INVALID_REQUEST)
        entry = self._entries.get(producer_id)
        if entry is None:
            return APPEND
        if producer_epoch < entry.producer_epoch:
            return error(ErrorCode.INVALID_PRODUCER_EPOCH)
        if producer_epoch > entry.producer_epoch:
            return APPEND if base_sequence == 0 else error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        for batch in entry.batches:
            if batch.first_seq == base_sequence and batch.last_seq == last_sequence:
                return duplicate(batch.first_offset, batch.last_offset)
        if not entry.batches or in_sequence(entry.last_seq, base_sequence):
            return APPEND
        return error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def record(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_sequence: int,
        first_offset: int,
        last_offset: int,
    ) -> None:
        """After the append, with the offsets the leader assigned (or a follower copied).
        Another epoch replaces the producer's entry; only the last `batches_kept` batches
        are kept."""
        if producer_id == NO_PRODUCER_ID:
            return
        assert first_offset >= 0
        assert last_offset >= first_offset
        assert _sequence_range_valid(producer_epoch, base_sequence, last_sequence)
        entry = self._entries.get(producer_id)
        if entry is None or producer_epoch != entry.producer_epoch:
            # A newer epoch replaces the entry; so does an older one, which only replicated
            # data or the log brings (a leader's `check` refuses it from a client): the
            # leader had forgotten the producer (its last batch went below the log start)
            # and then took a zombie's batch at an older epoch, before this replica's own
            # log start followed. The log is the truth, as in Kafka's replication path.
            entry = ProducerEntry(producer_epoch, deque(maxlen=self.batches_kept))
            self._entries[producer_id] = entry
        if entry.batches:
            assert first_offset > entry.batches[-1].last_offset
        entry.batches.append(BatchMetadata(base_sequence, last_sequence, first_offset, last_offset))

    def evict_below(self, log_start_offset: int) -> int:
        """The log start moved (DeleteRecords, retention): forget the producers whose last
        batch lies wholly below it, as Kafka's ProducerStateManager.truncateHead does: the
        log no longer holds what their state describes. Returns how many went."""
        gone = [pid for pid, entry in self._entries.items()
                if entry.batches and entry.batches[-1].last_offset < log_start_offset]
        for pid in gone:
            del self._entries[pid]
        return len(gone)

    @classmethod
    def rebuild(
        cls, headers: Iterable[BatchHeader], batches_kept: int = BATCHES_KEPT_PER_PRODUCER
    ) -> ProducerStateTable:
        """From the batch headers of the log, in offset order (restart, becoming leader,
        after a truncation). The log is the truth: batches are recorded unchecked, like
        Kafka's loadProducersFromLog."""
        table = cls(batches_kept)
        for header in headers:
            table.record(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.last_sequence,
                header.first_offset,
                header.last_offset,
            )
        return table


def _sequence_range_valid(producer_epoch: int, base_sequence: int, last_sequence: int) -> bool:
    if producer_epoch < 0:
        return False
    if not 0 <= base_sequence <= SEQUENCE_MAX:
        return False
    return 0 <= last_sequence <= SEQUENCE_MAX
