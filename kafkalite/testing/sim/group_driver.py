"""The simulator's driver of the group coordinator core (kafkalite.core.group_coordinator),
the second one next to the asyncio driver (kafkalite.broker.group_coordinator), which it
follows step by step (DESIGN.md section 10). It feeds the core events and carries out its
Ready, nothing else:
- requests: OffsetCommit and OffsetFetch messages become the core's typed requests whose
  reply token is the request message; the core's answer is the response body;
- appends: each AppendRecords is refused unless this broker leads its `__consumer_offsets`
  partition in the epoch the core names; otherwise each record becomes one simulated batch
  (leader epoch, payload id), its key and value bytes (offsets_records.encode_record) kept
  in the simulation's table under the payload id, and the batches, appended together, are
  waited for with acks=all semantics by the broker's produce purgatory (DelayedProduce,
  `offsets_commit_timeout_ms`); the outcome goes back to the core exactly once, as
  AppendCompleted (at the first batch's offset) or AppendFailed;
- loads: a partition is read from its start to the log end offset it had when the load
  began, `offsets_load_chunk_records` at a time, one timer step apart, as RecordsLoaded
  events (the last one `done`); it stops when this broker no longer leads in the load's
  epoch or a newer load of the partition started;
- leadership: after every LeaderAndIsr or StopReplica the replica manager carried out, each
  offsets partition named becomes a BecameLeader or BecameFollower for the core;
- time: the core is polled at its deadline, on a timer of this broker incarnation.
Outcomes found while carrying out a Ready are reported on a later step (timer 0), so the
core is never re-entered from its own Ready. The core is volatile: a crash or restart
builds a new one (SimBroker._reset_volatile), which loads from the log again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalite.core.codes import CoreError, ErrorCode, NotLeaderOrFollowerError
from kafkalite.core.group_coordinator import GroupCoordinator, GroupCoordinatorConfig, leadership_events
from kafkalite.core.group_messages import (
    OFFSETS_TOPIC,
    AppendCompleted,
    AppendFailed,
    AppendRecords,
    GroupEvent,
    LoadedRecord,
    LoadPartition,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    Ready,
    RecordsLoaded,
)
from kafkalite.core.offsets_records import encode_record

if TYPE_CHECKING:
    from kafkalite.core.replica_manager import RoleChanges
    from kafkalite.testing.sim.broker import SimBroker, SimReplica
    from kafkalite.testing.sim.world import Message

E = ErrorCode


class SimGroupDriver:
    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker
        self.sim = broker.sim
        self.cfg = broker.cfg
        self._member_ids = 0
        self.core = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_partitions=self.cfg.offsets_partitions),
                                     new_member_uuid=self._new_member_uuid)
        self._poll_at_ms: int | None = None
        self._loads: dict[int, int] = {}  # offsets partition -> token of its current load

    def _new_member_uuid(self) -> str:
        self._member_ids += 1
        return f"b{self.broker.id}.{self.broker.incarnation}.{self._member_ids}"

    # -------------------------------------------------------------- the core

    def submit(self, event: GroupEvent) -> None:
        """One event for the core, then its Ready carried out. A programmer error in the
        core propagates: the run fails with its seed."""
        self._carry_out(self.core.handle(event, self.broker.now))

    def _later(self, event: GroupEvent) -> None:
        self.sim.node_after(self.broker.id, 0, "group outcome", lambda: self.submit(event))

    def _carry_out(self, ready: Ready) -> None:
        for note in ready.notes:
            self.sim.trace_note(f"b{self.broker.id} groups: {note.text}")
        for answer in ready.answers:
            self.broker.respond(answer.reply_to, answer.response)
        for append in ready.appends:
            self._append(append)
        for load in ready.loads:
            self._start_load(load)
        self._arm(ready.deadline_ms)

    def _arm(self, deadline_ms: int | None) -> None:
        """A poll at the core's deadline (one timer: a later deadline waits for the
        earlier poll, whose Ready arms the next)."""
        if deadline_ms is None or (self._poll_at_ms is not None and self._poll_at_ms <= deadline_ms):
            return
        self._poll_at_ms = deadline_ms

        def poll() -> None:
            if self._poll_at_ms == deadline_ms:
                self._poll_at_ms = None
            self._carry_out(self.core.poll(self.broker.now))

        self.sim.node_after(self.broker.id, max(0, deadline_ms - self.broker.now), "group poll", poll)

    # -------------------------------------------------------------- requests

    def on_offset_commit(self, msg: Message) -> None:
        body = msg.body
        partitions = tuple(OffsetCommitPartition(t, p, offset, None) for (t, p), offset in body["offsets"])
        self.submit(OffsetCommitRequest(body["group"], body.get("generation", -1), body.get("member", ""), None,
                                        partitions, reply_to=msg))

    def on_offset_fetch(self, msg: Message) -> None:
        self.submit(OffsetFetchRequest(msg.body["group"], tuple(msg.body["partitions"]), reply_to=msg))

    # -------------------------------------------------------------- leadership

    def on_roles_changed(self, changes: RoleChanges) -> None:
        """After the replica manager carried out a LeaderAndIsr or StopReplica."""
        for event in leadership_events(changes, self.broker.replicas.get, self.core.offsets_topic_partitions):
            self.submit(event)

    def _leads(self, partition: int, leader_epoch: int) -> SimReplica | None:
        rep = self.broker.replicas.get((OFFSETS_TOPIC, partition))
        return rep if rep is not None and rep.is_leader and rep.leader_epoch == leader_epoch else None

    # -------------------------------------------------------------- appends

    def _append(self, append: AppendRecords) -> None:
        broker = self.broker
        tp = (OFFSETS_TOPIC, append.partition)
        try:
            rep = broker.rm.check_append(tp, -1, self.cfg.min_insync_replicas)
            if rep.leader_epoch != append.leader_epoch:
                raise NotLeaderOrFollowerError(f"{tp} is led in epoch {rep.leader_epoch}, not {append.leader_epoch}")
        except CoreError as error:
            self._later(AppendFailed(append.append_id, error.code))
            return
        payloads = [self.sim.store_offsets_record(tp, *encode_record(record)) for record in append.records]
        first, epoch = broker.append_as_leader(rep, payloads)
        if self.cfg.bug_offsets_acks_leader:  # deliberately broken: acks=1 (SimConfig)
            self._later(AppendCompleted(append.append_id, first))
            return

        def done(code: ErrorCode) -> None:
            if code == E.NONE:
                for i, payload in enumerate(payloads):
                    self.sim.checker.on_ack(broker, tp, epoch, first + i, payload)
                self._later(AppendCompleted(append.append_id, first))
            else:
                self._later(AppendFailed(append.append_id, code))

        broker.await_acks_all(tp, first + len(payloads) - 1, epoch, self.cfg.offsets_commit_timeout_ms, done)

    # -------------------------------------------------------------- loads

    def _start_load(self, load: LoadPartition) -> None:
        token = self.sim.next_id()
        self._loads[load.partition] = token  # a load of an older epoch stops at its next chunk
        self.sim.node_after(self.broker.id, 0, "group load", lambda: self._load_chunk(load, token, 0, None))

    def _load_chunk(self, load: LoadPartition, token: int, offset: int, end: int | None) -> None:
        if self._loads.get(load.partition) != token:
            return  # overtaken by a newer leadership
        rep = self._leads(load.partition, load.leader_epoch)
        if rep is None:
            del self._loads[load.partition]  # the core ignores this epoch's records now
            return
        if end is None:
            end = rep.leo
        upto = min(end, offset + self.cfg.offsets_load_chunk_records)
        records = tuple(LoadedRecord(offset + i, *self.sim.offsets_records[payload])
                        for i, (_epoch, payload) in enumerate(rep.log[offset:upto]))
        done = upto >= end
        if done:
            del self._loads[load.partition]
        self.submit(RecordsLoaded(load.partition, load.leader_epoch, records, done=done))
        if not done:
            self.sim.node_after(self.broker.id, 1, "group load", lambda: self._load_chunk(load, token, upto, end))

    # -------------------------------------------------------------- for the checker

    def loaded_epoch(self, partition: int) -> int | None:
        """The leader epoch this core coordinates the partition's groups in (None: not led
        here, or still loading)."""
        owned: Any = self.core.partitions.get(partition)
        return None if owned is None or owned.load is not None else owned.leader_epoch
