"""Group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the delayed completions
that drive rebalances (Kafka 2.8's GroupCoordinator with DelayedJoin, InitialDelayedJoin,
DelayedSync and DelayedHeartbeat; KIP-134 initial rebalance delay, KIP-345 static
membership, KIP-394 member id required, KIP-389 group.max.size).

`Rebalancing` is the half of GroupCoordinator that owns the membership protocol; the other
half (kafkalite.core.group_coordinator) owns partitions, loading, offsets and the group
admin APIs, and provides what this half declares at the top. The delayed operations are
deadlines on the group and its members, fired by `GroupCoordinator.poll(now_ms)`; their
"try complete" checks run at the points Kafka's purgatory checks them.

Two deliberate differences from Kafka, both so that every request is answered exactly once:
- a JoinGroup or SyncGroup that replaces a parked one of the same member (a client retry)
  answers the parked one REBALANCE_IN_PROGRESS (Kafka drops it unanswered);
- a member removed while it waits in SyncGroup gets UNKNOWN_MEMBER_ID (Kafka drops it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_appends import Outbox, StoreAssignment, StoreEmptyGroup, StoreStaticMember, group_append_error
from kafkalite.core.group_messages import (
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafkalite.core.group_state import Deadline, DelayedJoin, DelayedSync, Group, GroupState, Member, Timer

S = GroupState
E = ErrorCode


class Rebalancing:
    # Provided by GroupCoordinator.
    out: Outbox
    now_ms: int
    groups: dict[str, Group]
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    group_initial_rebalance_delay_ms: int
    new_member_join_timeout_ms: int

    if TYPE_CHECKING:  # provided by GroupCoordinator (absent at run time, so nothing is shadowed)
        def _arm(self, kind: Timer, group: Group, member: Member | None, delay_ms: int) -> Deadline:
            ...

        def _validate(self, group_id: str, *, empty_id_allowed: bool = False) -> ErrorCode:
            ...

        def _new_member_id(self, client_id: str, group_instance_id: str | None) -> str:
            ...

        def _create_group(self, group_id: str) -> Group:
            ...

        def _write_group(self, group: Group, assignment: dict[str, bytes],
                         what: StoreAssignment | StoreEmptyGroup | StoreStaticMember) -> None:
            ...

        def _touch(self, group: Group) -> None:
            ...

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration: the member showed life; it
        must do so again within its session timeout (or `timeout_ms`)."""
        member.heartbeat = self._arm(Timer.HEARTBEAT, group, member, member.session_timeout_ms if timeout_ms is None else timeout_ms)

    # -------------------------------------------------------------- JoinGroup

    def _join_group(self, req: JoinGroupRequest) -> None:
        error = self._validate(req.group_id)
        if error is not E.NONE:
            return self._join_error(req.reply_to, req.member_id, error)
        if not self.group_min_session_timeout_ms <= req.session_timeout_ms <= self.group_max_session_timeout_ms:
            return self._join_error(req.reply_to, req.member_id, E.INVALID_SESSION_TIMEOUT)
        is_unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(req.group_id)
        if group is None:
            if not is_unknown:  # a member id, but no group: it belonged to one that is gone
                return self._join_error(req.reply_to, req.member_id, E.UNKNOWN_MEMBER_ID)
            group = self._create_group(req.group_id)
        self._touch(group)
        if not self._accept_joining_member(group, req.member_id):
            if group.has(req.member_id):  # over a lowered limit: the last to rejoin goes
                self._remove_member(group, group.get(req.member_id), E.GROUP_MAX_SIZE_REACHED)
            self._join_error(req.reply_to, UNKNOWN_MEMBER_ID, E.GROUP_MAX_SIZE_REACHED)
        elif is_unknown:
            self._unknown_member_join(group, req)
        else:
            self._known_member_join(group, req)
        if group.is_(S.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _join_error(self, reply_to: Any, member_id: str, error: ErrorCode) -> None:
        self.out.answer(reply_to, JoinGroupResponse(error, member_id))

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        """group.max.size (KIP-389): while preparing a rebalance, count the members that
        already rejoined (the group may be over a lowered limit; the last to rejoin are
        refused); otherwise existing members are always accepted."""
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.is_(S.PREPARING_REBALANCE):
            if group.has(member_id) and group.get(member_id).is_awaiting_join:
                return True
            return group.num_awaiting_join < self.group_max_size
        return group.has(member_id) or group.size < self.group_max_size

    def _unknown_member_join(self, group: Group, req: JoinGroupRequest) -> None:
        if group.is_(S.DEAD):
            return self._join_error(req.reply_to, UNKNOWN_MEMBER_ID, E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            return self._join_error(req.reply_to, UNKNOWN_MEMBER_ID, E.INCONSISTENT_GROUP_PROTOCOL)
        new_member_id = self._new_member_id(req.client_id, req.group_instance_id)
        assert not group.has(new_member_id) and new_member_id not in group.pending_members, "member ids are unique"
        if group.has_static_member(req.group_instance_id):
            self._update_static_member_and_rebalance(group, new_member_id, req)
        elif req.require_known_member_id and req.group_instance_id is None:
            # KIP-394: remember the id, answer with it; the member joins again with it.
            group.pending_members[new_member_id] = self._arm(Timer.PENDING_MEMBER, group, None, req.session_timeout_ms)
            self._join_error(req.reply_to, new_member_id, E.MEMBER_ID_REQUIRED)
        else:
            self._add_member_and_rebalance(group, new_member_id, req)

    def _known_member_join(self, group: Group, req: JoinGroupRequest) -> None:
        member_id = req.member_id
        if group.is_(S.DEAD):
            return self._join_error(req.reply_to, member_id, E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            return self._join_error(req.reply_to, member_id, E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_pending_member(member_id) and req.group_instance_id is None:
            return self._add_member_and_rebalance(group, member_id, req)
        if group.is_static_member_fenced(member_id, req.group_instance_id):
            return self._join_error(req.reply_to, member_id, E.FENCED_INSTANCE_ID)
        instance_unknown = req.group_instance_id is not None and not group.has_static_member(req.group_instance_id)
        if not group.has(member_id) or instance_unknown:
            return self._join_error(req.reply_to, member_id, E.UNKNOWN_MEMBER_ID)
        member = group.get(member_id)
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req)
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # It lost our JoinGroup answer: send this generation's again.
                self._answer_join(group, member, req.reply_to)
            else:
                self._update_member_and_rebalance(group, member, req)
        elif group.is_(S.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # The leader rejoins to make the group rebalance (e.g. its topics changed).
                self._update_member_and_rebalance(group, member, req)
            else:
                self._answer_join(group, member, req.reply_to, with_members=False)
        else:
            self._join_error(req.reply_to, member_id, E.UNKNOWN_MEMBER_ID)

    def _answer_join(self, group: Group, member: Member, reply_to: Any, *, with_members: bool = True) -> None:
        members = ()
        if with_members and group.is_leader(member.member_id):
            members = tuple(JoinGroupMember(m.member_id, m.group_instance_id, meta) for m, meta in group.current_member_metadata())
        self.out.answer(reply_to, JoinGroupResponse(
            E.NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id or "", members))

    def _add_member_and_rebalance(self, group: Group, member_id: str, req: JoinGroupRequest) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, tuple(req.protocols), is_new=True)
        if group.is_(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # lets the initial delay wait for more (KIP-134)
        group.add(member, req.reply_to)
        # A new member cannot heartbeat before it has a generation, and its JoinGroup may be
        # a retry of one the client gave up on: it is removed if the rebalance takes longer.
        self._schedule_heartbeat(group, member, self.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")

    def _update_member_and_rebalance(self, group: Group, member: Member, req: JoinGroupRequest) -> None:
        self._supersede_join(member)
        group.update_member(member, req.protocols, req.reply_to)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _supersede_join(self, member: Member) -> None:
        if member.is_awaiting_join:
            self.out.answer(member.awaiting_join, JoinGroupResponse(E.REBALANCE_IN_PROGRESS, member.member_id))
            member.awaiting_join = None

    def _update_static_member_and_rebalance(self, group: Group, new_member_id: str, req: JoinGroupRequest) -> None:
        """KIP-345: a known group.instance.id joins without a member id (a restarted static
        member). The old incarnation is fenced; the member keeps its place and assignment."""
        assert req.group_instance_id is not None
        old_member_id = group.static_member_id(req.group_instance_id)
        leader_before = group.leader_id
        member = group.get(old_member_id)
        if member.is_awaiting_join:
            self.out.answer(member.awaiting_join, JoinGroupResponse(E.FENCED_INSTANCE_ID, old_member_id))
            member.awaiting_join = None
        if member.is_awaiting_sync:
            self.out.answer(member.awaiting_sync, SyncGroupResponse(E.FENCED_INSTANCE_ID))
            member.awaiting_sync = None
        group.replace_static_member(old_member_id, new_member_id)
        self._schedule_heartbeat(group, member)
        old_protocols = member.protocols
        group.update_member(member, req.protocols, req.reply_to)
        if group.is_(S.STABLE):
            if group.select_protocol() == group.protocol_name:
                # Nothing the leader would assign differently: persist the new member id,
                # then answer; no rebalance (the point of static membership).
                group.pending_static_store += 1
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                self._write_group(group, assignment, StoreStaticMember(
                    group, member, old_member_id, old_protocols, leader_before, req.reply_to))
            else:
                self._maybe_prepare_rebalance(group, f"static member {req.group_instance_id} changed the group's protocol")
        elif group.is_(S.COMPLETING_REBALANCE):
            # The leader may have assigned to the old member id: assign again.
            self._prepare_rebalance(group, f"static member {req.group_instance_id} rejoined while completing")
        else:
            assert group.is_(S.PREPARING_REBALANCE), group.state

    def _on_static_member_stored(self, what: StoreStaticMember, error: ErrorCode) -> None:
        group, member = what.group, what.member
        group.pending_static_store -= 1
        if group.is_(S.DEAD) or group.members.get(member.member_id) is not member or member.awaiting_join is not what.reply_to:
            return  # unloaded, removed or already answered by a rebalance since
        self._touch(group)
        if error is E.NONE:
            member.awaiting_join = None
            # Its session timer may have passed unheeded while it waited: start a new one.
            self._schedule_heartbeat(group, member)
            self.out.answer(what.reply_to, JoinGroupResponse(
                E.NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                # The old leader id, so that the current leader does not assign (a Stable
                # group would not pass its assignment on).
                what.leader_before or ""))
            return
        # Not persisted: back to the old member id, and the new incarnation is told why.
        self.out.note("warning", f"group {group.group_id}: static member {member.group_instance_id} not persisted ({error.name})")
        group.update_member(member, what.old_protocols, None)
        group.replace_static_member(member.member_id, what.old_member_id)
        self._schedule_heartbeat(group, member)
        self.out.answer(what.reply_to, JoinGroupResponse(
            group_append_error(error), UNKNOWN_MEMBER_ID, group.generation_id, group.protocol_type,
            group.protocol_name, what.leader_before or ""))

    # -------------------------------------------------------------- rebalance

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        group.sync = None
        rebalance_timeout_ms = group.rebalance_timeout_ms
        if group.is_(S.EMPTY):
            delay_ms = self.group_initial_rebalance_delay_ms
            group.join = DelayedJoin(self._arm(Timer.JOIN, group, None, delay_ms), initial=True, delay_ms=delay_ms,
                                     remaining_ms=max(rebalance_timeout_ms - delay_ms, 0))
        else:
            group.join = DelayedJoin(self._arm(Timer.JOIN, group, None, rebalance_timeout_ms), initial=False)
        group.transition_to(S.PREPARING_REBALANCE, self.now_ms)
        self.out.note("info", f"group {group.group_id}: preparing to rebalance, generation {group.generation_id} ({reason})")
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        """DelayedJoin.tryComplete: every member rejoined and no KIP-394 member is pending.
        The initial delay completes only at its deadline."""
        join = group.join
        if join is not None and not join.initial and group.has_all_members_joined():
            self._complete_join(group)

    def _on_join_deadline(self, group: Group) -> None:
        join = group.join
        assert join is not None
        if join.initial and group.new_member_added and join.remaining_ms != 0:
            # KIP-134: someone joined during the delay; wait again, within the rebalance timeout.
            group.new_member_added = False
            delay_ms = min(self.group_initial_rebalance_delay_ms, join.remaining_ms)
            remaining_ms = max(join.remaining_ms - join.delay_ms, 0)
            group.join = DelayedJoin(self._arm(Timer.JOIN, group, None, delay_ms), initial=True, delay_ms=delay_ms, remaining_ms=remaining_ms)
            return
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """DelayedJoin.onComplete: dynamic members that did not rejoin are out; the next
        generation starts and every member that rejoined gets its JoinGroup answer."""
        group.join = None
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._remove_member(group, member, E.UNKNOWN_MEMBER_ID)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait for them (or their
            # session timeouts) for another rebalance timeout.
            group.join = DelayedJoin(self._arm(Timer.JOIN, group, None, self._static_rejoin_wait_ms(group)),
                                     initial=False)
            self._maybe_complete_join(group)
            return
        group.new_member_added = False
        group.init_next_generation(self.now_ms)
        if group.is_(S.EMPTY):
            self.out.note("info", f"group {group.group_id}: generation {group.generation_id} is empty")
            self._write_group(group, {}, StoreEmptyGroup(group, group.generation_id))
            return
        self.out.note("info", f"group {group.group_id}: generation {group.generation_id} with {group.size} members, "
                              f"protocol {group.protocol_name}, leader {group.leader_id}")
        for member in group.members.values():
            if member.is_awaiting_join:
                reply_to, member.awaiting_join = member.awaiting_join, None
                self._answer_join(group, member, reply_to)
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync = DelayedSync(self._arm(Timer.SYNC, group, None, group.rebalance_timeout_ms), group.generation_id)

    def _static_rejoin_wait_ms(self, group: Group) -> int:
        """How long a join that found only static members (none rejoined) waits again: the
        rebalance timeout, but at least until the first of their session deadlines, and
        never 0 ms. Until then only a rejoin or a session timeout can change anything, and
        both complete the join at once (`_maybe_complete_join`). A rebalance timeout of 0
        (a client may send one) would otherwise re-arm this deadline at the same instant
        for ever: `poll` would never return and the broker's loop would hang."""
        sessions = [m.heartbeat.at_ms for m in group.members.values() if m.heartbeat is not None]
        until_a_session_ends = min(sessions) - self.now_ms if sessions else 0
        return max(group.rebalance_timeout_ms, until_a_session_ends, 1)

    def _on_sync_deadline(self, group: Group) -> None:
        """DelayedSync.onExpiration: members that never sent SyncGroup for this generation
        are removed, and the group rebalances without them."""
        sync = group.sync
        assert sync is not None
        assert sync.generation_id == group.generation_id
        group.sync = None
        missing = [group.get(m) for m in sorted(group.pending_sync)]
        assert missing, "a sync deadline with every member synced"
        for member in missing:
            self._remove_member(group, member, E.UNKNOWN_MEMBER_ID)
        self.out.note("info", f"group {group.group_id}: removed {[m.member_id for m in missing]}, no SyncGroup in time")
        self._prepare_rebalance(group, "members did not sync in time")

    def _maybe_complete_sync(self, group: Group) -> None:
        if group.sync is not None and not group.pending_sync:
            group.sync = None

    def _remove_member(self, group: Group, member: Member, error: ErrorCode) -> None:
        """Drop a member, answering whatever it has parked."""
        if member.is_awaiting_join:
            self.out.answer(member.awaiting_join, JoinGroupResponse(error, UNKNOWN_MEMBER_ID))
            member.awaiting_join = None
        if member.is_awaiting_sync:
            self.out.answer(member.awaiting_sync, SyncGroupResponse(error))
            member.awaiting_sync = None
        member.heartbeat = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._remove_member(group, member, E.UNKNOWN_MEMBER_ID)
        self.out.note("info", f"group {group.group_id}: member {member.member_id} removed ({reason})")
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(S.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _on_heartbeat_deadline(self, group: Group, member: Member) -> None:
        member.heartbeat = None
        if not member.has_satisfied_heartbeat():
            self._remove_member_and_update_group(group, member, "session timeout")

    def _on_pending_member_deadline(self, group: Group, member_id: str) -> None:
        del group.pending_members[member_id]
        if group.is_(S.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # -------------------------------------------------------------- assignment

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        assert group.is_(S.COMPLETING_REBALANCE)
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: Group, assignment: dict[str, bytes]) -> None:
        """The only place assignments change: CompletingRebalance -> Stable."""
        assert group.is_(S.COMPLETING_REBALANCE)
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self._propagate_assignment(group, E.NONE)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        ok = error is E.NONE
        for member in group.members.values():
            if member.is_awaiting_sync:
                reply_to, member.awaiting_sync = member.awaiting_sync, None
                self.out.answer(reply_to, SyncGroupResponse(
                    error, member.assignment if ok else b"", group.protocol_type if ok else None,
                    group.protocol_name if ok else None))
                # Its session timer may have passed unheeded while it waited: start a new one.
                self._schedule_heartbeat(group, member)

    def _on_assignment_stored(self, what: StoreAssignment, error: ErrorCode) -> None:
        group = what.group
        if not (group.is_(S.COMPLETING_REBALANCE) and group.generation_id == what.generation_id):
            return  # a rebalance (or an unload) overtook the write
        self._touch(group)
        if error is not E.NONE:
            self._reset_and_propagate_assignment_error(group, group_append_error(error))
            self._maybe_prepare_rebalance(group, f"storing the assignment failed ({error.name})")
            return
        self._set_and_propagate_assignment(group, what.assignment)
        group.transition_to(S.STABLE, self.now_ms)

    # -------------------------------------------------------------- SyncGroup

    def _sync_group(self, req: SyncGroupRequest) -> None:
        error = self._validate(req.group_id)
        if error is E.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance in progress was lost with the old coordinator: rejoin (older
            # clients do not expect COORDINATOR_LOAD_IN_PROGRESS here).
            error = E.REBALANCE_IN_PROGRESS
        if error is not E.NONE:
            return self.out.answer(req.reply_to, SyncGroupResponse(error))
        group = self.groups.get(req.group_id)
        if group is None:
            return self.out.answer(req.reply_to, SyncGroupResponse(E.UNKNOWN_MEMBER_ID))
        self._touch(group)
        error = self._sync_error(group, req)
        if error is not E.NONE:
            return self.out.answer(req.reply_to, SyncGroupResponse(error))
        member = group.get(req.member_id)
        if group.is_(S.COMPLETING_REBALANCE):
            if member.is_awaiting_sync:
                self.out.answer(member.awaiting_sync, SyncGroupResponse(E.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = req.reply_to
            group.pending_sync.discard(member.member_id)
            self._maybe_complete_sync(group)
            if group.is_leader(member.member_id):
                given = dict(req.assignments)
                assignment = {m: given.get(m, b"") for m in group.members}
                self.out.note("info", f"group {group.group_id}: assignment from leader {member.member_id} for "
                                      f"generation {group.generation_id}")
                self._write_group(group, assignment, StoreAssignment(group, group.generation_id, assignment))
        else:
            assert group.is_(S.STABLE), group.state
            group.pending_sync.discard(member.member_id)
            self._maybe_complete_sync(group)
            self.out.answer(req.reply_to, SyncGroupResponse(E.NONE, member.assignment, group.protocol_type, group.protocol_name))
            self._schedule_heartbeat(group, member)

    def _sync_error(self, group: Group, req: SyncGroupRequest) -> ErrorCode:
        if group.is_(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            return E.FENCED_INSTANCE_ID
        if not group.has(req.member_id):
            return E.UNKNOWN_MEMBER_ID
        if req.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if req.protocol_type is not None and req.protocol_type != group.protocol_type:
            return E.INCONSISTENT_GROUP_PROTOCOL
        if req.protocol_name is not None and req.protocol_name != group.protocol_name:
            return E.INCONSISTENT_GROUP_PROTOCOL
        if group.is_(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if group.is_(S.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # -------------------------------------------------------------- Heartbeat

    def _heartbeat(self, req: HeartbeatRequest) -> None:
        error = self._validate(req.group_id)
        if error is E.COORDINATOR_LOAD_IN_PROGRESS:
            return self.out.answer(req.reply_to, HeartbeatResponse(E.NONE))  # the group is loading: answer blindly, as Kafka does
        if error is not E.NONE:
            return self.out.answer(req.reply_to, HeartbeatResponse(error))
        group = self.groups.get(req.group_id)
        if group is None:
            return self.out.answer(req.reply_to, HeartbeatResponse(E.UNKNOWN_MEMBER_ID))
        self._touch(group)
        if group.is_(S.DEAD):
            error = E.COORDINATOR_NOT_AVAILABLE
        elif group.is_static_member_fenced(req.member_id, req.group_instance_id):
            error = E.FENCED_INSTANCE_ID
        elif not group.has(req.member_id):
            error = E.UNKNOWN_MEMBER_ID
        elif req.generation_id != group.generation_id:
            error = E.ILLEGAL_GENERATION
        elif group.is_(S.EMPTY):
            error = E.UNKNOWN_MEMBER_ID
        else:
            member = group.get(req.member_id)
            self._schedule_heartbeat(group, member)
            error = E.REBALANCE_IN_PROGRESS if group.is_(S.PREPARING_REBALANCE) else E.NONE
        self.out.answer(req.reply_to, HeartbeatResponse(error))

    # -------------------------------------------------------------- LeaveGroup

    def _leave_group(self, req: LeaveGroupRequest) -> None:
        error = self._validate(req.group_id)
        if error is not E.NONE:
            return self.out.answer(req.reply_to, LeaveGroupResponse(error))
        group = self.groups.get(req.group_id)
        if group is None:
            return self.out.answer(req.reply_to, LeaveGroupResponse(E.NONE, tuple(
                LeaveMemberResponse(m.member_id, m.group_instance_id, E.UNKNOWN_MEMBER_ID) for m in req.members)))
        self._touch(group)
        if group.is_(S.DEAD):
            return self.out.answer(req.reply_to, LeaveGroupResponse(E.COORDINATOR_NOT_AVAILABLE))
        results = []
        for leaving in req.members:
            member_id, instance_id = leaving.member_id, leaving.group_instance_id
            if member_id != UNKNOWN_MEMBER_ID and group.is_static_member_fenced(member_id, instance_id):
                error = E.FENCED_INSTANCE_ID
            elif group.is_pending_member(member_id) and instance_id is None:
                del group.pending_members[member_id]
                if group.is_(S.PREPARING_REBALANCE):
                    self._maybe_complete_join(group)
                error = E.NONE
            elif not group.has(member_id) and not group.has_static_member(instance_id):
                error = E.UNKNOWN_MEMBER_ID
            else:
                if group.has_static_member(instance_id):
                    assert instance_id is not None
                    member_id = group.static_member_id(instance_id)
                self._remove_member_and_update_group(group, group.get(member_id), "LeaveGroup")
                error = E.NONE
            results.append(LeaveMemberResponse(leaving.member_id, instance_id, error))
        self.out.answer(req.reply_to, LeaveGroupResponse(E.NONE, tuple(results)))

    # -------------------------------------------------------------- load and unload

    def _on_group_loaded(self, group: Group) -> None:
        assert group.state in (S.STABLE, S.EMPTY), group.state
        self._touch(group)
        for member in group.members.values():
            self._schedule_heartbeat(group, member)
        if group.size > self.group_max_size:
            self._prepare_rebalance(group, f"loaded over group.max.size ({self.group_max_size})")

    def _on_group_unloaded(self, group: Group) -> None:
        """The partition moved away: parked requests are answered NOT_COORDINATOR (the
        client finds the new coordinator) and the group is Dead here."""
        group.transition_to(S.DEAD, self.now_ms)
        for member in group.members.values():
            if member.is_awaiting_join:
                self.out.answer(member.awaiting_join, JoinGroupResponse(E.NOT_COORDINATOR, member.member_id))
                member.awaiting_join = None
            if member.is_awaiting_sync:
                self.out.answer(member.awaiting_sync, SyncGroupResponse(E.NOT_COORDINATOR))
                member.awaiting_sync = None
            member.heartbeat = None
        group.pending_members.clear()
        group.pending_sync.clear()
        group.join = None
        group.sync = None
