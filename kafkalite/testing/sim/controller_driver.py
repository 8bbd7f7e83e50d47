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
  (see clients.py) and simulated brokers keep no metadata cache. The checker is told if a
  registration's first UpdateMetadata from a controller is not a full one.
- ZooKeeper watches are modelled by polling on every tick: the live broker set (compared
  with the controller's), /admin/reassign_partitions and /admin/partitions_add|remove
  (changed since the controller last read them: a watch set by a read fires on the next
  change); a change is queued as an event, as a watch would queue it. The event reads the
  znodes when its turn comes. An admin-path event that cannot read or finish on ZooKeeper
  is tried again once it answers, as kafkalite.broker.controller retries it.
- The process watch (issue 13, SimConfig.process_watch) is modelled from the simulation's
  ground truth on every tick: a live registration whose process crashed or restarted under
  another epoch, with the network between the two up, is reported gone after a random
  delay; a gone registration whose process runs unpaused is reported back, every tick
  until the core takes it back (and again after a report that met ZooKeeper down), however
  it came to be gone (the watch's own evidence, or the metadata cache's at activation):
  the broker's driver is level-triggered in the same way (kafkalite.broker.controller
  `_process_answers`, `_backs_answering`: every answer of the watched process, and after
  every event that finished, each gone registration whose watch stands answering). With
  `process_watch_false_evidence`, a running broker is reported gone now and then (a
  zombie, to check that the leader epochs keep it harmless).
- WaitForAnswers (StopReplica(delete) answers before a partition's znodes go) holds the
  running event, and every event queued behind it, until the brokers answered over the
  simulated network or its deadline passed in virtual time, as the broker's driver awaits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalite.core import controller as core
from kafkalite.core.codes import ErrorCode
from kafkalite.core.controller_sends import SendQueue
from kafkalite.core.election import PartitionState
from kafkalite.core.messages import ControllerRequest, StopReplica, UpdateMetadata
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

    def __init__(self, driver: SimControllerDriver, broker_id: int, broker_epoch: int) -> None:
        self.driver = driver
        self.owner = driver.broker
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
        request = self.queue.in_flight
        self.queue.answered()
        if isinstance(request, StopReplica):
            self.driver.on_stop_replica_answer(self.queue.broker_id, request, response)
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
        self.waiting: core.WaitForAnswers | None = None  # the running event awaits StopReplica answers
        # The admin-path "watches": the change count of each watched path when it was last
        # read (a watch is set by the read and fires on the next change).
        self._read_at: dict[str, int] = {prefix: -1 for prefix in zkm.WATCHED}
        # An event failed on ZooKeeper while active: the registrations are read again (and
        # elections left unwritten redone) once ZooKeeper answers, as the broker's driver
        # re-checks with a BrokerChange.
        self._recheck_brokers = False
        self._wait_started_ms = 0
        self._running: core.ControllerEvent | None = None  # the event being handled (or last handled)
        self._watch_reported: set[tuple[int, int, str]] = set()  # (broker, epoch, "gone"/"back") queued
        # Registrations (broker, epoch) sent an UpdateMetadata: the first must be full, or a
        # broker with nothing cached would list a topic with some of its partitions only.
        self._told_metadata: set[tuple[int, int]] = set()

    @property
    def active(self) -> bool:
        return self.broker.controller is self and self.broker.running

    # ------------------------------------------------------------ reads

    def _live_brokers(self) -> dict[int, core.LiveBroker]:
        unclean = self.zk.unclean_starts()
        live = {b: core.LiveBroker(b, epoch, unclean_start=b in unclean) for b, epoch in self.zk.live_brokers().items()}
        for bid, sender in list(self.senders.items()):
            if bid not in live or live[bid].epoch != sender.broker_epoch:
                sender.closed = True
                del self.senders[bid]
        for b in live.values():
            self.senders.setdefault(b.id, SimSender(self, b.id, b.epoch))
        return live

    def _topics(self) -> dict[str, core.Topic]:
        topics = {}
        for t in self.zk.topics():
            moving = self.zk.moving(t)
            topics[t] = core.Topic(self.zk.assignment(t), {}, {p: a for p, (a, _) in moving.items() if a},
                                   {p: r for p, (_, r) in moving.items() if r}, self.zk.topic_id(t))
        return topics

    def _reassignment(self) -> dict[TP, tuple[int, ...]]:
        self._read_at[zkm.REASSIGN] = self.zk.admin_changes[zkm.REASSIGN]
        return self.zk.reassignment() or {}

    def _admin_requests(self, kind: str) -> dict[TP, tuple[int, ...]]:
        prefix = zkm.partition_admin_prefix(kind)
        self._read_at[prefix] = self.zk.admin_changes[prefix]
        return self.zk.partition_admin_requests(kind)

    def activate(self) -> None:
        topics = self._topics()
        states: dict[TP, PartitionState] = {}
        written_zxid: dict[TP, int] = {}
        for tp in sorted((t, p) for t, topic in topics.items() for p in topic.partitions):
            node = self.zk.get(zkm.state_path(tp))
            if node is not None:
                states[tp] = _from_znode(node)
                if self.broker.cfg.failover_detects_bounced_brokers:
                    written_zxid[tp] = node.mzxid
        live = self._live_brokers()
        self._run(core.Activated(self.epoch, live, topics, states, written_zxid,
                                 reassignments=self._reassignment(), partitions_add=self._admin_requests("add"),
                                 partitions_remove=tuple(sorted(self._admin_requests("remove"))),
                                 gone=self._gone_at_activation(live)))

    def _gone_at_activation(self, live: dict[int, core.LiveBroker]) -> dict[int, int]:
        """What this broker's own process watches already know when it wins (the broker's
        driver passes its metadata cache's `gone`): registrations whose process is not
        running, and with `process_watch_false_evidence` now and then a running one."""
        cfg = self.broker.cfg
        if not cfg.process_watch:
            return {}
        gone = {}
        for bid, lb in sorted(live.items()):
            if bid == self.broker.id or self.sim.network.partitioned(self.broker.id, bid):
                continue
            other = self.sim.brokers[bid]
            if not other.running or other.broker_epoch != lb.epoch:
                gone[bid] = lb.epoch
            elif cfg.process_watch_false_evidence and self.sim.random_faults and \
                    self.sim.rng.random() < cfg.process_watch_false_evidence:
                self.sim.trace_note(f"b{self.broker.id} wins with WRONG evidence that b{bid} is gone")
                gone[bid] = lb.epoch
        return gone

    # ------------------------------------------------------------ events

    def enqueue(self, make: Callable[[], core.ControllerEvent | None]) -> None:
        """`make` builds the event when its turn comes (reading ZooKeeper then, as the
        broker's driver does), or returns None when there is nothing to do."""
        self.queue.append(make)
        self.sim.node_after(self.broker.id, self.sim.rng.randint(0, 2), "controller event", self._step)

    def _step(self) -> None:
        if not self.queue or self.waiting is not None:
            return  # the running event holds the queue; _maybe_end_wait steps again
        make = self.queue.popleft()
        if not self.active and self.core.active:
            self._core_resign()  # the core refuses what comes next: NOT_CONTROLLER
        event = make()
        if event is not None:
            self._run(event)

    def _kick(self) -> None:
        for _ in self.queue:
            self.sim.node_after(self.broker.id, self.sim.rng.randint(0, 2), "controller event", self._step)

    def broker_change(self) -> core.ControllerEvent | None:
        if not self.broker.zk_reachable():
            self._recheck_brokers = self._recheck_brokers or self.core.active
            return None
        self._recheck_brokers = False
        return core.BrokersChanged(self._live_brokers())

    def reassignment_change(self) -> core.ControllerEvent | None:
        if not self.broker.zk_reachable():
            return self._read_failed(zkm.REASSIGN)
        return core.ReassignmentsChanged(self._reassignment())

    def partitions_remove_change(self) -> core.ControllerEvent | None:
        if not self.broker.zk_reachable():
            return self._read_failed(zkm.partition_admin_prefix("remove"))
        found = self._admin_requests("remove")
        return core.PartitionsRemoveRequested(tuple(sorted(found))) if found else None

    def partitions_add_change(self) -> core.ControllerEvent | None:
        if not self.broker.zk_reachable():
            return self._read_failed(zkm.partition_admin_prefix("add"))
        found = self._admin_requests("add")
        return core.PartitionsAddRequested(found) if found else None

    def _read_failed(self, prefix: str) -> None:
        """An admin-path event could not read (or finish) on ZooKeeper: it is tried again
        once ZooKeeper answers, as kafkalite.broker.controller retries it. (The watch has
        fired already and will not fire again for that change.)"""
        self._read_at[prefix] = -1
        return None

    def tick(self) -> None:
        if not self.broker.zk_reachable():
            return
        if self._recheck_brokers or self.zk.live_brokers() != self.core.registrations():
            self._enqueue_once(self.broker_change)
        if self.broker.cfg.process_watch and self.core.active:
            self._watch_processes()
        for prefix, make in ((zkm.REASSIGN, self.reassignment_change),
                             (zkm.partition_admin_prefix("add"), self.partitions_add_change),
                             (zkm.partition_admin_prefix("remove"), self.partitions_remove_change)):
            if self.zk.admin_changes[prefix] != self._read_at[prefix]:
                self._read_at[prefix] = self.zk.admin_changes[prefix]  # fired; the event reads again
                self._enqueue_once(make)

    def _watch_processes(self) -> None:
        cfg = self.broker.cfg
        rng = self.sim.rng
        for bid, lb in sorted(self.core.live.items()):
            if bid == self.broker.id or self.sim.network.partitioned(self.broker.id, bid):
                continue
            other = self.sim.brokers[bid]
            if not other.running or other.broker_epoch != lb.epoch:
                self._report(bid, lb.epoch, "gone")
            elif cfg.process_watch_false_evidence and self.sim.random_faults and \
                    rng.random() < cfg.process_watch_false_evidence:
                self.sim.trace_note(f"process watch of b{self.broker.id}: WRONG evidence that b{bid} is gone")
                self._report(bid, lb.epoch, "gone")
        for bid, epoch in sorted(self.core.gone.items()):
            other = self.sim.brokers[bid]
            if other.running and not other.paused and other.broker_epoch == epoch and \
                    not self.sim.network.partitioned(self.broker.id, bid):
                self._report(bid, epoch, "back")

    def _report(self, bid: int, epoch: int, kind: str) -> None:
        key = (bid, epoch, kind)
        if key in self._watch_reported:
            return
        self._watch_reported.add(key)

        def make() -> core.ControllerEvent | None:
            self._watch_reported.discard(key)
            if kind == "gone":
                return core.BrokerProcessGone(bid, epoch)
            return (core.BrokerProcessBack(core.LiveBroker(bid, epoch, unclean_start=bid in self.zk.unclean_starts()))
                    if self.broker.zk_reachable() else None)

        delay = self.sim.rng.randint(1, self.broker.cfg.process_watch_delay_ms_max)
        self.sim.node_after(self.broker.id, delay, f"process watch: b{bid} {kind}", lambda: self.enqueue(make))

    def _enqueue_once(self, make: Callable[[], core.ControllerEvent | None]) -> None:
        if make not in self.queue:
            self.enqueue(make)

    def resign(self, why: str) -> None:
        if self.broker.controller is self:
            self.sim.trace_note(f"b{self.broker.id} resigns as controller ({why})")
            self.broker.controller = None
        self._core_resign()
        for sender in self.senders.values():
            sender.closed = True
        self.senders.clear()

    def _core_resign(self) -> None:
        if self.waiting is not None:
            self._wait_ended()  # the core drops the running event
        self._execute(self.core.resign())

    def _wait_ended(self) -> None:
        self.waiting = None
        waited_ms = self.sim.sched.now_ms - self._wait_started_ms
        self.sim.controller_waited_ms_max = max(self.sim.controller_waited_ms_max, waited_ms)

    # ------------------------------------------------------------ StopReplica answers

    def on_stop_replica_answer(self, broker_id: int, request: StopReplica, response: dict[str, Any]) -> None:
        self.core.on_answer(core.BrokerAnswered(broker_id, request, int(response.get("error", 0))))
        if self.waiting is not None:
            self.sim.node_after(self.broker.id, 0, "controller answers", self._maybe_end_wait)

    def _wait_over(self, op: core.WaitForAnswers) -> bool:
        return self.core.answered(op.brokers) or self.sim.sched.now_ms >= op.deadline_ms

    def _maybe_end_wait(self) -> None:
        op = self.waiting
        if op is None or not self._wait_over(op):
            return
        assert self.core.busy
        self._wait_ended()
        self.sim.trace_note(f"controller b{self.broker.id} done waiting for StopReplica answers")
        self._continue(self.core.resume(None, self.sim.sched.now_ms))
        self._kick()

    # ------------------------------------------------------------ running the core

    def _run(self, event: core.ControllerEvent) -> None:
        self._running = event
        self._continue(self.core.handle(event, self.sim.sched.now_ms))

    def _continue(self, ready: core.Ready) -> None:
        while True:
            self._execute(ready)
            if ready.io is None:
                return
            if isinstance(ready.io, core.WaitForAnswers) and not self._wait_over(ready.io):
                self.waiting = ready.io
                self._wait_started_ms = self.sim.sched.now_ms
                self.sim.trace_note(f"controller b{self.broker.id} waits for StopReplica answers from"
                                    f" {sorted(ready.io.brokers)} until t={ready.io.deadline_ms}")
                delay = ready.io.deadline_ms - self.sim.sched.now_ms
                self.sim.node_after(self.broker.id, delay, "controller wait deadline", self._maybe_end_wait)
                return
            try:
                outcome = self._perform(ready.io)
            except _ZooKeeperLost:
                self._execute(self.core.abort(ErrorCode.NOT_CONTROLLER))
                self._aborted(self._running)
                return
            except _ControllerMoved:
                self._execute(self.core.abort(ErrorCode.NOT_CONTROLLER, deposed=True))
                self.resign("controller epoch moved")
                return
            ready = self.core.resume(outcome, self.sim.sched.now_ms)

    def _aborted(self, event: core.ControllerEvent | None) -> None:
        """An event failed on ZooKeeper: admin-path work is tried again (a failover's too:
        it ends with the admin paths, seed D 7-9), as kafkalite.broker.controller does."""
        prefixes = {core.ReassignmentsChanged: [zkm.REASSIGN], core.PartitionsAddRequested: [zkm.partition_admin_prefix("add")],
                    core.PartitionsRemoveRequested: [zkm.partition_admin_prefix("remove")],
                    core.Activated: list(zkm.WATCHED)}.get(type(event), [])
        for prefix in prefixes:
            self._read_failed(prefix)
        if self.core.active:
            self._recheck_brokers = True

    def _execute(self, ready: core.Ready) -> None:
        for note in ready.notes:
            self.sim.trace_note(f"controller b{self.broker.id}: {note.text}")
        for send in ready.sends:
            if isinstance(send.request, UpdateMetadata):  # not delivered (see the module docstring); checked:
                told = (send.broker_id, send.request.broker_epoch)
                if told not in self._told_metadata and not send.request.full:
                    self.sim.checker.fail(f"controller b{self.broker.id} (epoch {self.epoch}) sent b{told[0]} (epoch {told[1]}) "
                                          "a partial UpdateMetadata before a full one")
                self._told_metadata.add(told)
                continue
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
            case core.WaitForAnswers():
                return None  # over: answered, or the deadline passed (see _continue)
            case core.WriteTopic(topic=topic, assignment=assignment):
                version = self._fenced(lambda: self.zk.write_topic(topic, _topic_data(assignment), self.epoch_version))
                self.sim.trace_note(f"controller b{self.broker.id} wrote topic {topic}: {_describe(assignment)} v{version}")
                return core.Written(version)
            case core.RemoveReassignments(partitions=tps):
                self._fenced(lambda: self.zk.remove_reassignment_entries(tps, self.epoch_version))
                return None
            case core.DeletePartitions(partitions=tps):
                self._fenced(lambda: self.zk.delete_partitions(tps, self.epoch_version))
                self.sim.trace_note(f"controller b{self.broker.id} deleted the znodes of {list(tps)}")
                return None
            case core.DeletePartitionAdminZnodes(kind=kind, partitions=tps):
                self._fenced(lambda: self.zk.delete_partition_admin_requests(kind, tps, self.epoch_version))
                return None
        raise AssertionError(f"the simulation has no such ZooKeeper operation: {op!r}")

    def _fenced(self, write: Callable[[], Any]) -> Any:
        """A controller write fenced on the controller epoch (a ZooKeeper multi with a
        check of /controller_epoch), from a broker that still holds its session."""
        self._check_session()
        try:
            return write()
        except zkm.ControllerMovedError:
            raise _ControllerMoved() from None

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


def _topic_data(topic: core.Topic) -> dict[str, Any]:
    return {"partitions": {p: list(r) for p, r in sorted(topic.partitions.items())},
            "adding": {p: list(r) for p, r in sorted(topic.adding.items()) if r},
            "removing": {p: list(r) for p, r in sorted(topic.removing.items()) if r}, "topic_id": topic.topic_id}


def _describe(topic: core.Topic) -> str:
    parts = []
    for p, replicas in sorted(topic.partitions.items()):
        moving = f" +{list(topic.adding[p])}" if topic.adding.get(p) else ""
        moving += f" -{list(topic.removing[p])}" if topic.removing.get(p) else ""
        parts.append(f"{p}:{list(replicas)}{moving}")
    return " ".join(parts)


def _znode_data(st: PartitionState) -> dict[str, Any]:
    return {"leader": st.leader, "leader_epoch": st.leader_epoch, "isr": list(st.isr), "controller_epoch": st.controller_epoch}


def _from_znode(node: zkm.Znode) -> PartitionState:
    d = node.data
    return PartitionState(d["leader"], d["leader_epoch"], tuple(d["isr"]), node.version, d["controller_epoch"])

