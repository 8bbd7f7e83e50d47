"""A simulated broker: the replica manager, fetchers, produce purgatory and ZooKeeper
client of kafkalite.broker, synchronous, over the simulated network, disk and ZooKeeper.

It drives the REAL core: `PartitionReplicaState` (HW, ISR, AlterIsr phases),
`kafkalite.core.truncation` (leader-epoch cache, OffsetsForLeaderEpoch, DIVERGING_EPOCH),
`kafkalite.core.purgatory` (DelayedProduce). Request handling mirrors
kafkalite/broker/replica_manager.py, fetcher.py and inter_broker.py; where it differs the
comment says why.

A log is a list of (leader epoch, payload id) per offset: one record per batch, log
start 0 (no retention).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafkalite.core import controller as core_controller
from kafkalite.core.codes import CoreError, ErrorCode
from kafkalite.core.messages import (
    AlterIsrProposal,
    AlterIsrRequest,
    AlterIsrResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsr,
)
from kafkalite.core.purgatory import DelayedProduce, ProducePartitionStatus, Purgatory
from kafkalite.core.replica_state import AlterIsrItem, LeaderAndIsrState, PartitionReplicaState
from kafkalite.core.truncation import (
    assign_epoch,
    diverging_epoch_check,
    end_offset_for_epoch,
    follower_truncation_state,
    latest_epoch,
    truncate_epochs_from_end,
)
from kafkalite.testing.sim import zk as zkm
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


@dataclass(eq=False)
class FetchState:
    leader: int
    leader_epoch: int
    truncating: bool = True
    inflight: bool = False


class SimReplica:
    """kafkalite.broker.partition.Partition over a DiskReplica."""

    def __init__(self, tp: TP, broker_id: int, disk: DiskReplica) -> None:
        self.tp = tp
        self.disk = disk
        self.state = PartitionReplicaState(tp[0], tp[1], broker_id)
        self.initial_hw = min(disk.hw_checkpoint, len(disk.log))
        self.fetch: FetchState | None = None

    @property
    def log(self) -> list[tuple[int, int]]:
        return self.disk.log

    @property
    def epochs(self) -> list[tuple[int, int]]:
        return self.disk.epochs

    @property
    def leo(self) -> int:
        return len(self.disk.log)

    # kafkalite.core.purgatory.PartitionLookup
    @property
    def is_leader(self) -> bool:
        return self.state.is_leader

    def epoch_at(self, offset: int) -> int:
        return self.disk.log[offset][0] if 0 <= offset < len(self.disk.log) else -1

    def check_enough_replicas_reach_offset(self, required_offset: int, min_insync_replicas: int):
        return self.state.check_enough_replicas_reach_offset(required_offset, min_insync_replicas)

    @property
    def hw(self) -> int:
        return max(self.state.hw, self.initial_hw)


class SimBroker:
    def __init__(self, sim: Simulation, broker_id: int) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.id = broker_id
        self.disk: dict[TP, DiskReplica] = {}
        self.running = True
        self.paused = False
        self.incarnation = 1
        self.deferred: list[tuple[str, Callable[[], None]]] = []
        self._reset_volatile()

    # ------------------------------------------------------------ lifecycle

    def _reset_volatile(self) -> None:
        self.replicas: dict[TP, SimReplica] = {}
        self.sid: int | None = None
        self.broker_epoch = -1
        self.controller_epoch_seen = 0
        self.controller: SimControllerDriver | None = None
        self.purgatory: Purgatory[int] = Purgatory()
        self.produce_ops: dict[int, tuple[DelayedProduce, Message, int, int, int]] = {}
        self.pending_rpcs: dict[int, Callable[[dict[str, Any] | None], None]] = {}
        self.alter_isr_inflight: set[TP] = set()
        self.shutdown_attempts = 0  # > 0 while a controlled shutdown is under way
        self._shutdown_inflight = False
        self.deferred = []

    def start(self) -> None:
        """Start (or restart after a crash): recover logs, open a ZK session, tick."""
        self.running = True
        self.paused = False
        self._reset_volatile()
        for tp, disk in sorted(self.disk.items()):
            self.replicas[tp] = SimReplica(tp, self.id, disk)
        self.sim.node_after(self.id, 0, "tick", self.tick)

    def crash(self) -> None:
        """kill -9: volatile state gone, unflushed log suffix gone, session left to expire."""
        self.running = False
        self.paused = False
        self.incarnation += 1
        for disk in self.disk.values():
            del disk.log[disk.flushed:]
            truncate_epochs_from_end(disk.epochs, len(disk.log))
        self._reset_volatile()

    def stop_cleanly(self) -> None:
        """End of a controlled shutdown: flush, checkpoint, close the session."""
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

    def rpc(
        self, dst: int, kind: str, body: dict[str, Any],
        on_response: Callable[[dict[str, Any] | None], None], *, idempotent: bool = False,
    ) -> None:
        rpc_id = self.sim.next_id()
        self.pending_rpcs[rpc_id] = on_response
        self.sim.network.send(Message(self.id, dst, kind, body, rpc_id), idempotent=idempotent)
        self.sim.node_after(self.id, self.cfg.request_timeout_ms, f"timeout {kind}",
                            lambda: self._rpc_timeout(rpc_id))

    def _rpc_timeout(self, rpc_id: int) -> None:
        callback = self.pending_rpcs.pop(rpc_id, None)
        if callback is not None:
            callback(None)

    def respond(self, request: Message, body: dict[str, Any]) -> None:
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

    def replica(self, tp: TP) -> SimReplica:
        rep = self.replicas.get(tp)
        if rep is None:
            disk = self.disk.setdefault(tp, DiskReplica())
            rep = self.replicas[tp] = SimReplica(tp, self.id, disk)
        return rep

    # ------------------------------------------------------------ tick

    def tick(self) -> None:
        self._zk_housekeeping()
        for tp, rep in sorted(self.replicas.items()):
            self._disk_housekeeping(rep)
            if rep.state.is_leader:
                item = rep.state.maybe_shrink_isr(self.now, self.cfg.replica_lag_time_max_ms, rep.leo)
                if item is not None:
                    self.sim.trace_note(f"b{self.id} {tp} propose shrink ISR {item.new_isr}")
                if rep.state.pending_alter_isr_item() is not None and tp not in self.alter_isr_inflight:
                    self._send_alter_isr(rep.state.pending_alter_isr_item())
            self._maybe_fetch(tp)
        for op_id in self.purgatory.poll(self.now):
            op = self.produce_ops[op_id][0]
            op.on_expiration()
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
        if self.sid is None or not zk.touch(self.sid, self.now):
            if self.sid is not None:
                self.sim.trace_note(f"b{self.id} ZK session expired; re-registering")
            if self.controller is not None:
                self.controller.resign("session expired")
            self.sid = zk.open_session(self.id, self.now)
            self.broker_epoch = -1
        if self.broker_epoch < 0:
            try:
                node = zk.create(zkm.broker_path(self.id), {"id": self.id}, ephemeral_sid=self.sid)
            except zkm.NodeExistsError:
                return  # the previous incarnation's session has not expired yet
            self.broker_epoch = node.czxid
            self.sim.trace_note(f"b{self.id} registered with broker epoch {self.broker_epoch}")
        if self.controller is not None and zk.controller_id() != self.id:
            self.controller.resign("/controller moved")
        if zk.get(zkm.CONTROLLER) is None and self.shutdown_attempts == 0:
            won = zk.try_become_controller(self.id, self.sid)
            if won is not None:
                from kafkalite.testing.sim.controller_driver import SimControllerDriver

                self.controller = SimControllerDriver(self, epoch=won[0], epoch_version=won[1])
                self.sim.trace_note(f"b{self.id} is controller, epoch {won[0]}")
                self.controller.activate()

    def _disk_housekeeping(self, rep: SimReplica) -> None:
        if self.cfg.flush_mode == "always" or self.sim.rng.random() < self.cfg.flush_probability_per_tick:
            rep.disk.flushed = rep.leo
        rep.disk.hw_checkpoint = min(rep.hw, rep.disk.flushed)

    # ------------------------------------------------------------ LeaderAndIsr

    def handle_LeaderAndIsr(self, msg: Message) -> dict[str, Any]:
        body: LeaderAndIsr = msg.body
        if body.controller_epoch < self.controller_epoch_seen:
            return {"error": int(E.STALE_CONTROLLER_EPOCH)}
        if body.broker_epoch != self.broker_epoch:
            return {"error": int(E.STALE_BROKER_EPOCH)}
        self.controller_epoch_seen = body.controller_epoch
        results = []
        for p in body.partitions:
            tp, partition_epoch = p.topic_partition, p.partition_epoch
            state = LeaderAndIsrState(
                leader=p.leader, leader_epoch=p.leader_epoch, isr=p.isr,
                partition_epoch=p.partition_epoch, replicas=p.replicas,
                controller_epoch=body.controller_epoch,
            )
            rep = self.replica(tp)
            try:
                if state.leader_epoch < rep.state.leader_epoch:
                    results.append((tp, partition_epoch, int(E.FENCED_LEADER_EPOCH)))
                    continue
                if state.leader == self.id:
                    self._make_leader(rep, state)
                else:
                    self._make_follower(rep, state)
                results.append((tp, partition_epoch, 0))
            except CoreError as error:
                results.append((tp, partition_epoch, int(error.code)))
        return {"error": 0, "partitions": results}

    def _make_leader(self, rep: SimReplica, state: LeaderAndIsrState) -> None:
        new_epoch = state.leader_epoch > rep.state.leader_epoch or not rep.state.is_leader
        rep.state.become_leader(state, rep.leo, min(rep.hw, rep.leo), self.now, 0)
        rep.fetch = None
        if new_epoch:
            assign_epoch(rep.epochs, state.leader_epoch, rep.leo)
            self.sim.trace_note(f"b{self.id} leads {rep.tp} epoch {state.leader_epoch} at LEO {rep.leo} HW {rep.hw}")
            self.sim.checker.on_become_leader(self, rep, state.leader_epoch)
        self._hw_moved(rep.tp)

    def _make_follower(self, rep: SimReplica, state: LeaderAndIsrState) -> None:
        old_leader, old_epoch = rep.state.leader_id, rep.state.leader_epoch
        rep.state.become_follower(state, self.now)
        self._hw_moved(rep.tp)  # fails any acks=all waiting here: NOT_LEADER_OR_FOLLOWER
        self.alter_isr_inflight.discard(rep.tp)
        if state.leader >= 0 and (old_leader != state.leader or old_epoch != state.leader_epoch or rep.fetch is None):
            rep.fetch = FetchState(state.leader, state.leader_epoch)
            if self.cfg.bug_truncate_to_hw:
                # The seed's becomeFollower: "truncate the log to r.hw" (what KIP-101 fixed).
                self._truncate(rep, min(rep.hw, rep.leo))
                rep.fetch.truncating = False
            self.sim.node_after(self.id, 0, "fetch", lambda: self._maybe_fetch(rep.tp))
        elif state.leader < 0:
            rep.fetch = None

    # ------------------------------------------------------------ follower side

    def _maybe_fetch(self, tp: TP) -> None:
        rep = self.replicas.get(tp)
        fs = None if rep is None else rep.fetch
        if rep is None or fs is None or fs.inflight:
            return
        fs.inflight = True
        if fs.truncating:
            body = {"tp": tp, "current_leader_epoch": fs.leader_epoch, "epoch": latest_epoch(rep.epochs)}
            self.rpc(fs.leader, "OffsetsForLeaderEpoch", body, lambda r: self._on_epoch_answer(rep, fs, r))
            return
        last_fetched = -1 if self.cfg.bug_truncate_to_hw else latest_epoch(rep.epochs)
        body = {"tp": tp, "replica": self.id, "offset": rep.leo,
                "current_leader_epoch": fs.leader_epoch, "last_fetched_epoch": last_fetched}
        self.rpc(fs.leader, "ReplicaFetch", body, lambda r: self._on_fetch(rep, fs, r))

    def _fetch_again(self, rep: SimReplica, delay_ms: int) -> None:
        self.sim.node_after(self.id, delay_ms, "fetch", lambda: self._maybe_fetch(rep.tp))

    def _on_epoch_answer(self, rep: SimReplica, fs: FetchState, resp: dict[str, Any] | None) -> None:
        if rep.fetch is not fs or self.replicas.get(rep.tp) is not rep:
            return
        fs.inflight = False
        if resp is None or resp["error"] != 0:
            self._on_fetch_error(rep, fs, resp)
            return
        self._apply_truncation(rep, fs, (resp["epoch"], resp["end_offset"]))
        self._fetch_again(rep, 0)

    def _apply_truncation(self, rep: SimReplica, fs: FetchState, answer: tuple[int, int]) -> None:
        """KIP-101 (fetcher.py _apply_truncation)."""
        st = follower_truncation_state(rep.epochs, rep.leo, answer, local_hw=rep.hw)
        if st.truncate_to < rep.leo:
            self.sim.trace_note(f"b{self.id} {rep.tp} truncates {rep.leo}->{st.truncate_to} (leader said {answer})")
        self._truncate(rep, st.truncate_to)
        fs.truncating = not st.completed

    def _truncate(self, rep: SimReplica, offset: int) -> None:
        if offset < rep.leo:
            del rep.log[offset:]
            rep.disk.flushed = min(rep.disk.flushed, offset)
        truncate_epochs_from_end(rep.epochs, min(offset, rep.leo))  # also an empty epoch at the LEO
        if not rep.state.is_leader:
            rep.state.on_truncate(rep.leo)
        rep.initial_hw = min(rep.initial_hw, rep.leo)

    def _on_fetch(self, rep: SimReplica, fs: FetchState, resp: dict[str, Any] | None) -> None:
        if rep.fetch is not fs or self.replicas.get(rep.tp) is not rep:
            return
        fs.inflight = False
        if resp is None or resp["error"] != 0:
            self._on_fetch_error(rep, fs, resp)
            return
        if "diverging" in resp:
            self._apply_truncation(rep, fs, resp["diverging"])
            self._fetch_again(rep, 0)
            return
        assert resp["offset"] == rep.leo  # one fetch in flight; nothing else appends
        for leader_epoch, payload in resp["records"]:
            assign_epoch(rep.epochs, leader_epoch, rep.leo)
            rep.log.append((leader_epoch, payload))
        if self.cfg.flush_mode == "always":
            rep.disk.flushed = rep.leo
        rep.state.follower_update_hw(resp["hw"], rep.leo)
        self._fetch_again(rep, 0 if resp["records"] else self.cfg.fetch_backoff_ms)

    def _on_fetch_error(self, rep: SimReplica, fs: FetchState, resp: dict[str, Any] | None) -> None:
        code = None if resp is None else resp["error"]
        if code == E.OFFSET_OUT_OF_RANGE and resp is not None and rep.leo > resp.get("leo", -1) >= 0:
            fs.truncating = True  # should not happen with epoch truncation; re-run it
            self._fetch_again(rep, 0)
            return
        if code in (E.FENCED_LEADER_EPOCH, E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_TOPIC_OR_PARTITION):
            self._fetch_again(rep, 5 * self.cfg.fetch_backoff_ms)  # wait for LeaderAndIsr
            return
        self._fetch_again(rep, self.cfg.fetch_backoff_ms)

    # ------------------------------------------------------------ leader side

    def _leader_epoch_error(self, rep: SimReplica | None, current_leader_epoch: int) -> int:
        if rep is None:
            return int(E.NOT_LEADER_OR_FOLLOWER)
        return int(rep.state.validate_leader_epoch(current_leader_epoch))

    def handle_OffsetsForLeaderEpoch(self, msg: Message) -> dict[str, Any]:
        rep = self.replicas.get(msg.body["tp"])
        code = self._leader_epoch_error(rep, msg.body["current_leader_epoch"])
        if code != 0:
            return {"error": code}
        assert rep is not None
        if msg.body["epoch"] < 0:
            return {"error": 0, "epoch": -1, "end_offset": -1}
        answer = end_offset_for_epoch(rep.epochs, rep.leo, msg.body["epoch"])
        return {"error": 0, "epoch": answer.epoch, "end_offset": answer.end_offset}

    def handle_ReplicaFetch(self, msg: Message) -> dict[str, Any]:
        """replica_manager.read_partition for a follower."""
        body = msg.body
        rep = self.replicas.get(body["tp"])
        code = self._leader_epoch_error(rep, body["current_leader_epoch"])
        if code != 0:
            return {"error": code}
        assert rep is not None
        offset = body["offset"]
        diverging = diverging_epoch_check(rep.epochs, rep.leo, offset, body["last_fetched_epoch"])
        if diverging is not None:
            return {"error": 0, "diverging": (diverging.epoch, diverging.end_offset), "hw": rep.hw}
        if offset > rep.leo:
            return {"error": int(E.OFFSET_OUT_OF_RANGE), "leo": rep.leo}
        try:
            result = rep.state.update_follower_fetch(body["replica"], offset, rep.leo, self.now)
        except CoreError as error:
            return {"error": int(error.code), "leo": rep.leo}
        if result.alter_isr is not None:
            self.sim.trace_note(f"b{self.id} {rep.tp} propose expand ISR {result.alter_isr.new_isr}")
            self._send_alter_isr(result.alter_isr)
        if result.hw_changed:
            self._hw_moved(rep.tp)
        records = rep.log[offset: offset + self.cfg.fetch_records_max]
        return {"error": 0, "offset": offset, "records": records, "hw": rep.hw, "leo": rep.leo}

    # ------------------------------------------------------------ AlterIsr (KIP-497)

    def _send_alter_isr(self, item: AlterIsrItem) -> None:
        tp = (item.topic, item.partition)
        controller = self.sim.zk.controller_id() if self.zk_reachable() else -1
        if controller < 0:
            return  # no controller known: the tick re-sends the pending item
        self.alter_isr_inflight.add(tp)
        body = AlterIsrRequest(self.id, self.broker_epoch, (AlterIsrProposal(
            item.topic, item.partition, item.leader_id, item.leader_epoch, tuple(item.new_isr), item.partition_epoch),))
        self.rpc(controller, "AlterIsr", body, lambda r: self._on_alter_isr_response(item, r), idempotent=True)

    def _on_alter_isr_response(self, item: AlterIsrItem, resp: AlterIsrResponse | None) -> None:
        tp = (item.topic, item.partition)
        self.alter_isr_inflight.discard(tp)
        rep = self.replicas.get(tp)
        if rep is None:
            return
        new_state = None
        if resp is None:
            code = int(E.REQUEST_TIMED_OUT)
        elif resp.error != 0:
            code = resp.error
        else:
            (r,) = [r for r in resp.partitions if (r.topic, r.partition) == tp]
            code = r.error
            if r.leader >= 0 and r.leader in r.isr:
                new_state = LeaderAndIsrState(r.leader, r.leader_epoch, r.isr, r.partition_epoch, rep.state.replicas)
        if code == 0 and new_state is None:
            code = int(E.FENCED_LEADER_EPOCH)
        changed = rep.state.on_alter_isr_response(code, new_state, sent=item)
        if changed:
            self.sim.trace_note(f"b{self.id} {tp} AlterIsr answered {code}: ISR {rep.state.isr}")
        if code == 0 and rep.state.is_leader:
            rep.state.maybe_increment_hw(rep.leo)
            self._hw_moved(tp)

    # ------------------------------------------------------------ produce

    def _lookup(self, tp: Any) -> SimReplica | None:
        return self.replicas.get(tp)

    def handle_Produce(self, msg: Message) -> dict[str, Any] | None:
        tp, payload = msg.body["tp"], msg.body["payload"]
        rep = self.replicas.get(tp)
        if rep is None or not rep.state.is_leader:
            return {"error": int(E.NOT_LEADER_OR_FOLLOWER)}
        if rep.state.under_min_isr(self.cfg.min_insync_replicas):
            return {"error": int(E.NOT_ENOUGH_REPLICAS)}
        offset, epoch = rep.leo, rep.state.leader_epoch
        rep.log.append((epoch, payload))
        if self.cfg.flush_mode == "always":
            rep.disk.flushed = rep.leo
        rep.state.maybe_increment_hw(rep.leo)
        op = DelayedProduce({tp: ProducePartitionStatus(offset, epoch, self.cfg.min_insync_replicas)})
        op_id = self.sim.next_id()
        self.produce_ops[op_id] = (op, msg, offset, payload, epoch)
        deadline = self.now + self.cfg.produce_timeout_ms
        if self.purgatory.add(op_id, [tp], deadline, lambda: op.try_complete(self._lookup)):
            self._finish_produce(op_id)
        self._hw_moved(tp)
        return None

    def _hw_moved(self, tp: TP) -> None:
        for op_id in self.purgatory.check_and_complete(tp):
            self._finish_produce(op_id)

    def _finish_produce(self, op_id: int) -> None:
        op, msg, offset, payload, epoch = self.produce_ops.pop(op_id)
        tp = msg.body["tp"]
        code = int(op.result()[tp])
        if code == 0:
            self.sim.checker.on_ack(self, tp, epoch, offset, payload)
            self.respond(msg, {"error": 0, "offset": offset})
        else:
            self.respond(msg, {"error": code})

    # ------------------------------------------------------------ consumers

    def handle_Fetch(self, msg: Message) -> dict[str, Any]:
        """A consumer fetch: from the leader, only below the HW (DESIGN 5)."""
        tp, offset = msg.body["tp"], msg.body["offset"]
        rep = self.replicas.get(tp)
        if rep is None or not rep.state.is_leader:
            return {"error": int(E.NOT_LEADER_OR_FOLLOWER)}
        if offset > rep.leo:
            return {"error": int(E.OFFSET_OUT_OF_RANGE), "leo": rep.leo, "hw": rep.hw}
        hw = rep.hw
        records = rep.log[offset: min(hw, offset + self.cfg.fetch_records_max)] if offset < hw else []
        self.sim.checker.on_consumer_served(self, tp, offset, len(records), hw)
        return {"error": 0, "offset": offset, "records": records, "hw": hw}

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
        if controller < 0 or self.broker_epoch < 0:
            return
        self._shutdown_inflight = True
        body = ControlledShutdownRequest(self.id, self.broker_epoch)
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
