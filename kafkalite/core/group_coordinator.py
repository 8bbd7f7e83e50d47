"""The group coordinator as one synchronous state machine (DESIGN.md section 10, issue 10).

The coordinator of a group is the leader of its `__consumer_offsets` partition
(`partition_for`). Its state is the groups of the partitions it leads, and their offsets;
its persistence is records in those partitions (kafkalite.core.offsets_records), appended
with acks=all semantics.

Driving it (etcd raft's Ready, like kafkalite.core.controller):
- `handle(event, now_ms)` takes one event (kafkalite.core.group_messages) and `poll(now_ms)`
  fires the deadlines that passed; both return a `Ready`: answers to reply tokens, appends
  (the driver reports each one's outcome exactly once, as AppendCompleted / AppendFailed),
  partition loads (answered by RecordsLoaded events), notes, and the next deadline.
- Nothing is answered before its record is committed: an OffsetCommit, the leader's
  SyncGroup of a new generation, a static member's rejoin.
- BecameLeader loads the partition: its groups answer COORDINATOR_LOAD_IN_PROGRESS until
  the last RecordsLoaded. BecameFollower unloads them: parked requests and appends in
  flight are answered NOT_COORDINATOR, and so is everything after. Events of an older
  leader epoch than the partition's latest are ignored (racing LeaderAndIsr requests).

Errors are Kafka's codes (kafkalite.core.codes.ErrorCode, the one table) carried as values
in the typed answers, as Kafka's GroupCoordinator passes them to its callbacks: an answer
often carries data with its error (MEMBER_ID_REQUIRED with the new member id, an error per
partition or per leaving member). Broken invariants and illegal transitions are assertions
and IllegalTransitionError, never answered.

The class has three parts: this one (driving, timers, partitions and loading, group
records), the membership protocol (kafkalite.core.group_rebalance) and offsets with the
group admin APIs (kafkalite.core.group_offsets).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kafkalite.core.codes import ErrorCode, OffsetsRecordError
from kafkalite.core.group_appends import (
    Outbox,
    PendingAppend,
    StoreAssignment,
    StoreEmptyGroup,
    StoreOffsets,
    StoreStaticMember,
)
from kafkalite.core.group_messages import (
    OFFSETS_TOPIC,
    AppendCompleted,
    AppendFailed,
    BecameFollower,
    BecameLeader,
    DeleteGroupsRequest,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    GroupEvent,
    GroupOverview,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    PartitionsDeleted,
    Ready,
    RecordsLoaded,
    SyncGroupRequest,
    partition_for,
)
from kafkalite.core.group_offsets import OffsetManagement
from kafkalite.core.group_rebalance import Rebalancing
from kafkalite.core.group_state import CommittedOffset, Deadline, Group, GroupState, Member, Timer
from kafkalite.core.offsets_records import (
    NO_TIMESTAMP,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecord,
    decode_record,
)
from kafkalite.core.replica_manager import RoleChanges

S = GroupState
E = ErrorCode
TP = tuple[str, int]

TIMERS_COMPACT_AT_MIN = 1024  # heap entries before stale ones are worth sweeping


class _LedReplica(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int: ...


def leadership_events(changes: RoleChanges, replica: Callable[[TP], _LedReplica | None],
                      offsets_topic_partitions: int) -> list[BecameLeader | BecameFollower]:
    """What a LeaderAndIsr or StopReplica the replica manager carried out means for the
    coordinator: each offsets partition it named is now led here (BecameLeader, load it) or
    not (BecameFollower, unload it). `replica` is the replica manager's view after the change;
    both drivers feed the core with this."""
    named = {tp for tp, _code in changes.codes} | set(changes.removed)
    events: list[BecameLeader | BecameFollower] = []
    for topic, p in sorted(named):
        if topic != OFFSETS_TOPIC or p >= offsets_topic_partitions:
            continue
        rep = replica((topic, p))
        if rep is None:
            events.append(BecameFollower(p, None))
        elif rep.is_leader:
            events.append(BecameLeader(p, rep.leader_epoch))
        else:
            events.append(BecameFollower(p, rep.leader_epoch))
    return events
MEMBER_ID_BYTES_MAX = 2**15 - 1  # an int16-length string, in JoinGroup answers and group records



@dataclass(frozen=True)
class GroupCoordinatorConfig:
    """Kafka's broker settings of the same names (defaults as Kafka's)."""

    offsets_topic_partitions: int = 50  # offsets.topic.num.partitions
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    group_initial_rebalance_delay_ms: int = 3_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000  # GroupCoordinator.NewMemberJoinTimeoutMs

    def __post_init__(self) -> None:
        assert self.offsets_topic_partitions > 0
        assert 0 < self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms
        assert self.group_max_size > 0
        assert self.group_initial_rebalance_delay_ms >= 0
        assert self.offsets_retention_ms > 0
        assert self.offsets_retention_check_interval_ms > 0
        assert self.offset_metadata_max_bytes >= 0
        assert self.new_member_join_timeout_ms > 0


@dataclass
class _Load:
    """What a partition's records said so far, latest record per key."""

    offsets: dict[tuple[str, TP], CommittedOffset] = field(default_factory=dict)
    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    skipped: int = 0


@dataclass
class _Partition:
    """An offsets partition this broker leads: loading (with what was read so far) or owned."""

    leader_epoch: int
    load: _Load | None  # None once loaded


@dataclass(order=True)
class _Timer:
    at_ms: int
    seq: int
    kind: Timer = field(compare=False)
    group: Group | None = field(compare=False)
    member: Member | None = field(compare=False)
    deadline: Deadline = field(compare=False)


class GroupCoordinator(Rebalancing, OffsetManagement):
    def __init__(self, config: GroupCoordinatorConfig, *, new_member_uuid: Callable[[], str]) -> None:
        """`new_member_uuid` makes the random part of new member ids (Kafka: a UUID); the
        core stays deterministic, so the driver passes uuid4 and tests a counter."""
        self.config = config
        self.offsets_topic_partitions = config.offsets_topic_partitions
        self.group_min_session_timeout_ms = config.group_min_session_timeout_ms
        self.group_max_session_timeout_ms = config.group_max_session_timeout_ms
        self.group_max_size = config.group_max_size
        self.group_initial_rebalance_delay_ms = config.group_initial_rebalance_delay_ms
        self.new_member_join_timeout_ms = config.new_member_join_timeout_ms
        self.offsets_retention_ms = config.offsets_retention_ms
        self.offset_metadata_max_bytes = config.offset_metadata_max_bytes
        self._new_member_uuid = new_member_uuid
        self.out = Outbox()
        self.now_ms = 0
        self.groups: dict[str, Group] = {}
        self.partitions: dict[int, _Partition] = {}  # the partitions we lead (loading or loaded)
        self.epochs: dict[int, int] = {}  # latest leader epoch seen per partition, led or not
        self._timers: list[_Timer] = []
        self._timers_live = 0  # entries current at the last compaction
        self._timer_seq = 0
        self._retention: Deadline | None = None
        self._touched: dict[int, Group] = {}

    # -------------------------------------------------------------- driving

    def handle(self, event: GroupEvent, now_ms: int) -> Ready:
        """One event at `now_ms`. Deadlines at or before `now_ms` fire first, so the outcome
        does not depend on how punctually the driver polled (a heartbeat after its session
        ended finds the member gone)."""
        self._advance(now_ms)
        self._fire_due(now_ms)
        match event:
            case JoinGroupRequest():
                self._join_group(event)
            case SyncGroupRequest():
                self._sync_group(event)
            case HeartbeatRequest():
                self._heartbeat(event)
            case LeaveGroupRequest():
                self._leave_group(event)
            case OffsetCommitRequest():
                self._commit_offsets(event)
            case OffsetFetchRequest():
                self._fetch_offsets(event)
            case ListGroupsRequest():
                self._list_groups(event)
            case DescribeGroupsRequest():
                self._describe_groups(event)
            case DeleteGroupsRequest():
                self._delete_groups(event)
            case OffsetDeleteRequest():
                self._delete_offsets(event)
            case BecameLeader():
                self._became_leader(event)
            case BecameFollower():
                self._became_follower(event)
            case RecordsLoaded():
                self._records_loaded(event)
            case AppendCompleted():
                self._append_ended(event.append_id, E.NONE, event.base_offset)
            case AppendFailed():
                assert event.error is not E.NONE
                self._append_ended(event.append_id, event.error, None)
            case PartitionsDeleted():
                self._partitions_deleted(event.partitions)
            case _:
                raise AssertionError(f"not a group coordinator event: {event!r}")
        return self._flush()

    def poll(self, now_ms: int) -> Ready:
        """Fire every deadline at or before `now_ms`, earliest first."""
        self._advance(now_ms)
        self._fire_due(now_ms)
        return self._flush()

    def _fire_due(self, now_ms: int) -> None:
        while self._timers and self._timers[0].at_ms <= now_ms:
            timer = heapq.heappop(self._timers)
            if self._is_current(timer):
                self._fire(timer)

    @property
    def next_deadline_ms(self) -> int | None:
        while self._timers and not self._is_current(self._timers[0]):
            heapq.heappop(self._timers)
        return self._timers[0].at_ms if self._timers else None

    def _advance(self, now_ms: int) -> None:
        assert now_ms >= self.now_ms, f"time went back: {now_ms} < {self.now_ms}"
        self.now_ms = now_ms
        if self._retention is None:
            self._retention = self._arm(Timer.RETENTION, None, None, self.config.offsets_retention_check_interval_ms)

    def _flush(self) -> Ready:
        self._check_invariants()
        return self.out.flush(self.next_deadline_ms)

    def _touch(self, group: Group) -> None:
        self._touched[id(group)] = group

    # -------------------------------------------------------------- timers

    def _arm(self, kind: Timer, group: Group | None, member: Member | None, delay_ms: int) -> Deadline:
        """A new deadline; the caller stores it on its holder (re-arming replaces the old one,
        whose heap entry goes stale and is dropped when it surfaces or at compaction)."""
        assert delay_ms >= 0
        if len(self._timers) >= TIMERS_COMPACT_AT_MIN and len(self._timers) >= 2 * self._timers_live:
            self._compact_timers()
        deadline = Deadline(self.now_ms + delay_ms)
        self._timer_seq += 1
        heapq.heappush(self._timers, _Timer(deadline.at_ms, self._timer_seq, kind, group, member, deadline))
        return deadline

    def _compact_timers(self) -> None:
        """Every heartbeat re-arms a session deadline: without this, stale entries would pile
        up for a whole session timeout. Keeps the heap within about twice the live ones."""
        self._timers = [t for t in self._timers if self._is_current(t)]
        heapq.heapify(self._timers)
        self._timers_live = len(self._timers)

    def _is_current(self, t: _Timer) -> bool:
        """Does the timer's holder still hold this very deadline?"""
        if t.kind is Timer.RETENTION:
            return self._retention is t.deadline
        group = t.group
        assert group is not None
        if self.groups.get(group.group_id) is not group:
            return False
        if t.kind is Timer.HEARTBEAT:
            member = t.member
            assert member is not None
            return group.members.get(member.member_id) is member and member.heartbeat is t.deadline
        if t.kind is Timer.PENDING_MEMBER:
            return any(d is t.deadline for d in group.pending_members.values())
        if t.kind is Timer.JOIN:
            return group.join is not None and group.join.deadline is t.deadline
        assert t.kind is Timer.SYNC, t.kind
        return group.sync is not None and group.sync.deadline is t.deadline

    def _fire(self, t: _Timer) -> None:
        if t.kind is Timer.RETENTION:
            self._retention = self._arm(Timer.RETENTION, None, None, self.config.offsets_retention_check_interval_ms)
            self._expire_offsets()
            return
        group = t.group
        assert group is not None
        self._touch(group)
        if t.kind is Timer.HEARTBEAT:
            assert t.member is not None
            self._on_heartbeat_deadline(group, t.member)
        elif t.kind is Timer.PENDING_MEMBER:
            member_id = next(m for m, d in group.pending_members.items() if d is t.deadline)
            self._on_pending_member_deadline(group, member_id)
        elif t.kind is Timer.JOIN:
            self._on_join_deadline(group)
        else:
            self._on_sync_deadline(group)

    # -------------------------------------------------------------- ownership

    def _validate(self, group_id: str, *, empty_id_allowed: bool = False) -> ErrorCode:
        """Kafka's validateGroupStatus: a legal group id, led here, and loaded. OffsetCommit,
        OffsetFetch, DescribeGroups and DeleteGroups allow the empty group id (old clients
        commit with it), the rest do not (isValidGroupId)."""
        if group_id == "" and not empty_id_allowed:
            return E.INVALID_GROUP_ID
        partition = self.partitions.get(self.partition_for(group_id))
        if partition is None:
            return E.NOT_COORDINATOR
        if partition.load is not None:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.offsets_topic_partitions)

    def is_loading(self) -> bool:
        return any(p.load is not None for p in self.partitions.values())

    def _owner_epoch(self, group_id: str) -> tuple[int, int]:
        partition = self.partition_for(group_id)
        owned = self.partitions[partition]
        assert owned.load is None, f"writing for group {group_id!r} while partition {partition} loads"
        return partition, owned.leader_epoch

    def _new_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        """Kafka's `<client id or instance id>-<uuid>`, the prefix cut so that the id fits
        the int16-length strings of the wire and of the group's record: a client id may
        itself be that long, and an id that cannot be written would keep the member's
        group from ever forming (its JoinGroup answers and records could not be encoded)."""
        prefix = client_id if group_instance_id is None else group_instance_id
        suffix = f"-{self._new_member_uuid()}"
        room = MEMBER_ID_BYTES_MAX - len(suffix.encode())
        assert room > 0, suffix
        return prefix.encode()[:room].decode(errors="ignore") + suffix

    def _create_group(self, group_id: str) -> Group:
        assert group_id not in self.groups
        group = Group(group_id, S.EMPTY, self.now_ms)
        self.groups[group_id] = group
        return group

    def _remove_group(self, group: Group) -> None:
        assert self.groups.get(group.group_id) is group
        del self.groups[group.group_id]

    def _became_leader(self, event: BecameLeader) -> None:
        p, epoch = event.partition, event.leader_epoch
        assert 0 <= p < self.offsets_topic_partitions, p
        if epoch < self.epochs.get(p, -1):
            self.out.note("info", f"offsets partition {p}: leader epoch {epoch} is stale (at {self.epochs[p]})")
            return
        self.epochs[p] = epoch
        current = self.partitions.get(p)
        if current is not None and current.load is None:
            current.leader_epoch = epoch  # still the leader, with what it has loaded
            return
        if current is not None and current.leader_epoch == epoch:
            return  # already loading in this epoch
        self.partitions[p] = _Partition(epoch, _Load())  # (a load of an older epoch starts again)
        self.out.note("info", f"offsets partition {p}: leader in epoch {epoch}, loading")
        self.out.load(p, epoch)

    def _became_follower(self, event: BecameFollower) -> None:
        p, epoch = event.partition, event.leader_epoch
        if epoch is not None:
            if epoch < self.epochs.get(p, -1):
                self.out.note("info", f"offsets partition {p}: follower epoch {epoch} is stale (at {self.epochs[p]})")
                return
            self.epochs[p] = epoch
        if self.partitions.pop(p, None) is None:
            return
        unloaded = [g for g in self.groups.values() if self.partition_for(g.group_id) == p]
        for group in unloaded:
            self._on_group_unloaded(group)
            self._remove_group(group)
        for pending in self.out.pending_of_partition(p):
            self.out.take_pending(pending.append_id)
            self._dispatch_append_outcome(pending, E.NOT_COORDINATOR, None)
        self.out.note("info", f"offsets partition {p}: unloaded {len(unloaded)} groups")

    def _records_loaded(self, event: RecordsLoaded) -> None:
        partition = self.partitions.get(event.partition)
        if partition is None or partition.load is None or partition.leader_epoch != event.leader_epoch:
            return  # a load overtaken by a leadership change
        load = partition.load
        for record in event.records:
            try:
                decoded = decode_record(record.key, record.value)
            except OffsetsRecordError as e:
                load.skipped += 1
                self.out.note("warning", f"offsets partition {event.partition} offset {record.offset}: skipped ({e})")
                continue
            self._replay(load, decoded, record.offset)
        if event.done:
            partition.load = None
            self._materialize(event.partition, load)

    def _replay(self, load: _Load, record: OffsetsRecord, offset: int) -> None:
        key, value = record.key, record.value
        if isinstance(key, OffsetCommitKey):
            gtp = (key.group, (key.topic, key.partition))
            if value is None:
                load.offsets.pop(gtp, None)
            else:
                assert isinstance(value, OffsetCommitValue)
                load.offsets[gtp] = CommittedOffset(
                    value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                    None if value.expire_timestamp_ms == NO_TIMESTAMP else value.expire_timestamp_ms, offset)
        elif value is None:
            load.groups.pop(key.group, None)
            load.removed.add(key.group)
        else:
            assert isinstance(value, GroupMetadataValue)
            load.groups[key.group] = value
            load.removed.discard(key.group)

    def _materialize(self, p: int, load: _Load) -> None:
        """The partition is read: its groups (and groups that only have offsets) come alive."""
        offsets_by_group: dict[str, dict[TP, CommittedOffset]] = {}
        for (group_id, tp), committed in load.offsets.items():
            offsets_by_group.setdefault(group_id, {})[tp] = committed
        loaded = 0
        for group_id in dict.fromkeys([*load.groups, *offsets_by_group]):
            if self.partition_for(group_id) != p:
                self.out.note("warning", f"offsets partition {p}: group {group_id!r} belongs to partition "
                                         f"{self.partition_for(group_id)}, skipped")
                continue
            assert group_id not in self.groups, f"group {group_id!r} existed before its partition loaded"
            value = load.groups.get(group_id)
            group = self._group_from_value(group_id, value) if value is not None else Group(group_id, S.EMPTY, None)
            group.offsets = offsets_by_group.get(group_id, {})
            self.groups[group_id] = group
            self._on_group_loaded(group)
            loaded += 1
        self.out.note("info", f"offsets partition {p}: loaded {loaded} groups" +
                      (f", skipped {load.skipped} unreadable records" if load.skipped else ""))

    def _group_from_value(self, group_id: str, value: GroupMetadataValue) -> Group:
        """GroupMetadata.loadGroup: Stable with its members, or Empty. Records contradicting
        themselves are repaired with a note rather than trusted."""
        members = list({m.member_id: m for m in value.members}.values())
        if members and value.protocol is None:
            self.out.note("warning", f"group {group_id!r}: members but no protocol in its record; loaded Empty")
            members = []
        group = Group(group_id, S.STABLE if members else S.EMPTY, None if value.current_state_timestamp_ms == NO_TIMESTAMP
                      else value.current_state_timestamp_ms)
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol if members else None
        for m in members:
            assert value.protocol is not None
            group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                             m.session_timeout_ms, value.protocol_type, ((value.protocol, m.subscription),), m.assignment))
        if members and value.leader in group.members:
            group.leader_id = value.leader
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    # -------------------------------------------------------------- writing

    def _write_group(self, group: Group, assignment: dict[str, bytes],
                     what: StoreAssignment | StoreEmptyGroup | StoreStaticMember) -> None:
        """GroupMetadataManager.storeGroup: the group's record for this generation."""
        members = []
        for m in group.members.values():
            assert group.protocol_name is not None
            members.append(MemberMetadataValue(m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                                               m.rebalance_timeout_ms, m.metadata(group.protocol_name),
                                               assignment[m.member_id], m.group_instance_id))
        value = GroupMetadataValue(group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
                                   tuple(members), NO_TIMESTAMP if group.state_timestamp_ms is None else group.state_timestamp_ms)
        partition, epoch = self._owner_epoch(group.group_id)
        self.out.append(partition, epoch, [OffsetsRecord(GroupMetadataKey(group.group_id), value)], what, self.now_ms)

    def _append_ended(self, append_id: int, error: ErrorCode, base_offset: int | None) -> None:
        pending = self.out.take_pending(append_id)
        if pending is None:
            self.out.note("info", f"outcome of append {append_id} ignored (its partition was unloaded)")
            return
        self._dispatch_append_outcome(pending, error, base_offset)

    def _dispatch_append_outcome(self, pending: PendingAppend, error: ErrorCode, base_offset: int | None) -> None:
        what = pending.what
        if isinstance(what, StoreAssignment):
            self._on_assignment_stored(what, error)
        elif isinstance(what, StoreStaticMember):
            self._on_static_member_stored(what, error)
        elif isinstance(what, StoreEmptyGroup):
            if error is not E.NONE:
                # Safe to lose: a reload sees the previous generation, whose members time out.
                self.out.note("warning", f"group {what.group.group_id}: empty generation {what.generation_id} "
                                         f"not written ({error.name})")
        elif isinstance(what, StoreOffsets):
            self._on_offsets_stored(what, error, base_offset)
        else:
            self._on_tombstones_written(pending.append_id, what, error)

    # -------------------------------------------------------------- ListGroups / DescribeGroups

    def _list_groups(self, req: ListGroupsRequest) -> None:
        error = E.COORDINATOR_LOAD_IN_PROGRESS if self.is_loading() else E.NONE
        self.out.answer(req.reply_to, ListGroupsResponse(error, tuple(
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value) for g in self.groups.values())))

    def _describe_groups(self, req: DescribeGroupsRequest) -> None:
        described = []
        for group_id in req.group_ids:
            error = self._validate(group_id, empty_id_allowed=True)
            group = self.groups.get(group_id)
            if error is not E.NONE:
                described.append(DescribedGroup(group_id, error, ""))
            elif group is None:
                described.append(DescribedGroup(group_id, E.NONE, S.DEAD.value))
            else:
                described.append(self._summary(group))
        self.out.answer(req.reply_to, DescribeGroupsResponse(tuple(described)))

    def _summary(self, group: Group) -> DescribedGroup:
        stable = group.is_(S.STABLE)
        protocol = group.protocol_name if stable else None
        members = tuple(DescribedMember(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.metadata(protocol) if protocol is not None else b"", m.assignment if stable else b"")
            for m in group.members.values())
        return DescribedGroup(group.group_id, E.NONE, group.state.value, group.protocol_type or "", protocol or "", members)

    # -------------------------------------------------------------- invariants

    def _check_invariants(self) -> None:
        touched, self._touched = self._touched, {}
        for group in touched.values():
            if self.groups.get(group.group_id) is group:
                assert group.state is not S.DEAD, f"group {group.group_id!r} is Dead but still served"
                p = self.partitions.get(self.partition_for(group.group_id))
                assert p is not None, f"group {group.group_id!r} served without its partition"
                assert p.load is None, f"group {group.group_id!r} served while its partition loads"
            group.check_invariants()
        for p, partition in self.partitions.items():
            assert partition.leader_epoch == self.epochs[p]

