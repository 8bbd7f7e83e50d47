"""Telling a duplicate the client wrote from one the broker failed to drop.

The idempotent producer's records are de-duplicated by the partition leader within one
(producer id, producer epoch): a retry carries the same sequence numbers, and the leader
answers it with the original offsets. A new epoch starts a new sequence space (KIP-360), so
records the client sends again under a bumped epoch are new records to every broker, Kafka's
and kafkalite's alike.

librdkafka bumps the epoch of an idempotent producer when a request fails with
OUT_OF_ORDER_SEQUENCE_NUMBER after an earlier one failed ("skipped sequence numbers"), and
then sends again every record not yet acknowledged, renumbered from 0. It does so believing
the earlier request's records were not written: it classes NOT_LEADER_OR_FOLLOWER as "not
persisted". After a leader change that is not always so. A leader that appended a batch and
lost its leadership before the HW passed it answers NOT_LEADER_OR_FOLLOWER (Kafka's
DelayedProduce does the same), yet the new leader may hold the batch: its followers had
copied it. When librdkafka then sends a later batch to the new leader before the failed one
(a race in its retry queue after the leader change), the new leader rightly refuses it as out
of order, librdkafka bumps the epoch, and the failed batch's records land twice: once in the
old epoch, once in the new. librdkafka's issue #4953 ("Sporadic message duplication during
leader transition with idempotent producer") shows it against Apache Kafka.

`explain_resend` accepts a duplicate as the client's only on the whole of that evidence, from
the log itself and from librdkafka's own account (its ERRSEQ debug line, which
VerifyingProducer keeps):

1. both copies come from one producer id, the second in a later epoch;
2. librdkafka said, for that partition, producer id and the first copy's epoch, that it
   bumps because a request was refused as out of order after an earlier request failed with
   NOT_LEADER_FOR_PARTITION, and the first copy's sequence lies between the first one it had
   no acknowledgement for ("next seq") and the refused one: the records it then re-sent;
3. the refusals were right: in the final log, the producer's sequences in that epoch end
   before the sequence just below the lowest one librdkafka reports refused in that epoch
   (the leader never held the batch the refused one had to follow).

Each later copy is held against the copy before it, and a copy the client was acknowledged
at is never taken for one it re-sent (librdkafka re-sends only what it has no answer for):
`verify` and the history checker see to both. A partition's batches are read from every
replica directory that holds both copies, and each must agree.

Anything else, a duplicate within one epoch above all, remains the broker's failure.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterable, Mapping

from kafkalite.log.records import LOG_OVERHEAD, iter_headers

NOT_PERSISTED_BY_LIBRDKAFKA = "NOT_LEADER_FOR_PARTITION"  # librdkafka's name for NOT_LEADER_OR_FOLLOWER

_SKIPPED = re.compile(
    r"ProduceRequest for (?P<topic>[A-Za-z0-9._-]+) \[(?P<partition>\d+)\] with \d+ message\(s\) failed "
    r"due to skipped sequence numbers \(PID\{Id:(?P<pid>-?\d+),Epoch:(?P<epoch>-?\d+)\}, "
    r"base seq (?P<refused>\d+) > next seq (?P<next>\d+)\) caused by previous failed request "
    r"\((?P<error>[A-Z_0-9]+), actions [A-Za-z,]*, base seq (?P<first>\d+)\.\.(?P<last>\d+)"
)


@dataclasses.dataclass(frozen=True)
class SkippedSequence:
    """librdkafka's ERRSEQ account of an epoch bump: a request from `refused_seq` was refused
    as out of order while `next_seq` was the first sequence not yet acknowledged, after the
    request with `failed_first_seq..failed_last_seq` (the last to fail) failed with
    `failed_error`. The records of `next_seq` up to `refused_seq` were then sent again under
    the next epoch."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    refused_seq: int
    next_seq: int
    failed_error: str
    failed_first_seq: int
    failed_last_seq: int


def parse_skipped_sequence(message: str) -> SkippedSequence | None:
    """The SkippedSequence in one librdkafka log message, or None."""
    m = _SKIPPED.search(message)
    if m is None:
        return None
    return SkippedSequence(m["topic"], int(m["partition"]), int(m["pid"]), int(m["epoch"]), int(m["refused"]),
                           int(m["next"]), m["error"], int(m["first"]), int(m["last"]))


class SkippedSequenceLog(logging.Handler):
    """A logging handler for librdkafka's logger (confluent-kafka's `logger` setting, with
    `debug` including `eos`): keeps every SkippedSequence it reports."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.skipped: list[SkippedSequence] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            found = parse_skipped_sequence(record.getMessage())
        except (TypeError, ValueError):  # a message that does not format: not ours
            return
        if found is not None:
            self.skipped.append(found)


@dataclasses.dataclass(frozen=True)
class BatchOrigin:
    """Who wrote a batch of the log: its offsets, producer id, epoch and first sequence."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    def sequence_of(self, offset: int) -> int:
        assert self.base_offset <= offset <= self.last_offset
        return self.base_sequence + (offset - self.base_offset)

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + (self.last_offset - self.base_offset)


def batch_origins(partition_dir: str, end_offset: int) -> list[BatchOrigin]:
    """The batches of a replica's segment files wholly below `end_offset` (the final log's
    end), in offset order."""
    out: list[BatchOrigin] = []
    for name in sorted(f for f in os.listdir(partition_dir) if f.endswith(".log")):
        with open(os.path.join(partition_dir, name), "rb") as f:
            data = f.read()
        end = 0
        while end + LOG_OVERHEAD <= len(data):  # whole batches only: a segment's tail may be torn
            length = int.from_bytes(data[end + 8 : end + 12], "big", signed=True)
            if length <= 0 or end + LOG_OVERHEAD + length > len(data):
                break
            end += LOG_OVERHEAD + length
        for _, h in iter_headers(data[:end]):
            if h.last_offset < end_offset:
                out.append(BatchOrigin(h.base_offset, h.last_offset, h.producer_id, h.producer_epoch, h.base_sequence))
    return out


def _origin_at(batches: Iterable[BatchOrigin], offset: int) -> BatchOrigin | None:
    return next((b for b in batches if b.base_offset <= offset <= b.last_offset), None)


def explain_resend(topic: str, partition: int, first_offset: int, second_offset: int, batches: list[BatchOrigin],
                   skipped: Iterable[SkippedSequence]) -> str | None:
    """Why the record at `second_offset` repeats the one at `first_offset` (same value, same
    partition, first < second) is librdkafka's re-send under a bumped epoch, or None when the
    evidence (the module docstring's three conditions) is not all there."""
    first, second = _origin_at(batches, first_offset), _origin_at(batches, second_offset)
    if first is None or second is None or first.producer_id < 0:
        return None
    if second.producer_id != first.producer_id or second.producer_epoch <= first.producer_epoch:
        return None  # 1: not a re-send under a later epoch; the leader should have dropped it
    seq = first.sequence_of(first_offset)
    last_kept = max((b.last_sequence for b in batches
                     if b.producer_id == first.producer_id and b.producer_epoch == first.producer_epoch), default=-1)
    ours = [s for s in skipped
            if (s.topic, s.partition, s.producer_id, s.producer_epoch) == (topic, partition, first.producer_id, first.producer_epoch)]
    # 3 holds for every refusal librdkafka reported in that epoch (it logs one per refused
    # request while it drains), so for the lowest: each must have been right.
    if not ours or last_kept >= min(s.refused_seq for s in ours) - 1:
        return None
    for s in ours:
        if s.failed_error != NOT_PERSISTED_BY_LIBRDKAFKA or not s.next_seq <= seq < s.refused_seq:
            continue  # 2: not a bump that re-sent this record
        return (f"{topic}-{partition}: offset {second_offset} (producer {first.producer_id} epoch {second.producer_epoch}) "
                f"repeats offset {first_offset} (epoch {first.producer_epoch} sequence {seq}): librdkafka bumped the epoch "
                f"after sequence {s.refused_seq} was refused as out of order (the log's epoch {first.producer_epoch} ends at "
                f"sequence {last_kept}), following a request it was told had failed ({s.failed_error}, sequences "
                f"{s.failed_first_seq}..{s.failed_last_seq}), and re-sent sequences {s.next_seq}..{s.refused_seq - 1} "
                f"as not written; this one was (librdkafka issue #4953)")
    return None


class ResendCheck:
    """`explain(partition, first_offset, second_offset)` for `verify` and the history
    checker. `dirs`: partition -> its replica directories; `ends`: partition -> the final
    log's end offset. A partition's batches are read from its directories the first time a
    duplicate there needs them; every directory holding both copies must explain it, and at
    least one must hold them."""

    def __init__(self, topic: str, skipped: Iterable[SkippedSequence], dirs: Mapping[int, list[str]],
                 ends: Mapping[int, int]) -> None:
        self.topic = topic
        self.skipped = list(skipped)
        self.dirs = {p: list(ds) for p, ds in dirs.items()}
        self.ends = dict(ends)
        self._batches: dict[str, list[BatchOrigin]] = {}

    def explain(self, partition: int, first_offset: int, second_offset: int) -> str | None:
        why = None
        for d in self.dirs.get(partition, []):
            if d not in self._batches:
                try:
                    self._batches[d] = batch_origins(d, self.ends.get(partition, 0))
                except OSError:
                    self._batches[d] = []
            batches = self._batches[d]
            if _origin_at(batches, first_offset) is None or _origin_at(batches, second_offset) is None:
                continue  # a replica that has not reached the copies (or lost its directory)
            why = explain_resend(self.topic, partition, first_offset, second_offset, batches, self.skipped)
            if why is None:
                return None  # every replica holding both copies must agree
        return why
