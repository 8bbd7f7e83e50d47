"""A simulated broker: the simulator's driver of the core replica manager
(kafkalite.core.replica_manager), the same object the real broker runs, over the simulated
network, disk and ZooKeeper.

What is the simulator's own: the disk model (a log is a list of (leader epoch, payload id),
one record per batch, log start 0, a flushed prefix that survives a crash), the transport
(a fetch per followed partition, one in flight), the ZooKeeper session and registration, and
the produce purgatory's clock. Every decision (LeaderAndIsr, StopReplica, the leader's side
of a follower fetch, where a follower truncates, what follows a fetch error, whether a
produce may append, AlterIsr proposals and answers) is the core's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafkalite.core import controller as core_controller
from kafkalite.core.codes import CoreError, ErrorCode, OffsetOutOfRangeError
from kafkalite.core.consumer_fetch import ClusterView, ConsumerFetch
from kafkalite.core.fetch_session import FetchSessions, SessionPartition
from kafkalite.core.messages import (
    AlterIsrResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsr,
    StopReplica,
)
from kafkalite.core.purgatory import DelayedProduce, ProducePartitionStatus, Purgatory
from kafkalite.core.replica_manager import Follow, Replica, ReplicaManager, RoleChanges
from kafkalite.core.truncation import assign_epoch, truncate_epochs_from_end
from kafkalite.testing.sim import zk as zkm
from kafkalite.testing.sim.group_driver import SimGroupDriver
from kafkalite.testing.sim.world import ZK, Message

if TYPE_CHECKING:
    from kafkalite.testing.sim.controller_driver import SimControllerDriver
    from kafkalite.testing.sim.runner import Simulation

TP = tuple[str, int]
E = ErrorCode


@dataclass
class DiskReplica:
    """What survives a crash: the flushed prefix of the log, the leader-epoch checkpoint
    (written with fsync on every assign, as Kafka does) and the HW checkpoint."""

    log: list[tuple[int, int]] = field(default_factory=list)
    flushed: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)
    hw_checkpoint: int = 0
    topic_id: str | None = None  # partition.metadata (KIP-516), written durably when told

    def assign_topic_id(self, topic_id: str) -> None:
        assert self.topic_id in (None, topic_id)
        self.topic_id = topic_id

    # the core's ReplicaLog port
    @property
    def log_end_offset(self) -> int:
        return len(self.log)

    @property
    def log_start_offset(self) -> int:
        return 0

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self.epochs

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        assign_epoch(self.epochs, epoch, start_offset)

    def truncate_to(self, offset: int) -> None:
        del self.log[offset:]
        self.flushed = min(self.flushed, offset)
        truncate_epochs_from_end(self.epochs, offset)


class SimReplica(Replica):
    def __init__(self, tp: TP, broker_id: int, disk: DiskReplica) -> None:
        super().__init__(tp[0], tp[1], broker_id, disk, disk.hw_checkpoint)
        self.disk = disk
        self.fetch: Follow | None = None

    @property
    def log(self) -> list[tuple[int, int]]:
        return self.disk.log


class SimBroker:
    def __init__(self, sim: Simulation, broker_id: int) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.id = broker_id
        self.disk: dict[TP, DiskReplica] = {}
        self.running = True
        self.paused = False
        self.incarnation = 1
        self.unclean_start = False  # set by crash(): this process came back from one, as each of its registrations says
        self.unclean_start_announced = False  # a registration of this process said so
        self.deferred: list[tuple[str, Callable[[], None]]] = []
        self._reset_volatile()

    # ------------------------------------------------------------ lifecycle

    def _reset_volatile(self) -> None:
        self.rm = ReplicaManager(self.id, self._open_replica)
        self.replicas: dict[TP, SimReplica] = self.rm.replicas  # type: ignore[assignment]
        self.sid: int | None = None
        self.controller: SimControllerDriver | None = None
        self.purgatory: Purgatory[int] = Purgatory()
        self.fetch_sessions = FetchSessions()
        self._session_incarnations: dict[int, int] = {}  # per follower: the incarnation its session is of
        self.produce_ops: dict[int, tuple[DelayedProduce, Callable[[ErrorCode], None]]] = {}
        self.pending_rpcs: dict[int, Callable[[Any], None]] = {}
        self.shutdown_attempts = 0  # > 0 while a controlled shutdown is under way
        self._shutdown_inflight = False
        self.unassigned_checked = False  # seed E's start-up check against the topic znodes
        self.deferred = []
        # Issue 10: the group coordinator core, volatile like the replica manager's state.
        self.groups = SimGroupDriver(self) if self.cfg.offsets_partitions else None

    @property
    def broker_epoch(self) -> int:
        return self.rm.broker_epoch

    def _open_replica(self, tp: TP, _config: Mapping[str, str], fresh: bool = False) -> SimReplica:
        if fresh:  # the core found an earlier topic's log (KIP-516): it goes, an empty one comes
            self.disk[tp] = DiskReplica()
        return SimReplica(tp, self.id, self.disk.setdefault(tp, DiskReplica()))

    def start(self) -> None:
        """Start (or restart after a crash): recover logs, open a ZK session, tick."""
        self.running = True
        self.paused = False
        self._reset_volatile()
        for tp in sorted(self.disk):
            self.rm.add(self._open_replica(tp, {}))
        self.sim.node_after(self.id, 0, "tick", self.tick)

    def crash(self) -> None:
        """kill -9: volatile state gone, unflushed log suffix gone, session left to expire."""
        self.running = False
        self.paused = False
        self.incarnation += 1
        self.unclean_start = True  # its next registration says so (kafkalite.zk.codec.BrokerRegistration)
        self.unclean_start_announced = False
        for disk in self.disk.values():
            del disk.log[disk.flushed:]
            truncate_epochs_from_end(disk.epochs, len(disk.log))
        self._reset_volatile()

    def stop_cleanly(self) -> None:
        """End of a controlled shutdown: flush, checkpoint, close the session."""
        # The next start finds its logs shut down cleanly, as a broker's marker says, unless
        # this process came back from a crash and never registered (the marker carries it).
        self.unclean_start = self.unclean_start and not self.unclean_start_announced
        for rep in self.replicas.values():
            rep.disk.flushed = rep.leo
            rep.disk.hw_checkpoint = rep.hw
        if self.sid is not None:
            self.sim.zk.close_session(self.sid)
        self.running = False
        self.incarnation += 1
        self._reset_volatile()

    # ------------------------------------------------------------ plumbing

    @property
    def now(self) -> int:
        return self.sim.sched.now_ms

    def zk_reachable(self) -> bool:
        return not self.sim.network.partitioned(self.id, ZK)

    def rpc(self, dst: int, kind: str, body: Any, on_response: Callable[[Any], None], *, idempotent: bool = False) -> None:
        rpc_id = self.sim.next_id()
        self.pending_rpcs[rpc_id] = on_response
        self.sim.network.send(Message(self.id, dst, kind, body, rpc_id), idempotent=idempotent)
        self.sim.node_after(self.id, self.cfg.request_timeout_ms, f"timeout {kind}", lambda: self._rpc_timeout(rpc_id))

    def _rpc_timeout(self, rpc_id: int) -> None:
        callback = self.pending_rpcs.pop(rpc_id, None)
        if callback is not None:
            callback(None)

    def respond(self, request: Message, body: Any) -> None:
        self.sim.network.send(Message(self.id, request.src, request.kind, body, request.rpc_id, True))

    def on_message(self, msg: Message) -> None:
        if msg.response:
            callback = self.pending_rpcs.pop(msg.rpc_id, None)
            if callback is not None:
                callback(msg.body)
            return
        answer = getattr(self, f"handle_{msg.kind}")(msg)
        if answer is not None:
            self.respond(msg, answer)

    # ------------------------------------------------------------ tick

    def tick(self) -> None:
        self._zk_housekeeping()
        for rep in self.replicas.values():
            self._disk_housekeeping(rep)
        self._idle_followers_caught_up()
        self.rm.maybe_shrink_isrs(self.now, self.cfg.replica_lag_time_max_ms)
        self._send_alter_isr()
        for tp in sorted(self.replicas):
            self._maybe_fetch(tp)
        for op_id in self.purgatory.poll(self.now):
            self.produce_ops[op_id][0].on_expiration()
            self._finish_produce(op_id)
        if self.controller is not None:
            self.controller.tick()
        if self.shutdown_attempts > 0:
            self._controlled_shutdown_step()
        if self.running:
            self.sim.node_after(self.id, self.cfg.tick_ms, "tick", self.tick)

    def _zk_housekeeping(self) -> None:
        if not self.zk_reachable():
            return
        zk = self.sim.zk
        if not self.unassigned_checked:
            self._delete_unassigned()
        if self.sid is None or not zk.touch(self.sid, self.now):
            if self.sid is not None:
                self.sim.trace_note(f"b{self.id} ZK session expired; re-registering")
            if self.controller is not None:
                self.controller.resign("session expired")
            self.sid = zk.open_session(self.id, self.now)
            self.rm.broker_epoch = -1
        if self.rm.broker_epoch < 0:
            try:
                node = zk.create(zkm.broker_path(self.id), {"id": self.id, "unclean_start": self.unclean_start},
                                 ephemeral_sid=self.sid)
            except zkm.NodeExistsError:
                return  # the previous incarnation's session has not expired yet
            self.rm.broker_epoch = node.czxid
            self.unclean_start_announced = True
            self.sim.trace_note(f"b{self.id} registered with broker epoch {self.rm.broker_epoch}")
        if self.controller is not None and zk.controller_id() != self.id:
            self.controller.resign("/controller moved")
        if zk.get(zkm.CONTROLLER) is None and self.shutdown_attempts == 0:
            won = zk.try_become_controller(self.id, self.sid)
            if won is not None:
                from kafkalite.testing.sim.controller_driver import SimControllerDriver

                self.controller = SimControllerDriver(self, epoch=won[0], epoch_version=won[1])
                self.sim.trace_note(f"b{self.id} is controller, epoch {won[0]}")
                self.controller.activate()

    def _delete_unassigned(self) -> None:
        """Seed E, as the broker does at start-up once it reaches ZooKeeper (before it
        registers): local replicas of partitions no longer assigned here (moved away,
        removed while this broker was down) are deleted."""
        self.unassigned_checked = True
        assigned = self.sim.assignments
        gone = [tp for tp in sorted(self.replicas) if self.id not in assigned.get(tp, ())]
        if gone:
            self.sim.trace_note(f"b{self.id} deletes unassigned replicas {gone} at start-up")
            self._carry_out(self.rm.remove_replicas(gone, delete=True))

    def _disk_housekeeping(self, rep: SimReplica) -> None:
        if self.cfg.flush_mode == "always" or self.sim.rng.random() < self.cfg.flush_probability_per_tick:
            rep.disk.flushed = rep.leo
        rep.disk.hw_checkpoint = min(rep.hw, rep.disk.flushed)

    # ------------------------------------------------------------ controller requests

    def _registered(self) -> bool:
        """Controller requests wait for this broker's registration (as the broker's RPC
        handlers do, and Kafka, which serves no request before it registered): until then
        it cannot tell a request for its previous incarnation (an older broker epoch, still
        resent while that registration lives) from one for itself. Acting on the previous
        incarnation's LeaderAndIsr made a broker that restarted with a shorter log follow
        (or lead) the current leader epoch as if it had its old data (found by the
        simulator, issue 9, sweep seed 3705). Unanswered, the controller resends."""
        return self.rm.broker_epoch >= 0

    def handle_LeaderAndIsr(self, msg: Message) -> dict[str, Any] | None:
        body: LeaderAndIsr = msg.body
        if not self._registered():
            return None
        try:
            changes = self.rm.on_leader_and_isr(body, self.now)
        except CoreError as error:
            return {"error": int(error.code)}
        self._carry_out(changes)
        return {"error": 0, "partitions": changes.codes}

    def handle_StopReplica(self, msg: Message) -> dict[str, Any] | None:
        body: StopReplica = msg.body
        if not self._registered():
            return None
        try:
            changes = self.rm.on_stop_replica(body)
        except CoreError as error:
            return {"error": int(error.code)}
        self._carry_out(changes)
        return {"error": 0, "partitions": changes.codes}

    def _carry_out(self, changes: RoleChanges) -> None:
        for tp in changes.stop_fetching:
            if tp in self.replicas:
                self.replicas[tp].fetch = None
        if changes.delete:
            for tp in changes.removed:
                if self.disk.pop(tp, None) is not None:
                    self.sim.trace_note(f"b{self.id} deleted its replica of {tp}")
        for tp, old_id, new_id in changes.replaced:
            self.sim.trace_note(f"b{self.id} replaced its replica of {tp}: topic id {old_id}, the controller's {new_id}")
        for tp, epoch in changes.new_leaderships:
            rep = self.replicas[tp]
            self.sim.trace_note(f"b{self.id} leads {tp} epoch {epoch} at LEO {rep.leo} HW {rep.hw}")
            self.sim.checker.on_become_leader(self, rep, epoch)
        for tp, follow in changes.fetch.items():
            rep = self.replicas[tp]
            rep.fetch = follow
            if self.cfg.bug_truncate_to_hw:
                # The seed's becomeFollower: "truncate the log to r.hw" (what KIP-101 fixed).
                rep.truncate_to(min(rep.hw, rep.leo))
                rep.fetch.truncating = False
            self.sim.node_after(self.id, 0, "fetch", lambda tp=tp: self._maybe_fetch(tp))
        for tp in changes.touched + changes.removed:
            self._hw_moved(tp)  # fails acks=all waiting here when the role went
        if self.groups is not None:
            self.groups.on_roles_changed(changes)

    # ------------------------------------------------------------ follower side (transport)

    def _maybe_fetch(self, tp: TP) -> None:
        rep = self.replicas.get(tp)
        f = None if rep is None else rep.fetch
        if rep is None or f is None or not f.ready(self.now):
            return
        f.in_flight = True
        if f.truncating:
            body = {"tp": tp, "current_leader_epoch": f.leader_epoch, "epoch": f.latest_epoch()}
            self.rpc(f.leader, "OffsetsForLeaderEpoch", body, lambda r: self._on_epoch_answer(rep, f, r))
            return
        last_fetched = -1 if self.cfg.bug_truncate_to_hw else f.latest_epoch()
        body = {"tp": tp, "replica": self.id, "offset": rep.leo, "current_leader_epoch": f.leader_epoch,
                "last_fetched_epoch": last_fetched, "incarnation": self.incarnation, "broker_epoch": self.rm.broker_epoch}
        self.rpc(f.leader, "ReplicaFetch", body, lambda r: self._on_fetch(rep, f, r))

    def _fetch_again(self, rep: SimReplica, delay_ms: int) -> None:
        self.sim.node_after(self.id, delay_ms, "fetch", lambda: self._maybe_fetch(rep.tp))

    def _truncate_by_epoch(self, rep: SimReplica, f: Follow, answer: tuple[int, int]) -> None:
        leo = rep.leo
        f.on_leader_epoch_end(answer)
        if rep.leo < leo:
            self.sim.trace_note(f"b{self.id} {rep.tp} truncates {leo}->{rep.leo} (leader said {answer})")
        self._fetch_again(rep, 0)

    def _on_epoch_answer(self, rep: SimReplica, f: Follow, resp: dict[str, Any] | None) -> None:
        if rep.fetch is not f or self.replicas.get(rep.tp) is not rep:
            return
        if resp is None or resp["error"] != 0:
            self._on_fetch_error(rep, f, resp)
        else:
            self._truncate_by_epoch(rep, f, (resp["epoch"], resp["end_offset"]))

    def _on_fetch(self, rep: SimReplica, f: Follow, resp: dict[str, Any] | None) -> None:
        if rep.fetch is not f or self.replicas.get(rep.tp) is not rep:
            return
        if resp is None or resp["error"] != 0:
            self._on_fetch_error(rep, f, resp)
            return
        if "diverging" in resp:
            self._truncate_by_epoch(rep, f, resp["diverging"])
            return
        if resp.get("idle"):
            f.in_flight = False  # nothing changed: as a partition the broker's session answer leaves out
            self._fetch_again(rep, self.cfg.fetch_backoff_ms)
            return
        assert resp["offset"] == rep.leo  # one fetch in flight; nothing else appends
        for leader_epoch, payload in resp["records"]:
            rep.disk.assign_epoch(leader_epoch, rep.leo)
            rep.log.append((leader_epoch, payload))
        if self.cfg.flush_mode == "always":
            rep.disk.flushed = rep.leo
        f.on_fetched(resp["hw"])
        self._fetch_again(rep, 0 if resp["records"] else self.cfg.fetch_backoff_ms)

    def _on_fetch_error(self, rep: SimReplica, f: Follow, resp: dict[str, Any] | None) -> None:
        code = int(E.REQUEST_TIMED_OUT) if resp is None else resp["error"]
        f.on_error(code, self.now, backoff_ms=self.cfg.fetch_backoff_ms, await_leader_and_isr_ms=5 * self.cfg.fetch_backoff_ms,
                   leader_leo=-1 if resp is None else resp.get("leo", -1))  # the simulated log starts at 0: no restart
        self._fetch_again(rep, max(f.not_before_ms - self.now, 0))

    # ------------------------------------------------------------ leader side

    def handle_OffsetsForLeaderEpoch(self, msg: Message) -> dict[str, Any]:
        try:
            answer = self.rm.offsets_for_leader_epoch(msg.body["tp"], msg.body["current_leader_epoch"], msg.body["epoch"])
        except CoreError as error:
            return {"error": int(error.code)}
        return {"error": 0, "epoch": answer.epoch, "end_offset": answer.end_offset}

    def handle_ReplicaFetch(self, msg: Message) -> dict[str, Any]:
        body = msg.body
        tp, offset = body["tp"], body["offset"]
        if self.cfg.fetch_sessions:
            replica = body["replica"]
            if self._session_incarnations.get(replica) != body["incarnation"]:
                # A restarted follower's first fetch opens a new session, as the brokers' full request does.
                self.fetch_sessions.start(replica, {}, self.now)
                self._session_incarnations[replica] = body["incarnation"]
            session = self.fetch_sessions.of(replica, self.now)
            asked = SessionPartition(offset, body["current_leader_epoch"], body["last_fetched_epoch"])
            if not session.request_one(tp, asked, self.now):
                return {"error": 0, "idle": True}  # as the brokers' session leaves it out of the answer
        try:
            read = self.rm.follower_fetch(tp, body["replica"], offset, body["current_leader_epoch"], body["last_fetched_epoch"], self.now,
                                          follower_broker_epoch=body.get("broker_epoch", -1))
        except CoreError as error:
            rep = self.replicas.get(tp)
            return {"error": int(error.code), "leo": -1 if rep is None else rep.leo}
        rep = self.replicas[tp]
        if read.diverging is not None:
            return {"error": 0, "diverging": (read.diverging.epoch, read.diverging.end_offset), "hw": rep.hw}
        if read.hw_changed:
            self._hw_moved(tp)
        self._send_alter_isr()
        records = rep.log[offset: min(read.upper, offset + self.cfg.fetch_records_max)]
        return {"error": 0, "offset": offset, "records": records, "hw": rep.hw, "leo": rep.leo}

    # ------------------------------------------------------------ AlterIsr (KIP-497)

    def _send_alter_isr(self) -> None:
        controller = self.sim.zk.controller_id() if self.zk_reachable() else -1
        if controller < 0 or not self.rm.alter_isr_pending:
            return  # no controller known: the next tick sends what is due
        items = self.rm.alter_isr_to_send()
        if items:
            for i in items:
                self.sim.trace_note(f"b{self.id} {(i.topic, i.partition)} propose ISR {i.new_isr}")
            self.rpc(controller, "AlterIsr", self.rm.alter_isr_request(items),
                     lambda r: self._on_alter_isr_response(items, r), idempotent=True)

    def _on_alter_isr_response(self, items: list[Any], resp: AlterIsrResponse | None) -> None:
        for tp in self.rm.on_alter_isr_answer(items, resp):
            self._hw_moved(tp)
        for i in items:
            rep = self.replicas.get((i.topic, i.partition))
            if rep is not None and resp is not None:
                self.sim.trace_note(f"b{self.id} {rep.tp} AlterIsr answered: ISR {rep.state.isr}")

    # ------------------------------------------------------------ produce

    def handle_Produce(self, msg: Message) -> dict[str, Any] | None:
        tp, payload = msg.body["tp"], msg.body["payload"]
        try:
            rep = self.rm.check_append(tp, -1, self.cfg.min_insync_replicas)
        except CoreError as error:
            return {"error": int(error.code)}
        offset, epoch = self.append_as_leader(rep, [payload])

        def done(code: ErrorCode) -> None:
            if code == E.NONE:
                self.sim.checker.on_ack(self, tp, epoch, offset, payload)
                self.respond(msg, {"error": 0, "offset": offset})
            else:
                self.respond(msg, {"error": int(code)})

        self.await_acks_all(tp, offset, epoch, self.cfg.produce_timeout_ms, done)
        return None

    def append_as_leader(self, rep: SimReplica, payloads: list[int]) -> tuple[int, int]:
        """One batch per payload at the log end, in the leader's epoch: (first offset, epoch)."""
        first, epoch = rep.leo, rep.leader_epoch
        rep.log.extend((epoch, payload) for payload in payloads)
        if self.cfg.flush_mode == "always":
            rep.disk.flushed = rep.leo
        rep.leader_appended()
        self.fetch_sessions.mark(rep.tp)
        return first, epoch

    def await_acks_all(self, tp: TP, last_offset: int, epoch: int, timeout_ms: int,
                       done: Callable[[ErrorCode], None]) -> None:
        """acks=all: `done` is called once with the core DelayedProduce's outcome for the
        batches up to `last_offset` appended in `epoch` (NONE once the HW passes them)."""
        op = DelayedProduce({tp: ProducePartitionStatus(last_offset, epoch, self.cfg.min_insync_replicas)})
        op_id = self.sim.next_id()
        self.produce_ops[op_id] = (op, done)
        if self.purgatory.add(op_id, [tp], self.now + timeout_ms, lambda: op.try_complete(self.replicas.get)):
            self._finish_produce(op_id)
        self._hw_moved(tp)

    def _idle_followers_caught_up(self) -> None:
        """kafkalite.broker.replica_manager.ReplicaManager._idle_followers_caught_up."""
        reread = []
        for replica_id, tp, fetch_offset, as_of_ms in self.fetch_sessions.idle_caught_up():
            rep = self.replicas.get(tp)
            if rep is not None and rep.is_leader and rep.state.follower_still_caught_up(replica_id, fetch_offset, rep.leo, as_of_ms):
                reread.append(tp)
        for tp in reread:
            self.fetch_sessions.mark(tp)

    def _hw_moved(self, tp: TP) -> None:
        self.fetch_sessions.mark(tp)
        for op_id in self.purgatory.check_and_complete(tp):
            self._finish_produce(op_id)

    def _finish_produce(self, op_id: int) -> None:
        op, done = self.produce_ops.pop(op_id)
        (code,) = op.result().values()
        done(code)

    # ------------------------------------------------------------ consumers

    def handle_Fetch(self, msg: Message) -> dict[str, Any]:
        """A consumer fetch (pre-KIP-392, no client rack): from the leader, only below the
        HW (DESIGN 5), decided by the broker's own core."""
        tp, offset = msg.body["tp"], msg.body["offset"]
        try:
            rep, read = self.rm.consumer_fetch(tp, ConsumerFetch(offset), ClusterView(partition_known=True), self.now)
        except OffsetOutOfRangeError:
            rep = self.rm.replicas[tp]
            return {"error": int(E.OFFSET_OUT_OF_RANGE), "leo": rep.leo, "hw": rep.hw}
        except CoreError as error:
            return {"error": int(error.code)}
        hw = read.upper
        records = rep.log[offset: min(hw, offset + self.cfg.fetch_records_max)] if offset < hw else []
        self.sim.checker.on_consumer_served(self, tp, offset, len(records), hw)
        return {"error": 0, "offset": offset, "records": records, "hw": hw}

    # ------------------------------------------------------------ consumer groups (issue 10)

    def handle_OffsetCommit(self, msg: Message) -> None:
        assert self.groups is not None
        self.groups.on_offset_commit(msg)  # answered by the core, maybe later

    def handle_OffsetFetch(self, msg: Message) -> None:
        assert self.groups is not None
        self.groups.on_offset_fetch(msg)

    # ------------------------------------------------------------ controller RPCs

    def handle_AlterIsr(self, msg: Message) -> None:
        if self.controller is None:
            self.respond(msg, AlterIsrResponse(int(E.NOT_CONTROLLER)))
            return
        self.controller.enqueue(lambda: core_controller.AlterIsrRequested(msg.body, msg))

    def handle_ControlledShutdown(self, msg: Message) -> None:
        if self.controller is None:
            self.respond(msg, ControlledShutdownResponse(int(E.NOT_CONTROLLER)))
            return
        body: ControlledShutdownRequest = msg.body
        self.controller.enqueue(lambda: core_controller.ControlledShutdownRequested(body.broker_id, body.broker_epoch, msg))

    # ------------------------------------------------------------ controlled shutdown

    def begin_controlled_shutdown(self) -> None:
        self.shutdown_attempts = 1
        self._controlled_shutdown_step()

    def _controlled_shutdown_step(self) -> None:
        if self._shutdown_inflight:
            return
        controller = self.sim.zk.controller_id() if self.zk_reachable() else -1
        if controller < 0 or self.rm.broker_epoch < 0:
            return
        self._shutdown_inflight = True
        body = ControlledShutdownRequest(self.id, self.rm.broker_epoch)
        self.rpc(controller, "ControlledShutdown", body, self._on_controlled_shutdown_response)

    def _on_controlled_shutdown_response(self, resp: ControlledShutdownResponse | None) -> None:
        self._shutdown_inflight = False
        done = resp is not None and resp.error == 0 and not resp.remaining
        if done or self.shutdown_attempts >= self.cfg.controlled_shutdown_retries_max:
            self.sim.trace_note(f"b{self.id} controlled shutdown {'done' if done else 'gave up'}; stopping")
            self.sim.on_broker_stopped(self)
            self.stop_cleanly()
            return
        self.shutdown_attempts += 1
