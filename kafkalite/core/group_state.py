"""One consumer group's state: members, generation, leader, protocol, offsets (Kafka's
GroupMetadata and MemberMetadata, kafka/coordinator/group/*.scala in 2.8).

Plain data with the operations that keep it consistent and `check_invariants`; the
decisions (who joins, when a rebalance completes, what is written) are the coordinator's
(kafkalite.core.group_coordinator, group_rebalance). Parked requests are reply tokens on the
member (`awaiting_join`, `awaiting_sync`): Kafka's callbacks.

States and their legal predecessors (GroupState.scala's validPreviousStates):

| to | from |
|---|---|
| PreparingRebalance | Stable, CompletingRebalance, Empty |
| CompletingRebalance | PreparingRebalance |
| Stable | CompletingRebalance |
| Empty | PreparingRebalance |
| Dead | any |
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kafkalite.core.codes import IllegalTransitionError
from kafkalite.core.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics

TP = tuple[str, int]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
GROUP_TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.DEAD: frozenset(GroupState),
}


class Timer(enum.Enum):
    """What a deadline is for (Kafka's delayed operations, and the periodic offset expiry)."""

    HEARTBEAT = "heartbeat"  # DelayedHeartbeat: a member's session (or new-member join) timeout
    PENDING_MEMBER = "pending member"  # DelayedHeartbeat(isPending): KIP-394 id given, JoinGroup awaited
    JOIN = "join"  # DelayedJoin / InitialDelayedJoin
    SYNC = "sync"  # DelayedSync
    RETENTION = "retention"  # offsets.retention.check.interval.ms


@dataclass(frozen=True, eq=False)
class Deadline:
    """An armed timer. The object is the identity: a timer fires only while the holder still
    holds this very Deadline (re-arming replaces it, disarming drops it)."""

    at_ms: int


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None  # OffsetCommit v2-v4 retention (value v1)
    record_offset: int = -1  # where its record is in the offsets partition: later wins


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: Any = None  # the reply token of a parked JoinGroup
    awaiting_sync: Any = None  # the reply token of a parked SyncGroup
    is_new: bool = False  # joined in this rebalance and has not yet had a JoinGroup answer
    heartbeat: Deadline | None = None  # Kafka's DelayedHeartbeat for this member

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise AssertionError(f"member {self.member_id} does not support protocol {protocol!r}")

    def has_satisfied_heartbeat(self) -> bool:
        """When its heartbeat deadline passes, does the member stay? A new member must have
        been answered by then; a member waiting in a JoinGroup or SyncGroup is alive (its
        socket is held); any other must have heartbeated, which re-arms the deadline."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return tuple(protocols) == tuple(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass
class DelayedJoin:
    """The pending completion of PreparingRebalance (DelayedJoin / InitialDelayedJoin).
    An initial one (the group was Empty) completes only at its deadline, and then, if new
    members joined meanwhile and `remaining_ms` is left, waits again (KIP-134's
    group.initial.rebalance.delay.ms); a plain one completes as soon as every member
    rejoined, or at its deadline (the rebalance timeout)."""

    deadline: Deadline
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


@dataclass
class DelayedSync:
    """After a generation starts, every member must SyncGroup within the rebalance timeout
    (Kafka's DelayedSync, KAFKA-13042); those that did not are removed and the group
    rebalances."""

    deadline: Deadline
    generation_id: int


class Group:
    def __init__(self, group_id: str, state: GroupState, now_ms: int | None) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp_ms: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # insertion order: the next leader is the oldest member
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, Deadline] = {}  # KIP-394: member id given, JoinGroup awaited
        self.pending_sync: set[str] = set()  # members of this generation that have not synced
        self.new_member_added = False
        self.join: DelayedJoin | None = None
        self.sync: DelayedSync | None = None
        self.subscribed_topics: frozenset[str] | None = None
        self.offsets: dict[TP, CommittedOffset] = {}
        self.pending_offset_commits: Counter[TP] = Counter()  # appends in flight per partition
        self.pending_static_store = 0  # static member replacements waiting for their record

    # -------------------------------------------------------------- reading

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    @property
    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members, never below 0: a JoinGroup may
        carry a negative one (Kafka validates only the session timeout), kept as sent and
        written to the group's record, and Kafka's delayed operations then simply expire at
        once; a negative deadline here would be a programmer error."""
        return max(0, max((m.rebalance_timeout_ms for m in self.members.values()), default=0))

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members and member_id not in self.members

    def has_static_member(self, instance_id: str | None) -> bool:
        return instance_id is not None and instance_id in self.static_members

    def static_member_id(self, instance_id: str) -> str:
        return self.static_members[instance_id]

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """KIP-345: a known group.instance.id with another member id is a stale incarnation."""
        return instance_id is not None and instance_id in self.static_members and self.static_members[instance_id] != member_id

    def can_rebalance(self) -> bool:
        return self.state in GROUP_TRANSITIONS[S.PREPARING_REBALANCE]

    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def _protocol_counts(self) -> Counter[str]:
        return Counter(name for m in self.members.values() for name in {n for n, _ in m.protocols})

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        return {name for name, n in self._protocol_counts().items() if n == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        """Can a member with these protocols join? Into an Empty group, any non-empty set of
        a non-empty type; else the group's type and one protocol all members support."""
        if self.is_(S.EMPTY):
            return protocol_type != "" and bool(protocols)
        counts = self._protocol_counts()
        return self.protocol_type == protocol_type and any(counts[p] == len(self.members) for p in protocols)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support; the
        most votes wins (ties: the protocol first voted for)."""
        assert self.members, "cannot select a protocol for an empty group"
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda name: votes[name])  # max keeps the first of equals

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if not self.is_consumer_group():
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            member_topics = subscribed_topics(m.metadata(self.protocol_name))
            if member_topics is None:
                return None
            topics |= member_topics
        return frozenset(topics)

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_offset_commits)

    # -------------------------------------------------------------- membership changes

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in GROUP_TRANSITIONS[state]:
            raise IllegalTransitionError(f"group {self.group_id!r}", self.state, state)
        self.state = state
        self.state_timestamp_ms = now_ms

    def add(self, member: Member, join_reply: Any = None) -> None:
        assert member.member_id not in self.members, member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        assert self.supports_protocols(member.protocol_type, {n for n, _ in member.protocols})
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.awaiting_join = join_reply
        if member.is_static:
            assert member.group_instance_id is not None
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        """Drop a member (its parked requests are the caller's to answer first)."""
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync.discard(member_id)
        return member

    def update_member(self, member: Member, protocols: tuple[tuple[str, bytes], ...], join_reply: Any) -> None:
        member.protocols = tuple(protocols)
        member.awaiting_join = join_reply

    def replace_static_member(self, old_member_id: str, new_member_id: str) -> Member:
        """KIP-345: a static member came back with a new member id; it keeps its place (and
        leadership). The caller answers the old incarnation's parked requests first."""
        member = self.members.pop(old_member_id)
        assert member.group_instance_id is not None
        assert not member.is_awaiting_join
        assert not member.is_awaiting_sync
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        self.static_members[member.group_instance_id] = new_member_id
        return member

    def maybe_elect_new_joined_leader(self) -> bool:
        """The leader must be among those that rejoined; else any member that did. False
        when the group has no leader or nobody rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        before = self.generation_id
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(S.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(S.EMPTY, now_ms)
        self.pending_sync.clear()
        assert self.generation_id == before + 1

    def current_member_metadata(self) -> list[tuple[Member, bytes]]:
        assert self.state not in (S.DEAD, S.PREPARING_REBALANCE), self.state
        assert self.protocol_name is not None
        return [(m, m.metadata(self.protocol_name)) for m in self.members.values()]

    # -------------------------------------------------------------- offsets

    def prepare_offset_commit(self, partitions: list[TP]) -> None:
        self.pending_offset_commits.update(partitions)

    def on_offset_commit_append(self, tp: TP, committed: CommittedOffset) -> None:
        """The commit's record is in the log: it becomes the offset unless a later record
        already did, or the offset was deleted while the append was in flight."""
        if self.pending_offset_commits.get(tp, 0) == 0:
            return
        self.fail_pending_offset_write(tp)
        current = self.offsets.get(tp)
        if current is None or current.record_offset < committed.record_offset:
            self.offsets[tp] = committed

    def fail_pending_offset_write(self, tp: TP) -> None:
        """One append in flight for `tp` ended (failed, or done: see on_offset_commit_append).
        Nothing to do if the offset was deleted meanwhile."""
        count = self.pending_offset_commits.get(tp, 0)
        if count > 1:
            self.pending_offset_commits[tp] = count - 1
        elif count == 1:
            del self.pending_offset_commits[tp]

    def remove_offsets(self, partitions: list[TP]) -> list[TP]:
        """Forget these offsets, and commits of them in flight (whose outcome then changes
        nothing). Returns those that need a tombstone: committed, or possibly about to be
        (a commit in flight is in the log before a tombstone appended after it)."""
        removed = []
        for tp in dict.fromkeys(partitions):
            in_flight = self.pending_offset_commits.pop(tp, None) is not None
            if self.offsets.pop(tp, None) is not None or in_flight:
                removed.append(tp)
        return removed

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict[TP, CommittedOffset]:
        """Offsets past retention (GroupMetadata.removeExpiredOffsets, KIP-211): of an Empty
        group, counted from when it became Empty; of a Stable consumer group, only offsets
        of topics it no longer subscribes to, from their commit; of a group that only stores
        offsets (no protocol type), from their commit. Never one with a commit in flight."""
        base: Any
        keep_topics: frozenset[str] = frozenset()
        if self.protocol_type is not None and self.is_(S.EMPTY):
            base = self.state_timestamp_ms
        elif self.is_consumer_group() and self.subscribed_topics is not None and self.is_(S.STABLE):
            base, keep_topics = None, self.subscribed_topics
        elif self.protocol_type is None:
            base = None
        else:
            return {}
        expired = {}
        for tp, committed in self.offsets.items():
            if tp[0] in keep_topics or tp in self.pending_offset_commits:
                continue
            if committed.expire_timestamp_ms is not None:
                gone = now_ms >= committed.expire_timestamp_ms
            else:
                since = committed.commit_timestamp_ms if base is None else base
                gone = now_ms - since >= retention_ms
            if gone:
                expired[tp] = committed
        for tp in expired:
            del self.offsets[tp]
        return expired

    # -------------------------------------------------------------- invariants

    def check_invariants(self) -> None:
        """What must hold between events (STYLE habit 6)."""
        members = self.members
        if self.state is S.EMPTY:
            assert not members, f"{self.group_id}: Empty with members"
        if self.state in (S.COMPLETING_REBALANCE, S.STABLE):
            assert members, f"{self.group_id}: {self.state.value} without members"
            assert self.protocol_name is not None, f"{self.group_id}: no protocol in {self.state.value}"
        if members:
            assert self.leader_id in members, f"{self.group_id}: leader {self.leader_id!r} is not a member"
            assert self.protocol_type is not None
        else:
            assert self.leader_id is None, f"{self.group_id}: leader without members"
        for member_id, m in members.items():
            assert m.member_id == member_id
            assert m.protocol_type == self.protocol_type
            if self.protocol_name is not None and self.state in (S.COMPLETING_REBALANCE, S.STABLE):
                assert any(n == self.protocol_name for n, _ in m.protocols), f"{member_id} lacks {self.protocol_name}"
            if m.is_awaiting_join:
                assert self.state is S.PREPARING_REBALANCE or (self.state is S.STABLE and self.pending_static_store), \
                    f"{member_id} waits in JoinGroup in {self.state.value}"
            if m.is_awaiting_sync:
                assert self.state is S.COMPLETING_REBALANCE, f"{member_id} waits in SyncGroup in {self.state.value}"
            if self.state is not S.DEAD:
                # Liveness: a member is either timed (its session) or held by a parked request.
                assert m.heartbeat is not None or m.is_awaiting_join or m.is_awaiting_sync, f"{member_id} can never expire"
            if m.is_static:
                assert self.static_members.get(m.group_instance_id) == member_id  # type: ignore[arg-type]
        for instance_id, member_id in self.static_members.items():
            assert member_id in members, f"static {instance_id} -> {member_id} is not a member"
            assert members[member_id].group_instance_id == instance_id
        assert not (set(self.pending_members) & set(members)), "a pending member is already a member"
        assert self.pending_sync <= set(members), "a member pending sync is not a member"
        if self.pending_sync:
            assert self.state in (S.COMPLETING_REBALANCE, S.STABLE)
        if self.join is not None:
            assert self.state is S.PREPARING_REBALANCE, f"{self.group_id}: a join completion in {self.state.value}"
        if self.state is S.PREPARING_REBALANCE:
            assert self.join is not None, f"{self.group_id}: PreparingRebalance without a join completion"
        if self.sync is not None:
            assert self.sync.generation_id == self.generation_id
            assert self.state in (S.COMPLETING_REBALANCE, S.STABLE)
        assert self.generation_id >= 0
        assert all(n > 0 for n in self.pending_offset_commits.values())
        assert self.pending_static_store >= 0
