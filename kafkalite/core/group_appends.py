"""The coordinator's outbox and the appends it waits for (issue 10: an OffsetCommit or a
completed rebalance is answered only once its record is replicated, acks=all).

Each append the core asks for is an explicit in-flight type (STYLE habit 5) saying what to
do when the driver reports its outcome:

| in flight | written by | on success | on failure |
|---|---|---|---|
| StoreAssignment | the leader's SyncGroup | assignments out, Stable | errors out, rebalance |
| StoreEmptyGroup | a rebalance that left nobody | nothing | a note |
| StoreStaticMember | a static member's rejoin while Stable | JoinGroup answered | member id restored, error |
| StoreOffsets | OffsetCommit | offsets visible, answered | answered with the error |
| WriteTombstones | DeleteGroups, OffsetDelete, expiry | answered (expiry: nothing) | same, with the error |

Append errors become the codes Kafka's GroupMetadataManager answers with (two tables: one
for group records, one for offset commits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_messages import Answer, AppendRecords, GroupResponse, LoadPartition, Note, Ready
from kafkalite.core.group_state import CommittedOffset, Group, Member
from kafkalite.core.offsets_records import OffsetsRecord

TP = tuple[str, int]

E = ErrorCode
# GroupMetadataManager.storeGroup's putCacheCallback.
GROUP_APPEND_ERRORS: Mapping[ErrorCode, ErrorCode] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.REQUEST_TIMED_OUT: E.REBALANCE_IN_PROGRESS,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.INVALID_FETCH_SIZE: E.UNKNOWN_SERVER_ERROR,
}
# GroupMetadataManager.storeOffsets's putCacheCallback.
OFFSET_APPEND_ERRORS: Mapping[ErrorCode, ErrorCode] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.INVALID_FETCH_SIZE: E.INVALID_COMMIT_OFFSET_SIZE,
}


def group_append_error(error: ErrorCode) -> ErrorCode:
    return GROUP_APPEND_ERRORS.get(error, error)


def offset_append_error(error: ErrorCode) -> ErrorCode:
    return OFFSET_APPEND_ERRORS.get(error, error)


def tombstone_append_error(error: ErrorCode) -> ErrorCode:
    """DeleteGroups / OffsetDelete: Kafka does not wait for these (acks=0); we do, and
    answer like a group write, except that a timeout stays a timeout."""
    return error if error is E.REQUEST_TIMED_OUT else group_append_error(error)


# ------------------------------------------------------------------ in flight


@dataclass
class StoreAssignment:
    group: Group
    generation_id: int
    assignment: dict[str, bytes]


@dataclass
class StoreEmptyGroup:
    group: Group
    generation_id: int


@dataclass
class StoreStaticMember:
    """A known static member rejoined with a new member id while Stable and the group's
    protocol stays: the new id is persisted and the JoinGroup answered, no rebalance."""

    group: Group
    member: Member
    old_member_id: str
    old_protocols: tuple[tuple[str, bytes], ...]
    leader_before: str | None
    reply_to: Any


@dataclass
class StoreOffsets:
    group: Group
    committed: dict[TP, CommittedOffset]  # what was written
    order: tuple[TP, ...]  # the request's partitions (for the answer)
    too_large: frozenset[TP]  # refused with OFFSET_METADATA_TOO_LARGE, not written
    reply_to: Any


@dataclass
class Gather:
    """Answers a request once all its tombstone appends ended (DeleteGroups: one per group)."""

    reply_to: Any
    results: dict[str, ErrorCode]  # group id -> error, in the request's order
    waiting: set[int] = field(default_factory=set)
    offset_delete: tuple[TP, ...] | None = None  # OffsetDelete: the partitions asked for
    subscribed: frozenset[TP] = frozenset()  # OffsetDelete: refused, the group consumes them


@dataclass
class WriteTombstones:
    group_id: str
    gather: Gather | None  # None: expiry, nobody waits


InFlight = StoreAssignment | StoreEmptyGroup | StoreStaticMember | StoreOffsets | WriteTombstones


@dataclass
class PendingAppend:
    append_id: int
    partition: int
    what: InFlight


# ------------------------------------------------------------------ the outbox


class Outbox:
    """Effects collected while one event is handled, and the appends awaiting an outcome."""

    def __init__(self) -> None:
        self.ready = Ready()
        self.pending: dict[int, PendingAppend] = {}
        self._next_append_id = 1

    def answer(self, reply_to: Any, response: GroupResponse) -> None:
        assert reply_to is not None, "a request without a reply token"
        self.ready.answers.append(Answer(reply_to, response))

    def note(self, level: str, text: str) -> None:
        self.ready.notes.append(Note(level, text))

    def load(self, partition: int, leader_epoch: int) -> None:
        self.ready.loads.append(LoadPartition(partition, leader_epoch))

    def append(self, partition: int, leader_epoch: int, records: list[OffsetsRecord], what: InFlight, now_ms: int) -> int:
        # Bounded by the requests in flight: each append answers one, or is one per group
        # per rebalance or expiry (the listener bounds requests per connection).
        assert records, "an append without records"
        append_id = self._next_append_id
        self._next_append_id += 1
        self.pending[append_id] = PendingAppend(append_id, partition, what)
        self.ready.appends.append(AppendRecords(append_id, partition, leader_epoch, tuple(records), now_ms))
        return append_id

    def take_pending(self, append_id: int) -> PendingAppend | None:
        return self.pending.pop(append_id, None)

    def pending_of_partition(self, partition: int) -> list[PendingAppend]:
        return [p for p in self.pending.values() if p.partition == partition]

    def flush(self, deadline_ms: int | None) -> Ready:
        out, self.ready = self.ready, Ready()
        out.deadline_ms = deadline_ms
        return out
