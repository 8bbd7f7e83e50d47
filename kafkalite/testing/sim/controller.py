"""The controller role of a simulated broker: one event queue, decisions from
kafkalite.core.election, conditional ZooKeeper writes fenced on the controller epoch,
LeaderAndIsr over the simulated network with retries until each broker (at the broker
epoch the controller knows) acknowledges the partition epoch it was sent.

Mirrors kafkalite/broker/controller.py except where the comment says why. ZooKeeper
watches are modelled by polling the live broker set on every tick (the change is then
queued as an event like a watch would be).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from kafkalite.core import election
from kafkalite.core.codes import ErrorCode
from kafkalite.core.replica_state import NO_LEADER
from kafkalite.testing.sim import zk as zkm
from kafkalite.testing.sim.world import Message

if TYPE_CHECKING:
    from kafkalite.testing.sim.broker import SimBroker

TP = tuple[str, int]
E = ErrorCode


class _Resigned(Exception):
    pass


class SimController:
    def __init__(self, broker: SimBroker, epoch: int, epoch_version: int) -> None:
        self.broker = broker
        self.sim = broker.sim
        self.zk = broker.sim.zk
        self.epoch = epoch
        self.epoch_version = epoch_version
        self.queue: deque[tuple[str, Any]] = deque()
        self.live: dict[int, int] = {}
        self.states: dict[TP, election.PartitionState] = {}
        self.assignments: dict[TP, tuple[int, ...]] = dict(self.sim.assignments)
        self.shutting_down: set[int] = set()
        self.unacked: dict[int, dict[TP, int]] = {}  # broker -> tp -> partition epoch sent
        self.last_retry_ms = self.sim.sched.now_ms

    @property
    def active(self) -> bool:
        return self.broker.controller is self and self.broker.running

    # ------------------------------------------------------------ failover (seed D)

    def activate(self) -> None:
        self.live = self.zk.live_brokers()
        for tp in sorted(self.assignments):
            node = self.zk.get(zkm.state_path(tp))
            if node is not None:
                self.states[tp] = self._from_znode(node)
        missing = [tp for tp in sorted(self.assignments) if tp not in self.states]
        if missing:
            decided = election.init_leaders({tp: self.assignments[tp] for tp in missing}, self.live)
            for tp, st in decided.items():
                node = self.zk.create(zkm.state_path(tp), self._znode_data(st.leader, st.leader_epoch, st.isr))
                self.states[tp] = election.PartitionState(st.leader, st.leader_epoch, st.isr, node.version, self.epoch)
        if self.broker.cfg.failover_detects_bounced_brokers:
            self._run(self._elect_away_from_bounced, None)
        for broker in sorted(self.live):
            self._send_leader_and_isr(broker, self._partitions_of(broker), init=True)
        self._run(self._elect_offline, set(self.live))

    def _elect_away_from_bounced(self, _data: Any) -> None:
        """A broker that registered (new broker epoch = czxid) after a partition's state
        was last written may have restarted while no controller was watching, losing its
        unflushed log suffix; it must not keep leading, or stay in the ISR, on the strength
        of that old state. Found by the simulator (flush_mode="random", seed 55 with this
        off): leader+controller b1 crashes, restarts before its session expires elsewhere,
        wins the controller election and re-leads epoch 0 with an empty log. Kafka's ZK
        controller has the same gap (KIP-966 closes it in KRaft)."""
        for tp in sorted(self.states):
            node = self.zk.get(zkm.state_path(tp))
            assert node is not None
            bounced = {b for b in self.states[tp].isr if b in self.live and self.live[b] > node.mzxid}
            if not bounced:
                continue
            unclean = {tp[0]: self.broker.cfg.unclean_leader_election}
            live = set(self.live) - bounced - self.shutting_down
            self._write_and_propagate(election.on_brokers_failed({tp: self.states[tp]}, self.assignments, live, unclean))

    def resign(self, why: str) -> None:
        if self.broker.controller is self:
            self.sim.trace_note(f"b{self.broker.id} resigns as controller ({why})")
            self.broker.controller = None

    # ------------------------------------------------------------ event queue

    def enqueue(self, kind: str, data: Any = None) -> None:
        self.queue.append((kind, data))
        self.sim.node_after(self.broker.id, self.sim.rng.randint(0, 2), "controller event", self._step)

    def _step(self) -> None:
        if not self.queue:
            return
        kind, data = self.queue.popleft()
        if not self.active:
            if isinstance(data, Message):
                self.broker.respond(data, {"error": int(E.NOT_CONTROLLER)})
            return
        self._run(getattr(self, f"_on_{kind}"), data)

    def _run(self, handler: Any, data: Any) -> None:
        try:
            handler(data)
        except _Resigned:
            if isinstance(data, Message):
                self.broker.respond(data, {"error": int(E.NOT_CONTROLLER)})

    def tick(self) -> None:
        if not self.broker.zk_reachable():
            return
        if self.zk.live_brokers() != self.live and ("broker_change", None) not in self.queue:
            self.enqueue("broker_change")
        if self.sim.sched.now_ms - self.last_retry_ms >= self.broker.cfg.leader_and_isr_retry_ms:
            self.last_retry_ms = self.sim.sched.now_ms
            for broker, tps in sorted(self.unacked.items()):
                if tps and broker in self.live:
                    self._send_leader_and_isr(broker, sorted(tps))

    # ------------------------------------------------------------ broker changes (seed A)

    def _on_broker_change(self, _data: Any) -> None:
        if not self.broker.zk_reachable():
            return
        current = self.zk.live_brokers()
        dead = {b for b in self.live if current.get(b) != self.live[b]}
        new = {b for b in current if self.live.get(b) != current[b]}
        if not dead and not new:
            return
        self.sim.trace_note(f"controller b{self.broker.id}: dead {sorted(dead)} new {sorted(new)}")
        self.live = current
        self.shutting_down -= dead | new
        for broker in dead:
            self.unacked.pop(broker, None)
        if dead:
            # Kafka handles a bounced broker (new broker epoch) as failed first, so it
            # does not keep leading with a fresh, empty replica state.
            self._elect_offline(set(current) - new)
        for broker in sorted(new):
            self._send_leader_and_isr(broker, self._partitions_of(broker))
        if new:
            self._elect_offline(set(current))

    def _elect_offline(self, live: set[int]) -> None:
        live = live - self.shutting_down
        unclean = {tp[0]: self.broker.cfg.unclean_leader_election for tp in self.assignments}
        changes = election.on_brokers_failed(self.states, self.assignments, live, unclean)
        self._write_and_propagate(changes)

    # ------------------------------------------------------------ writes

    def _write_and_propagate(self, changes: list[election.PartitionChange]) -> list[TP]:
        written = []
        for change in changes:
            if self._write(change):
                written.append(change.topic_partition)
        self._propagate(written)
        return written

    def _write(self, change: election.PartitionChange) -> bool:
        tp = change.topic_partition
        if not self.broker.zk_reachable() or self.broker.sid not in self.zk.sessions:
            raise _Resigned()  # connection or session lost: the event fails, nothing applied
        data = self._znode_data(change.leader, change.leader_epoch, change.isr)
        try:
            version = self.zk.write_state(tp, data, change.expected_version, self.epoch_version)
        except zkm.ControllerMovedError:
            self.resign("controller epoch moved")
            raise _Resigned() from None
        except zkm.BadVersionError:
            node = self.zk.get(zkm.state_path(tp))
            assert node is not None
            self.states[tp] = self._from_znode(node)
            return False
        self.states[tp] = election.PartitionState(change.leader, change.leader_epoch, tuple(change.isr), version, self.epoch)
        self.sim.trace_note(
            f"controller b{self.broker.id} wrote {tp}: leader {change.leader} epoch {change.leader_epoch}"
            f" ISR {list(change.isr)} v{version}{' UNCLEAN' if change.unclean else ''}"
        )
        return True

    def _znode_data(self, leader: int, leader_epoch: int, isr: Any) -> dict[str, Any]:
        return {"leader": leader, "leader_epoch": leader_epoch, "isr": list(isr), "controller_epoch": self.epoch}

    @staticmethod
    def _from_znode(node: zkm.Znode) -> election.PartitionState:
        d = node.data
        return election.PartitionState(d["leader"], d["leader_epoch"], tuple(d["isr"]), node.version, d["controller_epoch"])

    # ------------------------------------------------------------ LeaderAndIsr

    def _partitions_of(self, broker: int) -> list[TP]:
        return [tp for tp, replicas in sorted(self.assignments.items()) if broker in replicas]

    def _propagate(self, tps: list[TP]) -> None:
        per_broker: dict[int, list[TP]] = {}
        for tp in tps:
            for broker in self.assignments[tp]:
                if broker in self.live:
                    per_broker.setdefault(broker, []).append(tp)
        for broker, its in sorted(per_broker.items()):
            self._send_leader_and_isr(broker, its)

    def _send_leader_and_isr(self, broker: int, tps: list[TP], *, init: bool = False) -> None:
        if broker not in self.live:
            return
        partitions = []
        for tp in tps:
            st = self.states[tp]
            partitions.append((tp, st.leader, st.leader_epoch, tuple(st.isr), st.version, self.assignments[tp]))
            self.unacked.setdefault(broker, {})[tp] = st.version
        body = {"controller_id": self.broker.id, "controller_epoch": self.epoch,
                "broker_epoch": self.live[broker], "init": init, "partitions": partitions}
        self.broker.rpc(broker, "LeaderAndIsr", body,
                        lambda resp: self._on_leader_and_isr_response(broker, resp), idempotent=True)

    def _on_leader_and_isr_response(self, broker: int, resp: dict[str, Any] | None) -> None:
        if resp is None or resp["error"] != 0:
            return  # retried on the tick while the broker stays registered
        waiting = self.unacked.get(broker, {})
        for tp, partition_epoch, code in resp["partitions"]:
            # FENCED_LEADER_EPOCH: the broker already knows a newer epoch (from a later send).
            if waiting.get(tp) == partition_epoch and code in (0, int(E.FENCED_LEADER_EPOCH), int(E.STALE_CONTROLLER_EPOCH)):
                del waiting[tp]

    # ------------------------------------------------------------ AlterIsr (KIP-497)

    def _on_alter_isr(self, msg: Message) -> None:
        body = msg.body
        item = body["item"]
        code = election.validate_alter_isr_request(body["broker_id"], body["broker_epoch"], self.live, True)
        if code != 0:
            self.broker.respond(msg, {"error": int(code)})
            return
        tp = (item.topic, item.partition)
        current = self.states.get(tp)
        decision = election.validate_alter_isr(
            current, item, self.assignments.get(tp, ()), set(self.live), self.shutting_down
        )
        if decision.error == 0 and decision.write_needed:
            assert decision.new_state is not None
            change = election.PartitionChange(tp, decision.new_state.leader, decision.new_state.leader_epoch,
                                              decision.new_state.isr, decision.expected_version)
            if not self._write(change):
                self._answer_alter_isr(msg, tp, int(E.INVALID_UPDATE_VERSION))
                return
        self._answer_alter_isr(msg, tp, int(decision.error))

    def _answer_alter_isr(self, msg: Message, tp: TP, code: int) -> None:
        st = self.states.get(tp)
        state = (NO_LEADER, -1, (), -1) if st is None else (st.leader, st.leader_epoch, tuple(st.isr), st.version)
        self.broker.respond(msg, {"error": 0, "code": code, "state": state})

    # ------------------------------------------------------------ controlled shutdown

    def _on_controlled_shutdown(self, msg: Message) -> None:
        broker, broker_epoch = msg.body["broker_id"], msg.body["broker_epoch"]
        if self.live.get(broker) != broker_epoch:
            self.broker.respond(msg, {"error": int(E.STALE_BROKER_EPOCH)})
            return
        self.shutting_down.add(broker)
        changes, remaining = election.on_controlled_shutdown(
            broker, self.states, self.assignments, set(self.live), self.shutting_down
        )
        self._write_and_propagate(changes)
        self.broker.respond(msg, {"error": 0, "remaining": [list(tp) for tp in remaining]})
