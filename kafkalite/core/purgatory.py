"""Delayed operations keyed by partition (Kafka's DelayedOperationPurgatory; seed 002
"DelayedFetch 的处理"; DESIGN section 5 "Purgatory").

`Purgatory` holds operations by id, each watched under one or more keys (topic-partitions)
with a deadline and a `check` callable. The shell attaches an asyncio future per op id:
- `add` tries the check once (Kafka's tryCompleteElseWatch) and watches if not done;
- `check_and_complete(key)` after the HW or LEO of that partition moved, or its leadership
  changed;
- `poll(now_ms)` returns the operations whose deadline passed (expired) and
  `next_deadline_ms` says when to poll again.
Each operation ends exactly once, as COMPLETED, EXPIRED or CANCELLED (the lifecycle table
`OP_TRANSITIONS`); an ended operation is removed from every key at once.

`DelayedProduce` and `DelayedFetch` are the two pure operations: the shell builds one, uses
its `try_complete` as the check, and reads `result()` when the op id comes back.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from kafkalite.core.codes import ErrorCode, IllegalTransitionError, PurgatoryFullError

OpId = TypeVar("OpId", bound=Hashable)
Key = Hashable


class OpState(enum.Enum):
    WATCHING = "watching"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class OpEvent(enum.Enum):
    COMPLETE = "complete"
    EXPIRE = "expire"
    CANCEL = "cancel"


# The one table of legal lifecycle transitions; everything else is a programmer error.
OP_TRANSITIONS: dict[tuple[OpState, OpEvent], OpState] = {
    (OpState.WATCHING, OpEvent.COMPLETE): OpState.COMPLETED,
    (OpState.WATCHING, OpEvent.EXPIRE): OpState.EXPIRED,
    (OpState.WATCHING, OpEvent.CANCEL): OpState.CANCELLED,
}


@dataclass
class _Op:
    op_id: Hashable
    keys: tuple[Key, ...]
    deadline_ms: int
    check: Callable[[], bool]
    state: OpState = OpState.WATCHING


class Purgatory(Generic[OpId]):
    """Delayed operations; bounded by `size_max` (PurgatoryFullError beyond it)."""

    def __init__(self, size_max: int = 10_000) -> None:
        assert size_max > 0
        self.size_max = size_max
        self._ops: dict[Hashable, _Op] = {}
        self._watchers: dict[Key, dict[Hashable, None]] = {}  # insertion-ordered sets
        self._deadlines: list[tuple[int, int, Hashable]] = []  # heap, lazily cleaned
        self._sequence = 0

    @property
    def size(self) -> int:
        return len(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __contains__(self, op_id: object) -> bool:
        return op_id in self._ops

    def add(
        self, op_id: OpId, keys: Iterable[Key], deadline_ms: int, check: Callable[[], bool]
    ) -> bool:
        """Try once; if `check()` is already true the operation completes now and True is
        returned (nothing is stored). Else it is watched under every key until completed,
        expired or cancelled. Raises PurgatoryFullError at the bound (the shell answers
        at once) and ValueError for a reused live id or no key."""
        keys_tuple = tuple(dict.fromkeys(keys))
        if not keys_tuple:
            raise ValueError("a delayed operation needs at least one key")
        if op_id in self._ops:
            raise ValueError(f"operation {op_id!r} already in the purgatory")
        if check():
            return True
        if len(self._ops) >= self.size_max:
            raise PurgatoryFullError(f"purgatory holds {len(self._ops)} operations (max)")
        op = _Op(op_id, keys_tuple, deadline_ms, check)
        self._ops[op_id] = op
        for key in keys_tuple:
            self._watchers.setdefault(key, {})[op_id] = None
        self._sequence += 1
        heapq.heappush(self._deadlines, (deadline_ms, self._sequence, op_id))
        self._check_invariants_of(op)
        return False

    def check_and_complete(self, key: Key) -> list[OpId]:
        """Something about `key` changed: complete every watcher whose check is now true,
        in the order they were added. Returns the completed op ids."""
        watchers = self._watchers.get(key)
        if not watchers:
            return []
        completed: list[OpId] = []
        for op_id in list(watchers):
            op = self._ops.get(op_id)
            if op is None or op.state is not OpState.WATCHING:
                continue  # ended by an earlier check in this loop
            if op.check():
                self._end(op, OpEvent.COMPLETE)
                completed.append(op_id)  # type: ignore[arg-type]
        return completed

    def cancel(self, op_id: OpId) -> bool:
        """Drop without completing (the client went away). False if already ended."""
        op = self._ops.get(op_id)
        if op is None:
            return False
        self._end(op, OpEvent.CANCEL)
        return True

    def poll(self, now_ms: int) -> list[OpId]:
        """Expire operations with deadline_ms <= now_ms (Kafka runs onExpiration without a
        last check). Returns their ids, earliest deadline first."""
        expired: list[OpId] = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, _, op_id = heapq.heappop(self._deadlines)
            op = self._ops.get(op_id)
            if op is None:
                continue  # already ended; its heap entry was left behind
            self._end(op, OpEvent.EXPIRE)
            expired.append(op_id)  # type: ignore[arg-type]
        self._drop_dead_deadlines()
        return expired

    @property
    def next_deadline_ms(self) -> int | None:
        """When `poll` next has something to do; None when empty."""
        self._drop_dead_deadlines()
        return self._deadlines[0][0] if self._deadlines else None

    def _drop_dead_deadlines(self) -> None:
        while self._deadlines and self._deadlines[0][2] not in self._ops:
            heapq.heappop(self._deadlines)
        # Bound the lazy heap: rebuild when it is mostly dead entries.
        if len(self._deadlines) > 2 * len(self._ops) + 64:
            self._deadlines = [e for e in self._deadlines if e[2] in self._ops]
            heapq.heapify(self._deadlines)

    def _end(self, op: _Op, event: OpEvent) -> None:
        target = OP_TRANSITIONS.get((op.state, event))
        if target is None:
            raise IllegalTransitionError("delayed operation", op.state, event)
        op.state = target
        del self._ops[op.op_id]
        for key in op.keys:
            watchers = self._watchers.get(key)
            assert watchers is not None
            del watchers[op.op_id]
            if not watchers:
                del self._watchers[key]
        assert op.op_id not in self._ops

    def _check_invariants_of(self, op: _Op) -> None:
        assert op.state is OpState.WATCHING
        assert len(self._ops) <= self.size_max
        for key in op.keys:
            assert op.op_id in self._watchers[key]


# ----------------------------------------------------------------- DelayedProduce


class PartitionLookup(Protocol):
    """What DelayedProduce needs of a partition: its replica state (role, ISR, HW) and
    the leader epoch its log records at an offset."""

    @property
    def is_leader(self) -> bool: ...

    def epoch_at(self, offset: int) -> int:
        """The leader epoch of the batch holding `offset` in the local log; -1 if the log
        does not reach it."""
        ...

    def check_enough_replicas_reach_offset(
        self, required_offset: int, min_insync_replicas: int
    ) -> tuple[bool, ErrorCode]: ...


@dataclass
class ProducePartitionStatus:
    """One partition of an acks=all produce: its last offset, the leader epoch it was
    appended in, and, once done, its error code."""

    last_offset: int
    leader_epoch: int
    min_insync_replicas: int
    done: bool = False
    error: ErrorCode = ErrorCode.NONE


class DelayedProduce:
    """acks=all (Kafka DelayedProduce.tryComplete). A partition is done when the HW has
    passed its last offset, or with NOT_LEADER_OR_FOLLOWER when this broker does not
    lead the partition or its log no longer holds the batch as appended, with
    UNKNOWN_TOPIC_OR_PARTITION when the replica is gone from this broker, or with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND. The whole operation completes when every partition
    is done; on expiry the rest get REQUEST_TIMED_OUT.

    "Holds the batch as appended" means the log still records the append's leader epoch
    at the batch's last offset. A deposed leader that got the partition back after
    truncating and re-fetching those offsets records a newer epoch there (one leader per
    epoch, followers copy the leader's bytes), so it cannot acknowledge what it lost
    (guarantee 4). A leader whose epoch was only bumped (the controller shrank the ISR
    after a follower failed) still holds the batch and acknowledges it once the HW
    passes. Failing those would hand the producer an error for a batch whose successors
    succeed, and librdkafka then reports the batch delivered without an offset (its
    "implicit ack"): issue 7."""

    def __init__(self, partitions: Mapping[Key, ProducePartitionStatus]) -> None:
        assert partitions
        self.partitions = dict(partitions)

    def try_complete(self, lookup: Callable[[Key], PartitionLookup | None]) -> bool:
        for key, status in self.partitions.items():
            if status.done:
                continue
            partition = lookup(key)
            if partition is None:  # deleted (topic deletion, partition removal), as Kafka answers
                self._finish(status, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if not partition.is_leader:
                self._finish(status, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            if partition.epoch_at(status.last_offset) != status.leader_epoch:
                self._finish(status, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            enough, error = partition.check_enough_replicas_reach_offset(
                status.last_offset + 1, status.min_insync_replicas
            )
            if error is not ErrorCode.NONE or enough:
                self._finish(status, error)
        return all(s.done for s in self.partitions.values())

    def on_expiration(self) -> None:
        for status in self.partitions.values():
            if not status.done:
                self._finish(status, ErrorCode.REQUEST_TIMED_OUT)

    def result(self) -> dict[Key, ErrorCode]:
        assert all(s.done for s in self.partitions.values())
        return {key: s.error for key, s in self.partitions.items()}

    @staticmethod
    def _finish(status: ProducePartitionStatus, error: ErrorCode) -> None:
        assert not status.done
        status.done = True
        status.error = error


# ------------------------------------------------------------------- DelayedFetch


@dataclass(frozen=True)
class FetchProbe:
    """The shell's answer about one partition of a waiting fetch: the leader epoch now
    (None if this replica can no longer serve it), the end offset the fetcher may read to
    (HW for consumers, LEO for followers), the bytes available from the fetch offset, and
    the log end offset (None: the same as `end_offset`). A fetch offset between the end
    offset and the log end waits (a consumer ahead of a lagging HW, as Kafka's delayed
    fetch does); one beyond the log end is answered at once (a truncation, or a follower
    that lacks the offset)."""

    leader_epoch: int | None
    end_offset: int
    bytes_available: int
    log_end_offset: int | None = None
    log_start_offset: int = 0  # a fetch offset below it (retention, DeleteRecords) is answered at once


@dataclass(frozen=True)
class FetchPartitionStatus:
    fetch_offset: int
    leader_epoch: int  # -1 when the fetcher sent none


class DelayedFetch:
    """Fetch with min_bytes / max_wait_ms (Kafka DelayedFetch.tryComplete): complete when a
    partition errs or changes leadership/epoch, when a fetch offset is beyond the log end (a
    truncation happened: answer now so the fetcher learns), or when the bytes available
    over all partitions reach min_bytes. A moved HW alone completes no follower's fetch
    (Kafka since KAFKA-9952). Expiry at max_wait answers with what there is."""

    def __init__(self, partitions: Mapping[Key, FetchPartitionStatus], min_bytes: int) -> None:
        assert partitions
        assert min_bytes >= 0
        self.partitions = dict(partitions)
        self.min_bytes = min_bytes
        self.error_partitions: set[Key] = set()

    def try_complete(self, probe: Callable[[Key, int], FetchProbe | None]) -> bool:
        accumulated = 0
        for key, status in self.partitions.items():
            seen = probe(key, status.fetch_offset)
            if seen is None or seen.leader_epoch is None:
                self.error_partitions.add(key)
                return True
            if status.leader_epoch >= 0 and seen.leader_epoch != status.leader_epoch:
                self.error_partitions.add(key)
                return True
            log_end = seen.end_offset if seen.log_end_offset is None else seen.log_end_offset
            assert seen.end_offset <= log_end
            if status.fetch_offset > log_end:
                return True
            if status.fetch_offset < seen.log_start_offset:
                return True  # deleted under it: OFFSET_OUT_OF_RANGE now (Kafka's case F), not at max_wait
            accumulated += max(0, seen.bytes_available)
        return accumulated >= self.min_bytes
