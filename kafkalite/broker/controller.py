"""The controller role's asyncio driver (DESIGN.md sections 6 and 10).

Every decision is made by `kafkalite.core.controller.Controller`; this module only does its
I/O. ZooKeeper watches and RPC handlers enqueue a `controller_events` event; one task
drains the queue, reads from ZooKeeper what the event needs, hands the core event in, and
executes the `Ready` it gets back: requests go to the `ControllerChannel`, answers to the
waiting futures, and the one ZooKeeper operation is performed (in the executor, kazoo is
blocking) and its outcome resumed, until the event is finished. One event at a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafkalite.aio import cancel_and_wait, spawn
from kafkalite.broker.broker_watch import ProcessWatches
from kafkalite.broker.controller_channel import ControllerChannel
from kafkalite.broker.controller_events import (
    AlterIsr,
    AutoRebalance,
    BrokerChange,
    ConfigChange,
    ControlledShutdown,
    ControllerEvent,
    Elect,
    LogDirFailuresChange,
    PartitionsAddChange,
    PartitionsRemoveChange,
    PreferredElection,
    PreferredElectionZnode,
    ProcessBack,
    ProcessGone,
    ReassignmentChange,
    Replying,
    Resign,
    TopicChange,
    TopicDeletion,
    name_of,
)
from kafkalite.clock import monotonic_ms
from kafkalite.core import controller as core
from kafkalite.core.codes import ErrorCode
from kafkalite.core.election import PartitionState
from kafkalite.core.messages import ControllerRequest, StopReplica
from kafkalite.gc_pause import gc_paused
from kafkalite.zk import codec, paths
from kafkalite.zk.errors import ControllerMovedError, StaleZnodeVersionError, ZkError, ZnodeDecodeError, ZnodeExistsError

if TYPE_CHECKING:
    from kafkalite.broker.metrics import BrokerMetrics
    from kafkalite.zk.client import ZkAdapter

log = logging.getLogger(__name__)

TP = tuple[str, int]
ELECTION_RETRY_S = 0.5  # after a failover (or an admin-path event) that failed on ZooKeeper
# Admin-path events read their znode when they run. One that fails on ZooKeeper (a
# connection loss that keeps the session) would otherwise be lost: kazoo's watch recipes
# delivered the change already and call again only on the next one, so a reassignment, or
# a partition add or removal, waited for the next admin change or controller failover
# (found by the simulator, issue 9, sweep seed 60). Running one again is harmless: each
# re-reads its znode and decides from what it finds. So does a topic change: a new topic
# whose state znodes ZooKeeper failed to create (all or some of them) gets them when it
# runs again (the core's `_create_uncreated`), not at the next topic change or failover.
# The same holds for a topic deletion, a preferred election and the log-dir reports, which
# read their znodes too, and for a broker change: it re-reads the registrations and elects
# for every partition whose leader is gone, so it also re-checks after any other event
# that failed on ZooKeeper while active (a broker failure's elections, left unwritten,
# were otherwise redone only at the next broker change or failover).
RETRIED_AFTER_ZK_ERROR = (ReassignmentChange, PartitionsAddChange, PartitionsRemoveChange, ConfigChange, TopicChange,
                          TopicDeletion, PreferredElectionZnode, LogDirFailuresChange, BrokerChange)
CONFIG_CHANGE_EXPIRATION_S = 15 * 60


class Controller:
    def __init__(self, broker_id: int, settings: Mapping[str, Any], metrics: BrokerMetrics,
                 on_fatal: Callable[[BaseException], None]):
        self.broker_id = broker_id
        self.settings = settings
        self.zk: ZkAdapter = None  # type: ignore[assignment]  # attached by start(), once the session is up
        self.metrics = metrics
        self.on_fatal = on_fatal  # a bug in the controller ends the process: another broker takes over
        self.core = core.Controller(broker_id, unclean_leader_election=bool(settings["unclean.leader.election.enable"]))
        self.queue: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self.epoch_zk_version: int | None = None
        self.channel: ControllerChannel | None = None
        self.watches: ProcessWatches | None = None  # while active, if process.watch.enable
        self.rpc_secret: bytes | None = None  # the inter-broker RPC secret (kafkalite.rpc.auth), set by the broker
        self._answered = asyncio.Event()  # a broker answered a request the core waits on
        self._spent = [0.0, 0.0]  # the current event's core steps and ZooKeeper operations (s), for its log line
        self._task: asyncio.Task | None = None
        self._rebalance_task: asyncio.Task | None = None
        self._owned: set[asyncio.Task] = set()
        self._retries_due: set[type] = set()  # kinds of event a retry of is scheduled (_retry_later)
        self._backs_queued: set[tuple[int, int]] = set()  # (broker, epoch) of the ProcessBack events in the queue
        self._unclean_counted = 0
        self._config_change_seen = ""  # the last /config/changes notification handled (issue 16)
        # Set by the broker: registrations (broker -> epoch) its own process watches found
        # gone. A new controller starts from them instead of waiting for its own watches to
        # find the same again (issue 13: the controller's death is often also a broker's).
        self.gone_evidence: Callable[[], Mapping[int, int]] = dict

    @property
    def active(self) -> bool:
        return self.core.active

    def describe(self) -> dict[str, Any]:
        return self.core.describe()

    # -- plumbing -----------------------------------------------------------------------
    def start(self, zk: ZkAdapter) -> None:
        self.zk = zk
        self._task = spawn(self._run(), name="controller-events", owner=self._owned)
        self._task.add_done_callback(lambda t: None if t.cancelled() or t.exception() is None else self.on_fatal(t.exception()))

    def enqueue(self, event: ControllerEvent) -> None:
        self.queue.put_nowait(event)

    async def _zk(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))

    async def _run(self) -> None:
        while True:
            ev = await self.queue.get()
            if isinstance(ev, ProcessBack):
                self._backs_queued.discard((ev.broker_id, ev.epoch))
            started = time.monotonic()
            self._spent = [0.0, 0.0]  # this event's core steps, its ZooKeeper operations (s)
            failed = True
            try:
                await self._handle(ev)
                failed = False
            except ControllerMovedError as e:
                log.warning("controller epoch moved under us (%s): resigning", e)
                self._execute(self.core.abort(ErrorCode.NOT_CONTROLLER, deposed=True))
                await self._resign()
            except ZkError as e:
                log.warning("controller event %s failed on ZooKeeper: %s", name_of(ev), e)
                self._execute(self.core.abort(ErrorCode.NOT_CONTROLLER))
                if isinstance(ev, Elect) and not self.core.active:
                    # We may hold /controller without acting as controller: try again (the
                    # election recognises our own /controller) until we act or it is gone.
                    spawn(self._elect_again_after(ELECTION_RETRY_S), name="controller-elect-retry", owner=self._owned)
                elif isinstance(ev, Elect) and self.core.active:
                    # A failover that failed after it became active ends with the admin
                    # paths (seed D 7-9): those are tried again (sweep seed 2307).
                    for admin in RETRIED_AFTER_ZK_ERROR:
                        self._retry_later(admin())
                elif self.core.active:
                    if isinstance(ev, RETRIED_AFTER_ZK_ERROR):
                        self._retry_later(ev)
                    self._retry_later(BrokerChange())
            self._sync_watches()
            if not failed:  # after a failure, once the BrokerChange retried in ELECTION_RETRY_S succeeds
                self._backs_answering()
            took_ms = (time.monotonic() - started) * 1000
            if took_ms > 100:
                log.info("controller event %s took %.0f ms (core %.0f ms, its ZooKeeper operations %.0f ms)", name_of(ev), took_ms,
                         self._spent[0] * 1000, self._spent[1] * 1000)
            if isinstance(ev, Replying) and not ev.reply.done():
                ev.reply.set_result({"error": int(ErrorCode.NOT_CONTROLLER)})  # refused before reaching the core

    async def _handle(self, ev: ControllerEvent) -> None:
        match ev:
            case Elect():
                await self._elect()
            case Resign():
                await self._resign()
            case _ if not self.core.active:
                return
            case BrokerChange():
                await self._run_core(core.BrokersChanged(await self._read_brokers()))
            case ProcessGone(broker_id=bid, epoch=epoch):
                await self._run_core(core.BrokerProcessGone(bid, epoch))
                if self.core.gone.get(bid) == epoch and self.channel is not None:
                    # Nothing more for it, and what was in flight to it holds no one's
                    # metadata (the UpdateMetadata barrier) any longer.
                    self.channel.remove_broker(bid)
            case ProcessBack(broker_id=bid, epoch=epoch):
                brokers = await self._read_brokers()
                found = brokers.get(bid)
                if found is not None and found.epoch == epoch:
                    await self._run_core(core.BrokerProcessBack(found))
                elif self.core.gone.get(bid) == epoch:
                    # That registration left /brokers/ids (deleted, or replaced by its process
                    # registering anew, which still answers the watch): a broker change, handled
                    # as one; it ends the core's gone entry, so _backs_answering stops asking.
                    await self._run_core(core.BrokersChanged(brokers))
            case LogDirFailuresChange():
                reports = await self._zk(self.zk.get_log_dir_failures)
                await self._run_core(core.ReplicasOffline(reports))
            case TopicChange():
                await self._run_core(await self._read_topic_change())
            case ConfigChange():
                await self._on_config_change()
            case TopicDeletion():
                marked = await self._zk(self.zk.get_topics_marked_for_deletion)
                if marked:
                    await self._run_core(core.TopicsMarkedForDeletion(tuple(marked)))
            case PreferredElectionZnode():
                requested = await self._read_preferred_election_znode()
                if requested is not None:
                    await self._run_core(core.PreferredElectionZnode(requested))
            case PreferredElection(partitions=partitions, reply=reply):
                await self._run_core(core.PreferredElectionRequested(None if partitions is None else tuple(partitions), reply))
            case ReassignmentChange():
                wanted, throttle = await self._read_reassignment()
                await self._run_core(core.ReassignmentsChanged(wanted, throttle))
            case PartitionsAddChange():
                adds = await self._zk(self.zk.get_partition_admin_requests, "add")
                if adds:
                    await self._run_core(core.PartitionsAddRequested({tp: tuple(r) for tp, r in adds.items()}))
            case PartitionsRemoveChange():
                removes = await self._zk(self.zk.get_partition_admin_requests, "remove")
                if removes:
                    await self._run_core(core.PartitionsRemoveRequested(tuple(sorted(removes))))
            case AutoRebalance():
                await self._run_core(core.AutoRebalanceDue(float(self.settings["leader.imbalance.per.broker.percentage"])))
            case AlterIsr(request=request, reply=reply):
                await self._run_core(core.AlterIsrRequested(request, reply))
            case ControlledShutdown(broker_id=bid, broker_epoch=epoch, reply=reply):
                await self._run_core(core.ControlledShutdownRequested(bid, epoch, reply))
            case _:
                raise AssertionError(f"unhandled controller event {ev!r}")

    async def _run_core(self, event: core.ControllerEvent) -> None:
        # Each synchronous step may decide for every partition (a failover, a broker
        # failure): with the collector paused (kafkalite.gc_pause), never across an await.
        spent = self._spent
        t = time.monotonic()
        with gc_paused():
            ready = self.core.handle(event, monotonic_ms())
            self._execute(ready)
        while ready.io is not None:
            t2 = time.monotonic()
            spent[0] += t2 - t
            outcome = await self._perform(ready.io)
            t = time.monotonic()
            spent[1] += t - t2
            with gc_paused():
                ready = self.core.resume(outcome, monotonic_ms())
                self._execute(ready)
        spent[0] += time.monotonic() - t

    def _execute(self, ready: core.Ready) -> None:
        for note in ready.notes:
            log.log(logging.WARNING if note.level == "warning" else logging.INFO, "controller: %s", note.text)
        if ready.sends:
            self._senders_for_live()
        for send in ready.sends:
            self._send(send.broker_id, send.request)
        for answer in ready.answers:
            if not answer.reply_to.done():
                answer.reply_to.set_result(answer.response.to_wire())
        if self.core.unclean_elections > self._unclean_counted:
            self.metrics.unclean_elections.inc(self.core.unclean_elections - self._unclean_counted)
            self._unclean_counted = self.core.unclean_elections

    def _send(self, broker_id: int, request: ControllerRequest) -> None:
        assert self.channel is not None
        future = None
        if isinstance(request, StopReplica):
            future = asyncio.get_running_loop().create_future()
            future.add_done_callback(lambda f, b=broker_id, r=request: self._on_stop_replica_answer(b, r, f))
        self.channel.send(broker_id, request, future)

    def _on_stop_replica_answer(self, broker_id: int, request: StopReplica, future: asyncio.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        self.core.on_answer(core.BrokerAnswered(broker_id, request, int(future.result().get("error", 0))))
        self._answered.set()

    # -- ZooKeeper operations -----------------------------------------------------------
    async def _perform(self, op: core.ZkOperation) -> Any:
        match op:
            case core.WriteStates(updates=updates):
                results = await self._zk(self.zk.update_partition_states, updates, self.epoch_zk_version)
                return await self._outcomes(results)
            case core.CreateStates(states=states):
                results = await self._zk(self.zk.create_partition_states, states, self.epoch_zk_version)
                return await self._outcomes(results)
            case core.DeleteTopic(topic=topic):
                await self._zk(self.zk.delete_topic_znodes, topic, self.epoch_zk_version)
            case core.DeletePreferredElectionZnode():
                await self._zk(self.zk.delete_if_exists, paths.preferred_replica_election_path(), self.epoch_zk_version)
            case core.WriteTopic(topic=topic, assignment=assignment):
                return core.Written(await self._zk(self.zk.write_topic_assignment, topic, _to_assignment(assignment), self.epoch_zk_version))
            case core.RemoveReassignments(partitions=tps):
                await self._zk(self.zk.remove_reassignment_entries, tps, self.epoch_zk_version)
            case core.DeletePartitions(partitions=tps):
                await self._zk(self.zk.delete_partitions, tps, self.epoch_zk_version)
            case core.DeletePartitionAdminZnodes(kind=kind, partitions=tps):
                await self._zk(self.zk.delete_partition_admin_requests, kind, tps, self.epoch_zk_version)
            case core.WaitForAnswers(brokers=brokers, deadline_ms=deadline_ms):
                while not self.core.answered(brokers) and monotonic_ms() < deadline_ms:
                    self._answered.clear()
                    try:
                        await asyncio.wait_for(self._answered.wait(), timeout=(deadline_ms - monotonic_ms()) / 1000)
                    except TimeoutError:
                        break
            case _:
                raise AssertionError(f"unknown ZooKeeper operation {op!r}")
        return None

    async def _outcomes(self, results: Mapping[TP, Any]) -> dict[TP, core.WriteOutcome]:
        """Per partition: Written, or Stale with what is in ZooKeeper now, or Failed."""
        if any(isinstance(r, ControllerMovedError) for r in results.values()):
            raise next(r for r in results.values() if isinstance(r, ControllerMovedError))
        outcomes: dict[TP, core.WriteOutcome] = {}
        stale = [tp for tp, r in results.items() if isinstance(r, (StaleZnodeVersionError, ZnodeExistsError))]
        fresh = await self._zk(self.zk.get_partition_states, stale) if stale else {}
        for tp, r in results.items():
            if tp in stale:
                outcomes[tp] = core.Stale(_from_znode(*fresh[tp]) if tp in fresh else None)
            elif isinstance(r, Exception):
                outcomes[tp] = core.Failed(str(r))
            else:
                outcomes[tp] = core.Written(int(r))
        return outcomes

    # -- reads --------------------------------------------------------------------------
    async def _read_brokers(self) -> dict[int, core.LiveBroker]:
        brokers = await self._zk(self.zk.get_brokers)
        live = {b: core.LiveBroker(b, epoch, reg.host, reg.port, reg.inter_broker_port, reg.admin_port, reg.rack, reg.endpoints,
                                   reg.unclean_start)
                for b, (reg, epoch) in brokers.items()}
        self._sync_channel(live)
        return live

    def _senders_for_live(self) -> None:
        """A sender for every broker the core holds live, before its sends go out. The core
        can make a registration live without a read of /brokers/ids to sync the channel: a
        broker whose process was found gone and answers again (BrokerProcessBack) is read
        while still gone, so _sync_channel skips it, and the core's LeaderAndIsr and
        UpdateMetadata for it then found no sender and were dropped: it stayed on its old
        leader epochs, fenced by its leaders and out of every ISR, until some other broker
        change (the netns quorum-loss test, once in a full suite). Only a missing sender is
        added: one for another epoch comes from a newer read of /brokers/ids than the core
        has handled yet, and stays."""
        assert self.channel is not None
        for b in self.core.live.values():
            if b.id not in self.channel.senders:
                self.channel.add_broker(b.id, b.epoch, b.host, b.inter_broker_port)

    def _sync_channel(self, live: Mapping[int, core.LiveBroker]) -> None:
        """One sender per registered broker (and epoch); a broker that left or re-registered
        gets nothing more that was queued for its old registration."""
        assert self.channel is not None
        live = {b: v for b, v in live.items() if self.core.gone.get(b) != v.epoch}  # gone: no sender
        for b in live.values():
            self.channel.add_broker(b.id, b.epoch, b.host, b.inter_broker_port)
        for bid in list(self.channel.senders):
            if bid not in live:
                self.channel.remove_broker(bid)

    async def _read_topics(self, names: list[str]) -> tuple[dict[str, core.Topic], dict[TP, PartitionState], dict[TP, int]]:
        assignments = await self._zk(self.zk.get_topic_assignments, names)
        topics = {t: _from_assignment(a) for t, (a, _v) in assignments.items()}
        tps = [(t, p) for t, topic in topics.items() for p in topic.partitions]
        loaded = await self._zk(self.zk.get_partition_state_tuples, tps)
        with gc_paused():
            states = {tp: PartitionState(leader, epoch, isr, version, controller_epoch)
                      for tp, ((leader, epoch, isr, controller_epoch), version, _mzxid) in loaded.items()}
            return topics, states, {tp: mzxid for tp, (_st, _v, mzxid) in loaded.items()}

    async def _read_topic_change(self) -> core.TopicsChanged:
        present = frozenset(await self._zk(self.zk.get_topics))
        topics, states, _ = await self._read_topics(self.core.topics_to_load(present))
        return core.TopicsChanged(present, topics, states)

    async def _read_reassignment(self) -> tuple[dict[TP, tuple[int, ...]], dict[str, int]]:
        """/admin/reassign_partitions (nothing when it is gone; an unreadable one is logged
        and treated as gone, which cancels: the CLI never writes one)."""
        try:
            found = await self._zk(self.zk.get_reassignment)
        except ZnodeDecodeError as e:
            log.warning("unreadable reassignment znode: %s", e)
            return {}, {}
        if found is None:
            return {}, {}
        value, _version = found
        return dict(value.partitions), dict(value.throttle)

    async def _read_preferred_election_znode(self) -> tuple[TP, ...] | None:
        raw = await self._zk(self.zk.get, paths.preferred_replica_election_path())
        if raw is None:
            return None
        try:
            return tuple((str(t), int(p)) for t, p in json.loads(raw[0].decode()).get("partitions", []))
        except (ValueError, TypeError, AttributeError):
            log.warning("unreadable %s; removing it", paths.preferred_replica_election_path())
            return ()

    async def _on_config_change(self) -> None:
        """Issue 16: topics named by new /config/changes notifications get their configs
        re-read and sent to every broker. Notifications older than CONFIG_CHANGE_EXPIRATION_S
        are removed (Kafka's 15 minutes: every broker has seen them)."""
        changes = await self._zk(self.zk.get_config_changes)
        new = [(n, e) for n, e, _t in changes if n > self._config_change_seen]
        topics = sorted({e.partition("/")[2] for _n, e in new if e is not None and e.startswith("topics/")})
        if topics:
            assignments = await self._zk(self.zk.get_topic_assignments, topics)
            await self._run_core(core.TopicConfigsChanged({t: dict(a.config) for t, (a, _v) in assignments.items()}))
        if new:  # only once handled: a ZooKeeper error above retries them (RETRIED_AFTER_ZK_ERROR)
            self._config_change_seen = max(n for n, _e in new)
        expired = [n for n, _e, ctime in changes if ctime and time.time() - ctime > CONFIG_CHANGE_EXPIRATION_S]
        for name in expired:
            await self._zk(self.zk.delete_if_exists, paths.config_change_path(name), self.epoch_zk_version)

    # -- election and failover (seed section D) ------------------------------------------
    async def _elect(self) -> None:
        if self.core.active or not self.settings["controller.enable"]:
            return
        won = await self._zk(self.zk.try_become_controller, self.broker_id)
        if won is None:
            return
        if self.channel is not None:  # left by a failover that failed on ZooKeeper
            await self.channel.close()
        self.epoch_zk_version = won.epoch_zk_version
        t0 = time.monotonic()
        log.info("broker %d is now the controller (epoch %d)", self.broker_id, won.epoch)
        self.channel = ControllerChannel(self.broker_id, self.settings["controller.socket.timeout.ms"], self._on_channel_response,
                                         secret=self.rpc_secret)
        if self.settings["controller.process.watch.enable"] and self.watches is None:
            self.watches = ProcessWatches(self.broker_id, lambda b, e: self.enqueue(ProcessGone(b, e)),
                                          self._process_answers, secret=self.rpc_secret)
        brokers = await self._read_brokers()
        # Notifications up to now are in the configs read below (issue 16).
        self._config_change_seen = max((n for n, _e, _t in await self._zk(self.zk.get_config_changes)), default="")
        t_read = time.monotonic()
        topics, states, written_zxid = await self._read_topics(await self._zk(self.zk.get_topics))
        t_read = time.monotonic() - t_read
        marked = await self._zk(self.zk.get_topics_marked_for_deletion)
        preferred = await self._read_preferred_election_znode()
        reassignments, throttle = await self._read_reassignment()
        adds = await self._zk(self.zk.get_partition_admin_requests, "add")
        removes = await self._zk(self.zk.get_partition_admin_requests, "remove")
        self.metrics.active_controller.set(1)
        # Registrations our own broker found gone (e.g. the previous controller's, after its
        # kill -9) are failed from the start. Their process is watched as every registration
        # is, so one whose process answers is heard (ProcessBack, _backs_answering).
        gone = {b: e for b, e in self.gone_evidence().items() if b in brokers and brokers[b].epoch == e}
        if self.watches is not None:
            self.watches.sync({b: (lb.epoch, lb.host, lb.inter_broker_port) for b, lb in brokers.items()})
        t_core = time.monotonic()
        try:
            await self._run_core(core.Activated(won.epoch, brokers, topics, states, written_zxid, tuple(marked), preferred,
                                                reassignments, throttle, {tp: tuple(r) for tp, r in adds.items()},
                                                tuple(sorted(removes)), gone))
        except ZkError:
            # The take-over failed on ZooKeeper after it became active: it goes on as
            # controller (its admin paths tried again), so it runs what every active one does.
            self._start_active_duties()
            raise
        self._start_active_duties()
        log.info("controller failover finished in %.0f ms (%d partitions; reading them %.0f ms, deciding and writing %.0f ms)",
                 (time.monotonic() - t0) * 1000, len(self.core.states), t_read * 1000, (time.monotonic() - t_core) * 1000)
        if self.channel is not None:
            for bid, epoch in self.core.gone.items():
                if gone.get(bid) == epoch:
                    self.channel.remove_broker(bid)  # nothing more for it (as after ProcessGone)

    def _start_active_duties(self) -> None:
        if not self.core.active:
            return
        self.enqueue(LogDirFailuresChange())  # replicas already offline (KIP-112)
        if self.settings["auto.leader.rebalance.enable"] and (self._rebalance_task is None or self._rebalance_task.done()):
            self._rebalance_task = spawn(self._rebalance_timer(), name="auto-rebalance-timer", owner=self._owned)

    def _retry_later(self, ev: ControllerEvent) -> None:
        """`ev` again after ELECTION_RETRY_S, unless one of its kind is already due: each
        reads its znodes afresh, so one is enough, and through a long ZooKeeper outage the
        retries stay one per kind instead of multiplying with every failed event."""
        kind = type(ev)
        if kind in self._retries_due:
            return
        self._retries_due.add(kind)

        async def later() -> None:
            try:
                await asyncio.sleep(ELECTION_RETRY_S)
            finally:
                self._retries_due.discard(kind)
            self.enqueue(ev)

        spawn(later(), name="controller-admin-retry", owner=self._owned)

    async def _elect_again_after(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        self.enqueue(Elect())

    async def _resign(self) -> None:
        if not self.core.active:
            return
        log.info("broker %d resigns as controller", self.broker_id)
        self._execute(self.core.resign())
        self.metrics.active_controller.set(0)
        await cancel_and_wait([self._rebalance_task])
        self._rebalance_task = None
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
        if self.watches is not None:
            await self.watches.close()
            self.watches = None
        try:
            await self._zk(self.zk.resign_controller, self.broker_id)
        except ZkError as e:
            log.info("could not remove /controller (%s); its session will", e)

    async def _rebalance_timer(self) -> None:
        interval = self.settings["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval)
            self.enqueue(AutoRebalance())

    def _on_channel_response(self, broker_id: int, api: str, header: dict[str, Any]) -> None:
        if header.get("error", 0) != 0:
            log.info("%s to broker %d answered error %s", api, broker_id, header.get("error"))

    def _sync_watches(self) -> None:
        """Watch the process of every registration the core counts: live ones at their
        address, gone ones where they were watched (to hear if they answer again)."""
        if self.watches is None:
            return
        if not self.core.active:
            self.watches.sync({})
            return
        self.watches.follow({b: (lb.epoch, lb.host, lb.inter_broker_port) for b, lb in self.core.live.items()},
                            self.core.gone)

    def _process_answers(self, broker_id: int, epoch: int) -> None:
        """A watch heard the process of registration (broker_id, epoch) answer on a new
        connection: if the core counts it gone, it is back (ProcessBack). The watch calls this
        on every such answer, not only after its own GONE: a new controller counts gone what
        its broker's metadata cache found gone (Activated.gone), for which its fresh watch
        never sees a GONE, and that live broker stayed out of every ISR, sent nothing, until
        the next failover or its restart."""
        if self.core.gone.get(broker_id) == epoch:
            self._enqueue_back(broker_id, epoch)

    def _backs_answering(self) -> None:
        """"Back" is level-triggered: after each event that finished, every registration the
        core counts gone whose watch stands answering as it gets a ProcessBack. An answer
        heard while the core did not count it gone yet (its ProcessGone still queued), or a
        ProcessBack that failed on ZooKeeper (its read of /brokers/ids), is thus not lost:
        the watch would not call again while the connection stands. After a failure this
        waits for the next event that succeeds (the BrokerChange retried after it), so a
        ZooKeeper outage is not met with a ProcessBack in a loop."""
        if self.watches is None:
            return
        for bid, epoch in sorted(self.core.gone.items()):
            watch = self.watches.watches.get(bid)
            if watch is not None and watch.state.epoch == epoch and watch.answering:
                self._enqueue_back(bid, epoch)

    def _enqueue_back(self, broker_id: int, epoch: int) -> None:
        if (broker_id, epoch) not in self._backs_queued:  # one in the queue is enough: it reads /brokers/ids
            self._backs_queued.add((broker_id, epoch))
            self.enqueue(ProcessBack(broker_id, epoch))

    async def close(self) -> None:
        await cancel_and_wait([self._task, self._rebalance_task])
        if self.channel is not None:
            await self.channel.close()
        if self.watches is not None:
            await self.watches.close()


def _from_assignment(a: codec.TopicAssignment) -> core.Topic:
    return core.Topic({p: tuple(r) for p, r in a.partitions.items()}, dict(a.config),
                      {p: tuple(r) for p, r in a.adding_replicas.items()}, {p: tuple(r) for p, r in a.removing_replicas.items()},
                      a.topic_id)


def _to_assignment(t: core.Topic) -> codec.TopicAssignment:
    return codec.TopicAssignment({p: list(r) for p, r in t.partitions.items()}, dict(t.config),
                                 {p: list(r) for p, r in t.adding.items()}, {p: list(r) for p, r in t.removing.items()},
                                 t.topic_id)


def _from_znode(st: codec.PartitionState, version: int) -> PartitionState:
    return PartitionState(st.leader, st.leader_epoch, tuple(st.isr), version, st.controller_epoch)

