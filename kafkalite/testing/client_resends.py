"""Telling a duplicate the client wrote from one the broker failed to drop.

The idempotent producer's records are de-duplicated by the partition leader within one
(producer id, producer epoch): a retry carries the same sequence numbers, and the leader
answers it with the original offsets. A new epoch starts a new sequence space (KIP-360), so
records the client sends again under a bumped epoch are new records to every broker, Kafka's
and kafkalite's alike.

librdkafka bumps the epoch of an idempotent producer when a request fails with
OUT_OF_ORDER_SEQUENCE_NUMBER after an earlier one failed ("skipped sequence numbers"). The
bump is the producer's, not the partition's: once its requests in flight are answered, it
sends again, in every partition, every record not yet acknowledged, renumbered from 0. It
does so believing those records were not written: it classes NOT_LEADER_OR_FOLLOWER as "not
persisted". After a leader change that is not always so. A leader that appended a batch and
lost its leadership before the HW passed it answers NOT_LEADER_OR_FOLLOWER (Kafka's
DelayedProduce does the same), yet the new leader may hold the batch: its followers had
copied it. When librdkafka then sends a later batch to the new leader before the failed one
(a race in its retry queue after the leader change), the new leader rightly refuses it as out
of order, librdkafka bumps the epoch, and a failed batch's records land twice, in that
partition or any other one whose leader also moved: once in the old epoch, once in the new.
librdkafka's issue #4953 ("Sporadic message duplication during leader transition with
idempotent producer") shows it against Apache Kafka.

`explain_resend` accepts a duplicate as the client's only on the whole of that evidence, from
the log itself and from librdkafka's own account (debug `eos` lines the verifying producer
keeps: ERRSEQ for each refusal that makes it bump, NEWPID for each partition's new epoch and
the message id it numbers from):

1. both copies come from one producer id, the second in a later epoch;
2. they are one message of the client's: librdkafka numbers a partition's records in an
   epoch from that epoch's base message id (NEWPID), so the same message id gives the
   second copy's sequence exactly: the first's minus the difference of the two bases;
3. librdkafka bumped that producer out of the first copy's epoch because a request was
   refused as out of order (its DRAIN line: "epoch bump ...: skipped sequence numbers"),
   the first refusal (ERRSEQ) following a request of the unacknowledged window that failed
   with NOT_LEADER_FOR_PARTITION, and every refusal was right: in the final log of the
   partition refused, the producer's sequences in that epoch end before the one the lowest
   refused request had to follow (the leader never held what it had to follow).

Limits, for want of the brokers' own account: the refusals are judged on the final log, not
on the leader's state when it refused; and in a partition librdkafka did not name, the
batch's own failure is not seen (only that the client had no acknowledgement for it).

Each later copy is held against the copy before it, and a copy the client was acknowledged
at is never taken for one it re-sent (librdkafka re-sends only what it has no answer for):
`verify` and the history checker see to both. A partition's batches are read from every
replica directory that holds the copies, and each must agree.

Anything else, a duplicate within one epoch above all, remains the broker's failure.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import struct
from collections.abc import Callable, Iterable, Mapping

from kafkalite.log.records import BATCH_HEADER_SIZE, LOG_OVERHEAD, decode_header

NOT_PERSISTED_BY_LIBRDKAFKA = "NOT_LEADER_FOR_PARTITION"  # librdkafka's name for NOT_LEADER_OR_FOLLOWER
OUT_OF_ORDER = "OUT_OF_ORDER_SEQUENCE_NUMBER"

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


_NEW_EPOCH = re.compile(
    r"(?P<topic>[A-Za-z0-9._-]+) \[(?P<partition>\d+)\] changed PID\{[^}]*\} -> "
    r"PID\{Id:(?P<pid>-?\d+),Epoch:(?P<epoch>-?\d+)\} with base MsgId (?P<base>\d+)"
)


@dataclasses.dataclass(frozen=True)
class EpochBase:
    """librdkafka's NEWPID account: in this partition, the producer's records of this epoch
    are numbered from message id `base_msgid` (sequence = message id - base)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_msgid: int


def parse_epoch_base(message: str) -> EpochBase | None:
    """The EpochBase in one librdkafka log message, or None."""
    m = _NEW_EPOCH.search(message)
    if m is None:
        return None
    return EpochBase(m["topic"], int(m["partition"]), int(m["pid"]), int(m["epoch"]), int(m["base"]))


_BUMP = re.compile(
    r"Beginning partition drain in state \S+ for PID\{Id:(?P<pid>-?\d+),Epoch:(?P<epoch>-?\d+)\} epoch bump "
    r"for \d+ partition\(s\) with in-flight requests: (?P<reason>.*)$"
)
SKIPPED_REASON = "skipped sequence numbers"


@dataclasses.dataclass(frozen=True)
class EpochBump:
    """librdkafka's DRAIN account of the start of an epoch bump, and why."""

    producer_id: int
    producer_epoch: int
    reason: str


def parse_epoch_bump(message: str) -> EpochBump | None:
    """The EpochBump in one librdkafka log message, or None."""
    m = _BUMP.search(message)
    if m is None:
        return None
    return EpochBump(int(m["pid"]), int(m["epoch"]), m["reason"].strip())


@dataclasses.dataclass(frozen=True)
class ClientAccount:
    """What librdkafka said about its idempotence: the bumps it began and why, the refusals
    that made it bump, and each partition's epochs and their base message ids."""

    skipped: tuple[SkippedSequence, ...] = ()
    bases: tuple[EpochBase, ...] = ()
    bumps: tuple[EpochBump, ...] = ()


class ClientAccountLog(logging.Handler):
    """A logging handler for librdkafka's logger (confluent-kafka's `logger` setting, with
    `debug` including `eos`): keeps the ERRSEQ and NEWPID lines, parsed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.skipped: list[SkippedSequence] = []
        self.bases: list[EpochBase] = []
        self.bumps: list[EpochBump] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a message that does not format: not ours
            return
        if "skipped sequence numbers" in message and (found := parse_skipped_sequence(message)) is not None:
            self.skipped.append(found)
        elif "changed PID" in message and (base := parse_epoch_base(message)) is not None:
            self.bases.append(base)
        elif "epoch bump" in message and (bump := parse_epoch_bump(message)) is not None:
            self.bumps.append(bump)

    def account(self) -> ClientAccount:
        return ClientAccount(tuple(self.skipped), tuple(self.bases), tuple(self.bumps))


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


def segment_batches(path: str) -> list[tuple[int, int, bytes]]:
    """(base offset, last offset, bytes) of every whole batch in a replica directory's
    segment files, in offset order (a segment's torn tail is left out)."""
    out = []
    for name in sorted(f for f in os.listdir(path) if f.endswith(".log")):
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + BATCH_HEADER_SIZE <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            end = pos + LOG_OVERHEAD + length
            if length <= 0 or end > len(data):
                break
            last_delta = struct.unpack_from(">i", data, pos + 23)[0]
            out.append((base, base + last_delta, data[pos:end]))
            pos = end
    return out


def batch_origins(partition_dir: str, end_offset: int) -> list[BatchOrigin]:
    """The batches of a replica's segment files wholly below `end_offset` (the final log's
    end), in offset order."""
    out: list[BatchOrigin] = []
    for _base, last, data in segment_batches(partition_dir):
        if last < end_offset:
            h = decode_header(data)
            out.append(BatchOrigin(h.base_offset, h.last_offset, h.producer_id, h.producer_epoch, h.base_sequence))
    return out


def _origin_at(batches: Iterable[BatchOrigin], offset: int) -> BatchOrigin | None:
    return next((b for b in batches if b.base_offset <= offset <= b.last_offset), None)


def _base(account: ClientAccount, topic: str, partition: int, producer_id: int, epoch: int) -> int | None:
    found = [b.base_msgid for b in account.bases
             if (b.topic, b.partition, b.producer_id, b.producer_epoch) == (topic, partition, producer_id, epoch)]
    return found[-1] if len(set(found)) == 1 else None  # none, or two accounts that disagree: no evidence


def _last_sequence(batches: Iterable[BatchOrigin], producer_id: int, epoch: int) -> int:
    return max((b.last_sequence for b in batches if b.producer_id == producer_id and b.producer_epoch == epoch), default=-1)


def explain_resend(topic: str, partition: int, first_offset: int, second_offset: int,
                   batches_of: Callable[[int], list[BatchOrigin] | None], account: ClientAccount) -> str | None:
    """Why the record at `second_offset` repeats the one at `first_offset` (same value, same
    partition, first < second) is librdkafka's re-send under a bumped epoch, or None when the
    evidence (the module docstring's three conditions) is not all there. `batches_of(p)`:
    partition p's batches in the final log (None: not known)."""
    batches = batches_of(partition)
    if batches is None:
        return None
    first, second = _origin_at(batches, first_offset), _origin_at(batches, second_offset)
    if first is None or second is None or first.producer_id < 0:
        return None
    pid, old, new = first.producer_id, first.producer_epoch, second.producer_epoch
    if second.producer_id != pid or new <= old:
        return None  # 1: not a re-send under a later epoch; the leader should have dropped it
    seq, resent_seq = first.sequence_of(first_offset), second.sequence_of(second_offset)
    old_base, new_base = _base(account, topic, partition, pid, old), _base(account, topic, partition, pid, new)
    if old_base is None or new_base is None or seq - resent_seq != new_base - old_base or resent_seq < 0:
        return None  # 2: not shown to be one message of the client's
    began = next((b for b in account.bumps if (b.producer_id, b.producer_epoch) == (pid, old)), None)
    if began is None or began.reason != SKIPPED_REASON:
        return None  # 3: no bump out of that epoch, or one begun for another reason (a timeout, a gap)
    bumps = [s for s in account.skipped if (s.topic, s.producer_id, s.producer_epoch) == (topic, pid, old)]
    # The first refusal follows the failed request, a request of the window it had no
    # acknowledgement for just below the refused one. The error an ERRSEQ line names is the
    # partition's last (librdkafka's rktp_last_err): the refusals behind the first, while it
    # drains, may name anything; each must still have been right.
    if not bumps or bumps[0].failed_error != NOT_PERSISTED_BY_LIBRDKAFKA or not (
            bumps[0].next_seq <= bumps[0].failed_first_seq <= bumps[0].failed_last_seq < bumps[0].refused_seq):
        return None  # 3: not after a NOT_LEADER_OR_FOLLOWER of a request still unacknowledged
    here = [s for s in bumps if s.partition == partition]
    if here and seq < min(s.next_seq for s in here):
        return None  # acknowledged in its own partition before the bump: never re-sent
    for p in sorted({s.partition for s in bumps}):
        refused = batches_of(p)
        if refused is None or _last_sequence(refused, pid, old) >= min(s.refused_seq for s in bumps if s.partition == p) - 1:
            return None  # 3: the leader held what a refused request followed (or the log is unknown)
    s = min(bumps, key=lambda b: b.refused_seq)
    return (f"{topic}-{partition}: offset {second_offset} (producer {pid} epoch {new} sequence {resent_seq}) repeats "
            f"offset {first_offset} (epoch {old} sequence {seq}), the same message of the client's (message id "
            f"{seq + old_base}): librdkafka bumped the epoch after {topic}-{s.partition}'s sequence {s.refused_seq} was "
            f"refused as out of order, following a request it was told had failed ({s.failed_error}), and re-sent what "
            f"it had no acknowledgement for; this one had been written (librdkafka issue #4953)")


class ResendCheck:
    """`explain(partition, first_offset, second_offset)` for `verify` and the history
    checker. `dirs`: partition -> its replica directories; `ends`: partition -> the final
    log's end offset. A partition's batches are read from its directories the first time a
    duplicate needs them, and only if every directory agrees on them below the end (a
    replica holding less is a prefix): otherwise the partition explains nothing."""

    def __init__(self, topic: str, account: ClientAccount, dirs: Mapping[int, list[str]], ends: Mapping[int, int]) -> None:
        self.topic = topic
        self.account = account
        self.dirs = {p: list(ds) for p, ds in dirs.items()}
        self.ends = dict(ends)
        self._batches: dict[int, list[BatchOrigin] | None] = {}

    def batches_of(self, partition: int) -> list[BatchOrigin] | None:
        if partition not in self._batches:
            views = []
            for d in self.dirs.get(partition, []):
                try:
                    views.append(batch_origins(d, self.ends.get(partition, 0)))
                except OSError:
                    continue
            longest = max(views, key=len, default=None)
            agree = longest is not None and all(v == longest[: len(v)] for v in views)
            self._batches[partition] = longest if agree and longest else None
        return self._batches[partition]

    def explain(self, partition: int, first_offset: int, second_offset: int) -> str | None:
        return explain_resend(self.topic, partition, first_offset, second_offset, self.batches_of, self.account)
