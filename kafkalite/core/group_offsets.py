"""Offsets and the group admin APIs: OffsetCommit, OffsetFetch, DeleteGroups, OffsetDelete,
offset retention and the expiry of empty groups (Kafka 2.8's GroupCoordinator and
GroupMetadataManager; KIP-211 offset retention; KIP-496 OffsetDelete).

`OffsetManagement` is the third part of GroupCoordinator (kafkalite.core.group_coordinator),
which provides what is declared at the top. A commit is visible (OffsetFetch) and answered
only once its record is committed; until then it is "pending", which keeps its offset from
expiring and its group from being dropped.

DeleteGroups and OffsetDelete are answered once their tombstones are committed (Kafka
appends them with acks=0 and answers at once): a deletion the client was told about does
not come back on the next coordinator. Expiry's tombstones are not waited for; if they are
lost, a later coordinator loads the offsets again and expires them again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_appends import Gather, Outbox, StoreOffsets, WriteTombstones, offset_append_error, tombstone_append_error
from kafkalite.core.group_messages import (
    DEFAULT_RETENTION_TIME_MS,
    NO_LEADER_EPOCH,
    NO_OFFSET,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    FetchedOffset,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
)
from kafkalite.core.group_state import CommittedOffset, Deadline, Group, GroupState, Member, Timer
from kafkalite.core.offsets_records import NO_TIMESTAMP, GroupMetadataKey, OffsetCommitKey, OffsetCommitValue, OffsetsRecord

S = GroupState
E = ErrorCode
TP = tuple[str, int]

EXPIRE_TIMESTAMP_MS_MAX = 2**63 - 1  # the record's int64


def expire_timestamp_ms(now_ms: int, retention_ms: int) -> int:
    """OffsetCommit v2-v4: the offset expires `retention_ms` from now, within what the
    record's int64 holds. The client picks any int64: a retention past the range keeps the
    offset for good (Kafka's long sum would wrap and expire it at once); one reaching back
    before the epoch expires it at the next check. Unbounded, the sum could not be written,
    and the commit would never be answered."""
    return min(max(now_ms + retention_ms, 0), EXPIRE_TIMESTAMP_MS_MAX)


class OffsetManagement:
    # Provided by GroupCoordinator.
    out: Outbox
    now_ms: int
    groups: dict[str, Group]
    offsets_retention_ms: int
    offset_metadata_max_bytes: int

    if TYPE_CHECKING:  # provided by GroupCoordinator (absent at run time, so nothing is shadowed)
        def _arm(self, kind: Timer, group: Group | None, member: Member | None, delay_ms: int) -> Deadline:
            ...

        def _validate(self, group_id: str, *, empty_id_allowed: bool = False) -> ErrorCode:
            ...

        def _create_group(self, group_id: str) -> Group:
            ...

        def _remove_group(self, group: Group) -> None:
            ...

        def _owner_epoch(self, group_id: str) -> tuple[int, int]:
            ...

        def _touch(self, group: Group) -> None:
            ...

        def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
            ...

    # -------------------------------------------------------------- OffsetCommit / OffsetFetch

    def _commit_offsets(self, req: OffsetCommitRequest) -> None:
        error = self._validate(req.group_id, empty_id_allowed=True)
        group = self.groups.get(req.group_id)
        if error is E.NONE and group is None:
            if req.generation_id < 0:  # a consumer that uses Kafka only to store offsets
                group = self._create_group(req.group_id)
            else:
                error = E.ILLEGAL_GENERATION  # a generation of a group that is gone
        if error is E.NONE:
            assert group is not None
            self._touch(group)
            error = self._commit_error(group, req)
        if error is not E.NONE:
            return self.out.answer(req.reply_to, OffsetCommitResponse(tuple(
                PartitionResult(p.topic, p.partition, error) for p in req.partitions)))
        assert group is not None
        self._store_offsets(group, req)

    def _commit_error(self, group: Group, req: OffsetCommitRequest) -> ErrorCode:
        if group.is_(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            return E.FENCED_INSTANCE_ID
        if req.generation_id < 0 and group.is_(S.EMPTY):
            return E.NONE
        if not group.has(req.member_id):
            return E.UNKNOWN_MEMBER_ID
        if req.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_(S.COMPLETING_REBALANCE):
            # It has this generation but not yet its assignment: it will rejoin.
            return E.REBALANCE_IN_PROGRESS
        assert group.state in (S.STABLE, S.PREPARING_REBALANCE), group.state
        member = group.get(req.member_id)  # a commit is a sign of life
        self._schedule_heartbeat(group, member)
        return E.NONE

    def _store_offsets(self, group: Group, req: OffsetCommitRequest) -> None:
        now = self.now_ms
        too_large = frozenset((p.topic, p.partition) for p in req.partitions
                              if p.metadata is not None and len(p.metadata) > self.offset_metadata_max_bytes)
        committed: dict[TP, CommittedOffset] = {}
        for p in req.partitions:
            tp = (p.topic, p.partition)
            if tp in too_large:
                continue
            committed[tp] = CommittedOffset(
                p.offset, p.leader_epoch, p.metadata or "",
                now if p.commit_timestamp_ms == -1 else p.commit_timestamp_ms,
                None if req.retention_time_ms == DEFAULT_RETENTION_TIME_MS else expire_timestamp_ms(now, req.retention_time_ms))
        order = tuple((p.topic, p.partition) for p in req.partitions)
        if not committed:
            return self.out.answer(req.reply_to, OffsetCommitResponse(tuple(
                PartitionResult(t, p, E.OFFSET_METADATA_TOO_LARGE) for t, p in order)))
        records = [OffsetsRecord(OffsetCommitKey(group.group_id, t, p), OffsetCommitValue(
            c.offset, c.metadata, c.commit_timestamp_ms, c.leader_epoch,
            NO_TIMESTAMP if c.expire_timestamp_ms is None else c.expire_timestamp_ms)) for (t, p), c in committed.items()]
        group.prepare_offset_commit(list(committed))
        partition, epoch = self._owner_epoch(group.group_id)
        self.out.append(partition, epoch, records, StoreOffsets(group, committed, order, too_large, req.reply_to), now)

    def _on_offsets_stored(self, what: StoreOffsets, error: ErrorCode, base_offset: int | None) -> None:
        group = what.group
        if not group.is_(S.DEAD):
            self._touch(group)
            for i, (tp, committed) in enumerate(what.committed.items()):
                if error is E.NONE:
                    assert base_offset is not None
                    group.on_offset_commit_append(tp, replace(committed, record_offset=base_offset + i))
                else:
                    group.fail_pending_offset_write(tp)
        error = offset_append_error(error)
        self.out.answer(what.reply_to, OffsetCommitResponse(tuple(
            PartitionResult(t, p, E.OFFSET_METADATA_TOO_LARGE if (t, p) in what.too_large else error) for t, p in what.order)))

    def _fetch_offsets(self, req: OffsetFetchRequest) -> None:
        """Offsets are answered whatever the group's state (it may use Kafka only to store
        them); what is in flight is not visible until committed."""
        error = self._validate(req.group_id, empty_id_allowed=True)
        if error is not E.NONE:
            return self.out.answer(req.reply_to, OffsetFetchResponse(error))
        group = self.groups.get(req.group_id)
        offsets = {} if group is None else group.offsets
        tps = list(offsets) if req.partitions is None else list(req.partitions)
        fetched = []
        for tp in tps:
            c = offsets.get(tp)
            if c is None:
                fetched.append(FetchedOffset(tp[0], tp[1], NO_OFFSET, NO_LEADER_EPOCH, ""))
            else:
                fetched.append(FetchedOffset(tp[0], tp[1], c.offset, c.leader_epoch, c.metadata))
        self.out.answer(req.reply_to, OffsetFetchResponse(E.NONE, tuple(fetched)))

    # -------------------------------------------------------------- DeleteGroups / OffsetDelete / expiry
    def _write_tombstones(self, group: Group, removed: list[TP], group_dead: bool, gather: Gather | None) -> int | None:
        """Deleted offsets (and the group itself, when it is gone and was ever more than an
        offset store) as tombstones, which compaction keeps until everyone has seen them."""
        records = [OffsetsRecord(OffsetCommitKey(group.group_id, t, p), None) for t, p in removed]
        if group_dead and group.generation_id > 0:
            records.append(OffsetsRecord(GroupMetadataKey(group.group_id), None))
        if not records:
            return None
        partition, epoch = self._owner_epoch(group.group_id)
        return self.out.append(partition, epoch, records, WriteTombstones(group.group_id, gather), self.now_ms)

    def _delete_groups(self, req: DeleteGroupsRequest) -> None:
        gather = Gather(req.reply_to, {})
        for group_id in dict.fromkeys(req.group_ids):
            error = self._validate(group_id, empty_id_allowed=True)
            group = self.groups.get(group_id)
            if error is E.NONE and group is None:
                error = E.GROUP_ID_NOT_FOUND
            elif error is E.NONE and group is not None and not group.is_(S.EMPTY):
                error = E.NON_EMPTY_GROUP
            gather.results[group_id] = error
            if error is E.NONE:
                assert group is not None
                group.transition_to(S.DEAD, self.now_ms)
                removed = group.remove_offsets([*group.offsets, *group.pending_offset_commits])
                self._remove_group(group)
                append_id = self._write_tombstones(group, removed, True, gather)
                if append_id is not None:
                    gather.waiting.add(append_id)
        self._maybe_answer(gather)

    def _delete_offsets(self, req: OffsetDeleteRequest) -> None:
        error = self._validate(req.group_id)
        group = self.groups.get(req.group_id)
        if error is E.NONE and group is None:
            error = E.GROUP_ID_NOT_FOUND
        if error is not E.NONE:
            return self.out.answer(req.reply_to, OffsetDeleteResponse(error))
        assert group is not None
        self._touch(group)
        if group.is_(S.EMPTY):
            subscribed: list[TP] = []
        elif group.is_consumer_group():
            subscribed = [tp for tp in req.partitions if group.is_subscribed_to_topic(tp[0])]
        else:
            return self.out.answer(req.reply_to, OffsetDeleteResponse(E.NON_EMPTY_GROUP))
        eligible = [tp for tp in req.partitions if tp not in subscribed]
        gather = Gather(req.reply_to, {req.group_id: E.NONE}, offset_delete=tuple(req.partitions),
                        subscribed=frozenset(subscribed))
        if eligible:
            removed = group.remove_offsets(eligible)
            dead = self._maybe_drop_empty_group(group)
            append_id = self._write_tombstones(group, removed, dead, gather)
            if append_id is not None:
                gather.waiting.add(append_id)
        self._maybe_answer(gather)

    def _maybe_drop_empty_group(self, group: Group) -> bool:
        """An Empty group without offsets is gone (GroupMetadataManager.cleanupGroupMetadata)."""
        if group.is_(S.EMPTY) and not group.has_offsets():
            group.transition_to(S.DEAD, self.now_ms)
            self._remove_group(group)
            return True
        return False

    def _on_tombstones_written(self, append_id: int, what: WriteTombstones, error: ErrorCode) -> None:
        gather = what.gather
        if gather is None:
            if error is not E.NONE:  # expiry: the next check writes them again
                self.out.note("warning", f"group {what.group_id}: tombstones not written ({error.name})")
            return
        gather.waiting.discard(append_id)
        if error is not E.NONE:
            gather.results[what.group_id] = tombstone_append_error(error)
        self._maybe_answer(gather)

    def _maybe_answer(self, gather: Gather) -> None:
        if gather.waiting:
            return
        if gather.offset_delete is None:
            self.out.answer(gather.reply_to, DeleteGroupsResponse(tuple(gather.results.items())))
            return
        (error,) = gather.results.values()
        self.out.answer(gather.reply_to, OffsetDeleteResponse(E.NONE, tuple(
            PartitionResult(t, p, E.GROUP_SUBSCRIBED_TO_TOPIC if (t, p) in gather.subscribed else error)
            for t, p in gather.offset_delete)))

    def _expire_offsets(self) -> None:
        """offsets.retention.minutes (KIP-211), every offsets.retention.check.interval.ms."""
        expired_total = 0
        for group in list(self.groups.values()):
            self._touch(group)
            expired = group.remove_expired_offsets(self.now_ms, self.offsets_retention_ms)
            expired_total += len(expired)
            dead = self._maybe_drop_empty_group(group)
            self._write_tombstones(group, list(expired), dead, None)
        if expired_total:
            self.out.note("info", f"expired {expired_total} offsets")

    def _partitions_deleted(self, partitions: tuple[TP, ...]) -> None:
        for group in list(self.groups.values()):
            self._touch(group)
            removed = group.remove_offsets(list(partitions))
            dead = self._maybe_drop_empty_group(group)
            self._write_tombstones(group, removed, dead, None)
