"""The controller role of a simulated broker: the simulator's driver of the core controller
(kafkalite.core.controller), the same object the real broker runs.

This module only does the controller's I/O in the simulated world, as
kafkalite/broker/controller.py does with kazoo and the RPC channel:
- ZooKeeper operations go to the ZooKeeper model, one znode at a time, so a session can
  be lost in the middle of a batch; their outcomes are resumed into the core.
- Requests for brokers go through one `SimSender` per registered broker, which follows
  kafkalite.core.controller_sends: in order, merged, resent until answered while the
  broker keeps its registration.
- UpdateMetadata is not delivered: simulated clients read leaders from the ZooKeeper model
  (see clients.py) and simulated brokers keep no metadata cache.
- ZooKeeper watches are modelled by polling the live broker set on every tick; a change is
  queued as an event, as a watch would queue it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalite.core import controller as core
from kafkalite.core.codes import ErrorCode
from kafkalite.core.controller_sends import SendQueue
from kafkalite.core.election import PartitionState
from kafkalite.core.messages import ControllerRequest, UpdateMetadata
from kafkalite.testing.sim import zk as zkm

if TYPE_CHECKING:
    from kafkalite.testing.sim.broker import SimBroker

TP = tuple[str, int]


class _ZooKeeperLost(Exception):
    """Our connection or session is gone: the running event cannot finish."""


class _ControllerMoved(Exception):
    """The controller epoch moved: another controller won."""


class SimSender:
    """Drives one broker's core SendQueue over the simulated network."""

    def __init__(self, owner: SimBroker, broker_id: int, broker_epoch: int) -> None:
        self.owner = owner
        self.queue = SendQueue(broker_id, broker_epoch)
        self.closed = False

    @property
    def broker_epoch(self) -> int:
        return self.queue.broker_epoch

    def send(self, request: ControllerRequest) -> None:
        self.queue.push(request)
        self._next()

    def _next(self) -> None:
        request = None if self.closed else self.queue.next()
        if request is not None:
            self._transmit()

    def _transmit(self) -> None:
        request = self.queue.in_flight
        assert request is not None
        self.owner.rpc(self.queue.broker_id, type(request).__name__, request, self._answered, idempotent=True)

    def _answered(self, response: dict[str, Any] | None) -> None:
        if self.closed:
            return
        if response is None:  # lost or timed out: again, for as long as the broker is registered
            self.owner.sim.node_after(self.owner.id, self.queue.failed(), "resend", self._resend)
            return
        self.queue.answered()
        self._next()

    def _resend(self) -> None:
        if not self.closed and self.queue.in_flight is not None:
            self._transmit()


class SimControllerDriver:
    def __init__(self, broker: SimBroker, epoch: int, epoch_version: int) -> None:
        self.broker = broker
        self.sim = broker.sim
        self.zk = broker.sim.zk
        self.epoch = epoch
        self.epoch_version = epoch_version
        self.core = core.Controller(broker.id, unclean_leader_election=broker.cfg.unclean_leader_election)
        self.queue: deque[Callable[[], core.ControllerEvent | None]] = deque()
        self.senders: dict[int, SimSender] = {}

    @property
    def active(self) -> bool:
        return self.broker.controller is self and self.broker.running

    # ------------------------------------------------------------ reads

    def _live_brokers(self) -> dict[int, core.LiveBroker]:
        live = {b: core.LiveBroker(b, epoch) for b, epoch in self.zk.live_brokers().items()}
        for bid, sender in list(self.senders.items()):
            if bid not in live or live[bid].epoch != sender.broker_epoch:
                sender.closed = True
                del self.senders[bid]
        for b in live.values():
            self.senders.setdefault(b.id, SimSender(self.broker, b.id, b.epoch))
        return live

    def activate(self) -> None:
        topics: dict[str, dict[int, tuple[int, ...]]] = {}
        for (t, p), replicas in sorted(self.sim.assignments.items()):
            topics.setdefault(t, {})[p] = tuple(replicas)
        states: dict[TP, PartitionState] = {}
        written_zxid: dict[TP, int] = {}
        for tp in sorted(self.sim.assignments):
            node = self.zk.get(zkm.state_path(tp))
            if node is not None:
                states[tp] = _from_znode(node)
                if self.broker.cfg.failover_detects_bounced_brokers:
                    written_zxid[tp] = node.mzxid
        self._run(core.Activated(self.epoch, self._live_brokers(), {t: core.Topic(ps) for t, ps in topics.items()},
                                 states, written_zxid))

    # ------------------------------------------------------------ events

    def enqueue(self, make: Callable[[], core.ControllerEvent | None]) -> None:
        """`make` builds the event when its turn comes (reading ZooKeeper then, as the
        broker's driver does), or returns None when there is nothing to do."""
        self.queue.append(make)
        self.sim.node_after(self.broker.id, self.sim.rng.randint(0, 2), "controller event", self._step)

    def _step(self) -> None:
        if not self.queue:
            return
        make = self.queue.popleft()
        if not self.active and self.core.active:
            self._execute(self.core.resign())  # the core refuses what comes next: NOT_CONTROLLER
        event = make()
        if event is not None:
            self._run(event)

    def broker_change(self) -> core.ControllerEvent | None:
        return core.BrokersChanged(self._live_brokers()) if self.broker.zk_reachable() else None

    def tick(self) -> None:
        if self.broker.zk_reachable() and self.zk.live_brokers() != {b: lb.epoch for b, lb in self.core.live.items()}:
            if self.broker_change not in self.queue:
                self.enqueue(self.broker_change)

    def resign(self, why: str) -> None:
        if self.broker.controller is self:
            self.sim.trace_note(f"b{self.broker.id} resigns as controller ({why})")
            self.broker.controller = None
        self._execute(self.core.resign())
        for sender in self.senders.values():
            sender.closed = True
        self.senders.clear()

    # ------------------------------------------------------------ running the core

    def _run(self, event: core.ControllerEvent) -> None:
        ready = self.core.handle(event, self.sim.sched.now_ms)
        while True:
            self._execute(ready)
            if ready.io is None:
                return
            try:
                outcome = self._perform(ready.io)
            except _ZooKeeperLost:
                self._execute(self.core.abort(ErrorCode.NOT_CONTROLLER))
                return
            except _ControllerMoved:
                self._execute(self.core.abort(ErrorCode.NOT_CONTROLLER))
                self.resign("controller epoch moved")
                return
            ready = self.core.resume(outcome, self.sim.sched.now_ms)

    def _execute(self, ready: core.Ready) -> None:
        for note in ready.notes:
            self.sim.trace_note(f"controller b{self.broker.id}: {note.text}")
        for send in ready.sends:
            if isinstance(send.request, UpdateMetadata):
                continue  # see the module docstring
            sender = self.senders.get(send.broker_id)
            if sender is not None and sender.broker_epoch == send.request.broker_epoch:
                sender.send(send.request)
        for answer in ready.answers:
            self.broker.respond(answer.reply_to, answer.response)

    def _perform(self, op: core.ZkOperation) -> Any:
        match op:
            case core.WriteStates(updates=updates):
                return {tp: self._write(tp, st, version) for tp, (st, version) in sorted(updates.items())}
            case core.CreateStates(states=states):
                return {tp: self._create(tp, st) for tp, st in sorted(states.items())}
        raise AssertionError(f"the simulation has no topic admin paths: {op!r}")

    def _check_session(self) -> None:
        if not self.broker.zk_reachable() or self.broker.sid not in self.zk.sessions:
            raise _ZooKeeperLost()

    def _write(self, tp: TP, st: PartitionState, expected_version: int) -> core.WriteOutcome:
        self._check_session()
        try:
            version = self.zk.write_state(tp, _znode_data(st), expected_version, self.epoch_version)
        except zkm.ControllerMovedError:
            raise _ControllerMoved() from None
        except zkm.BadVersionError:
            node = self.zk.get(zkm.state_path(tp))
            return core.Stale(None if node is None else _from_znode(node))
        self.sim.trace_note(f"controller b{self.broker.id} wrote {tp}: leader {st.leader} epoch {st.leader_epoch}"
                            f" ISR {list(st.isr)} v{version}")
        return core.Written(version)

    def _create(self, tp: TP, st: PartitionState) -> core.WriteOutcome:
        self._check_session()
        try:
            node = self.zk.create(zkm.state_path(tp), _znode_data(st))
        except zkm.NodeExistsError:
            current = self.zk.get(zkm.state_path(tp))
            return core.Stale(None if current is None else _from_znode(current))
        return core.Written(node.version)


def _znode_data(st: PartitionState) -> dict[str, Any]:
    return {"leader": st.leader, "leader_epoch": st.leader_epoch, "isr": list(st.isr), "controller_epoch": st.controller_epoch}


def _from_znode(node: zkm.Znode) -> PartitionState:
    d = node.data
    return PartitionState(d["leader"], d["leader_epoch"], tuple(d["isr"]), node.version, d["controller_epoch"])

