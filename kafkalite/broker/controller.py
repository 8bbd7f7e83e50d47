"""The controller role: one event queue, drained by one task (DESIGN.md section 6).

Watches and RPC handlers only enqueue events. Each event is handled to the end before the
next: decide (kafkalite.core.election), write ZooKeeper conditionally and fenced on the
controller epoch, apply to memory only after the write succeeded, then queue LeaderAndIsr /
StopReplica / UpdateMetadata for the brokers (STYLE habits 3 and 4).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import Any

from kafkalite.aio import cancel_and_wait
from kafkalite.broker.controller_channel import ControllerChannel
from kafkalite.broker.controller_events import (
    AlterIsr,
    AutoRebalance,
    BrokerChange,
    ControlledShutdown,
    ControllerEvent,
    Elect,
    PreferredElection,
    PreferredElectionZnode,
    Replying,
    Resign,
    TopicChange,
    TopicDeletion,
    name_of,
)
from kafkalite.core import election
from kafkalite.core.replica_state import AlterIsrItem
from kafkalite.protocol.errors import ErrorCode
from kafkalite.zk import paths
from kafkalite.zk.codec import BrokerRegistration, PartitionState, TopicAssignment
from kafkalite.zk.errors import ControllerMovedError, StaleZnodeVersionError, ZkError

log = logging.getLogger(__name__)

TP = tuple[str, int]
WRITE_RETRIES_MAX = 5


class Controller:
    def __init__(self, broker: Any):
        self.broker = broker
        self.broker_id: int = broker.broker_id
        self.settings = broker.settings
        self.metrics = broker.metrics
        self.queue: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self.active = False
        self.epoch = 0
        self.epoch_zk_version: int | None = None
        self.channel: ControllerChannel | None = None
        self._reset_state()
        self._task: asyncio.Task | None = None
        self._rebalance_task: asyncio.Task | None = None

    def _reset_state(self) -> None:
        self.live: dict[int, tuple[BrokerRegistration, int]] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[TP, tuple[PartitionState, int]] = {}
        self.shutting_down: set[int] = set()
        self.unclean_elections = 0
        self._bounced_since_write: dict[TP, set[int]] = {}

    # -- plumbing -----------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller-events")

    def enqueue(self, event: ControllerEvent) -> None:
        self.queue.put_nowait(event)

    async def zk(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))

    async def _run(self) -> None:
        while True:
            ev = await self.queue.get()
            started = time.monotonic()
            try:
                await self._handle(ev)
                took_ms = (time.monotonic() - started) * 1000
                if took_ms > 100:
                    log.info("controller event %s took %.0f ms", name_of(ev), took_ms)
            except asyncio.CancelledError:
                raise
            except ControllerMovedError as e:
                log.warning("controller epoch moved under us (%s): resigning", e)
                await self._resign()
                self._fail(ev, ErrorCode.NOT_CONTROLLER)
            except ZkError as e:
                log.warning("controller event %s failed on ZooKeeper: %s", name_of(ev), e)
                self._fail(ev, ErrorCode.NOT_CONTROLLER)
            except Exception:  # a bug must not stop the controller silently
                log.exception("controller event %s failed", name_of(ev))
                self._fail(ev, ErrorCode.UNKNOWN_SERVER_ERROR)

    @staticmethod
    def _fail(ev: ControllerEvent, code: int) -> None:
        if isinstance(ev, Replying) and not ev.reply.done():
            ev.reply.set_result({"error": int(code)})

    async def _handle(self, ev: ControllerEvent) -> None:
        match ev:
            case Elect():
                await self._elect()
            case Resign():
                await self._resign()
            case _ if not self.active:
                self._fail(ev, ErrorCode.NOT_CONTROLLER)
            case BrokerChange():
                await self._on_broker_change()
            case TopicChange():
                await self._on_topic_change()
            case TopicDeletion():
                await self._on_topic_deletion()
            case PreferredElectionZnode():
                await self._on_preferred_election_znode()
            case PreferredElection(partitions=partitions, reply=reply):
                elected = await self._preferred_elect(partitions)
                reply.set_result({"error": 0, "elected": [list(tp) for tp in elected]})
            case AutoRebalance():
                await self._on_auto_rebalance()
            case AlterIsr():
                await self._on_alter_isr(ev)
            case ControlledShutdown():
                await self._on_controlled_shutdown(ev)
            case _:
                raise AssertionError(f"unhandled controller event {ev!r}")

    async def close(self) -> None:
        await cancel_and_wait([self._task, self._rebalance_task])
        if self.channel is not None:
            await self.channel.close()

    # -- election and failover (seed section D) ------------------------------------------
    async def _elect(self) -> None:
        if self.active or not self.settings["controller.enable"]:
            return
        zk = self.broker.zk
        won = await self.zk(zk.try_become_controller, self.broker_id)
        if won is None:
            return
        self.epoch, self.epoch_zk_version = won.epoch, won.epoch_zk_version
        self.active = True
        t0 = time.monotonic()
        log.info("broker %d is now the controller (epoch %d)", self.broker_id, self.epoch)
        self.channel = ControllerChannel(self.broker_id, self.settings["controller.socket.timeout.ms"], self._on_channel_response)
        await self._load_everything()
        self.metrics.active_controller.set(1)
        # Seed D: tell every broker the truth with `init`, then deal with what is broken.
        for bid in self.live:
            self._send_update_metadata([bid], full=True)
        for bid in self.live:
            self._send_leader_and_isr(bid, [tp for tp, a in self._replica_map().items() if bid in a], init=True)
        await self._elect_offline_partitions()
        await self._fence_bounced_isr_members()
        await self._on_topic_deletion()
        await self._on_preferred_election_znode()
        log.info("controller failover finished in %.0f ms (%d partitions)", (time.monotonic() - t0) * 1000, len(self.states))
        if self.settings["auto.leader.rebalance.enable"]:
            self._rebalance_task = asyncio.create_task(self._rebalance_timer(), name="auto-rebalance-timer")

    async def _load_everything(self) -> None:
        zk = self.broker.zk
        self._reset_state()
        brokers = await self.zk(zk.get_brokers)
        self._set_live(brokers)
        topics = await self.zk(zk.get_topics)
        assignments = await self.zk(zk.get_topic_assignments, topics)
        self.assignments = {t: a for t, (a, _v) in assignments.items()}
        tps = [(t, p) for t, a in self.assignments.items() for p in a.partitions]
        loaded = await self.zk(zk.get_partition_states, tps, with_mzxid=True)
        self.states = {tp: (st, v) for tp, (st, v, _mzxid) in loaded.items()}
        self._bounced_since_write = {
            tp: {b for b in st.isr if b in self.live and self.live[b][1] > mzxid}
            for tp, (st, _v, mzxid) in loaded.items()
        }
        # Partitions of topics whose state znodes were never written (controller died mid-create).
        missing = [tp for tp in tps if tp not in self.states]
        if missing:
            await self._init_leaders(missing)

    async def _resign(self) -> None:
        if not self.active:
            return
        log.info("broker %d resigns as controller", self.broker_id)
        self.active = False
        self.metrics.active_controller.set(0)
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
        self._reset_state()
        try:
            await self.zk(self.broker.zk.resign_controller, self.broker_id)
        except ZkError:
            pass

    def _set_live(self, brokers: dict[int, tuple[BrokerRegistration, int]]) -> None:
        self.live = dict(brokers)
        assert self.channel is not None
        for bid, (reg, epoch) in brokers.items():
            self.channel.add_broker(bid, epoch, reg.host, reg.inter_broker_port)
        for bid in list(self.channel.senders):
            if bid not in brokers:
                self.channel.remove_broker(bid)

    def _replica_map(self) -> dict[TP, list[int]]:
        return {(t, p): r for t, a in self.assignments.items() for p, r in a.partitions.items()}

    # -- broker changes (seed section A) --------------------------------------------------
    async def _on_broker_change(self) -> None:
        brokers = await self.zk(self.broker.zk.get_brokers)
        old = self.live
        # A broker registered again with a new epoch restarted in between (Kafka's "bounced"
        # brokers): it is handled as failed first, so it loses its leaderships (epoch + 1)
        # instead of keeping them at the old epoch with a fresh replica state, then started.
        bounced = {b for b in brokers if b in old and brokers[b][1] != old[b][1]}
        dead = {b for b in old if b not in brokers} | bounced
        new = {b for b in brokers if b not in old} | bounced
        if not dead and not new:
            return
        self.shutting_down -= dead
        log.info("controller: brokers failed %s, started %s (bounced %s); live %s", sorted(dead), sorted(new), sorted(bounced), sorted(brokers))
        if dead:
            self._set_live({b: v for b, v in brokers.items() if b not in bounced})
            await self._on_brokers_failed(dead)
        self._set_live(brokers)
        if new:
            self._send_update_metadata(list(self.live), full=False, brokers_changed=True)
            for bid in new:
                self._send_update_metadata([bid], full=True)
                self._send_leader_and_isr(bid, [tp for tp, a in self._replica_map().items() if bid in a])
            await self._elect_offline_partitions()
        elif dead:
            self._send_update_metadata(list(self.live), full=False, brokers_changed=True)

    def _core_states(self, tps=None) -> dict[TP, election.PartitionState]:
        keys = self.states if tps is None else tps
        return {tp: election.PartitionState(st.leader, st.leader_epoch, tuple(st.isr), v, st.controller_epoch)
                for tp in keys for st, v in [self.states[tp]]}

    def _unclean_by_topic(self) -> dict[str, bool]:
        return {t: self._unclean_enabled(t) for t in self.assignments}

    async def _on_brokers_failed(self, dead: set[int]) -> None:
        # The caller sends UpdateMetadata with every partition (the live set changed).
        await self._elect_offline_partitions(update_metadata=False)

    async def _elect_offline_partitions(self, *, update_metadata: bool = True) -> None:
        """Seed A: new leaders from the live ISR for partitions whose leader is gone, ISR
        shrunk behind live leaders; decided by kafkalite.core.election."""
        live = set(self.live) - self.shutting_down
        decided = election.on_brokers_failed(self._core_states(), self._replica_map(), live, self._unclean_by_topic())
        changes: dict[TP, PartitionState] = {}
        for ch in decided:
            tp = ch.topic_partition
            if ch.unclean:
                self.unclean_elections += 1
                self.metrics.unclean_elections.inc()
                log.warning("UNCLEAN leader election for %s-%d: broker %d was not in ISR %s; acknowledged data may be lost",
                            tp[0], tp[1], ch.leader, self.states[tp][0].isr)
            if ch.leader == -1:
                log.warning("%s-%d is offline: no live replica in ISR %s", tp[0], tp[1], list(ch.isr))
            changes[tp] = PartitionState(ch.leader, ch.leader_epoch, list(ch.isr), self.epoch)
        await self._write_and_propagate(changes, update_metadata=update_metadata)

    async def _fence_bounced_isr_members(self) -> None:
        """Controller failover: an ISR member whose registration is newer than the
        partition state restarted after the last decision about it, and no controller saw
        it go (it may have been the controller). Handle it as failed for that partition:
        re-elect if it leads, drop it from the ISR; it rejoins through AlterIsr once caught
        up. Without this a restarted leader keeps leading at the old epoch."""
        bounced = {tp: b for tp, b in self._bounced_since_write.items() if b and tp in self.states}
        self._bounced_since_write = {}
        if not bounced:
            return
        replicas = self._replica_map()
        live = set(self.live) - self.shutting_down
        changes: dict[TP, PartitionState] = {}
        for tp, members in bounced.items():
            for ch in election.on_brokers_failed(self._core_states([tp]), {tp: replicas.get(tp, [])}, live - members, self._unclean_by_topic()):
                changes[tp] = PartitionState(ch.leader, ch.leader_epoch, list(ch.isr), self.epoch)
        log.info("controller failover: %d partitions had ISR members that restarted unseen; re-deciding them", len(changes))
        await self._write_and_propagate(changes)
        # ...then as started (Kafka's bounced brokers): partitions left without a leader get
        # one again from the live ISR, now at a new epoch.
        await self._elect_offline_partitions()

    def _unclean_enabled(self, topic: str) -> bool:
        cfg = self.assignments[topic].config if topic in self.assignments else {}
        raw = cfg.get("unclean.leader.election.enable")
        if raw is None:
            return bool(self.settings["unclean.leader.election.enable"])
        return str(raw).lower() == "true"

    # -- writes -------------------------------------------------------------------------
    async def _write_states(self, changes: dict[TP, PartitionState], *, rewrite_on_stale: bool = True) -> dict[TP, PartitionState]:
        """Conditional multi writes. On a stale version re-read; controller decisions are
        re-applied on the fresh version (bounded), AlterIsr answers INVALID_UPDATE_VERSION."""
        written: dict[TP, PartitionState] = {}
        pending = dict(changes)
        for _ in range(WRITE_RETRIES_MAX):
            if not pending:
                break
            updates = {tp: (st, self.states[tp][1]) for tp, st in pending.items()}
            results = await self.zk(self.broker.zk.update_partition_states, updates, self.epoch_zk_version)
            stale = []
            for tp, res in results.items():
                if isinstance(res, ControllerMovedError):
                    raise res
                if isinstance(res, StaleZnodeVersionError):
                    stale.append(tp)
                elif isinstance(res, Exception):
                    log.warning("state write for %s failed: %s", tp, res)
                else:
                    self.states[tp] = (pending[tp], int(res))
                    written[tp] = pending[tp]
            pending = {}
            if stale and rewrite_on_stale:
                fresh = await self.zk(self.broker.zk.get_partition_states, stale)
                for tp in stale:
                    if tp in fresh:
                        self.states[tp] = fresh[tp]
                        # Someone else (an older controller) moved it: decide again from what is there.
                        pending[tp] = dataclasses.replace(changes[tp], leader_epoch=max(changes[tp].leader_epoch, fresh[tp][0].leader_epoch + 1))
        return written

    async def _write_and_propagate(self, changes: dict[TP, PartitionState], *, update_metadata: bool = True) -> dict[TP, PartitionState]:
        if not changes:
            return {}
        written = await self._write_states(changes)
        self._propagate(list(written), update_metadata=update_metadata)
        return written

    def _propagate(self, tps: list[TP], *, update_metadata: bool = True) -> None:
        if not tps:
            return
        replicas = self._replica_map()
        per_broker: dict[int, list[TP]] = {}
        for tp in tps:
            for b in replicas.get(tp, []):
                if b in self.live:
                    per_broker.setdefault(b, []).append(tp)
        for b, its in per_broker.items():
            self._send_leader_and_isr(b, its)
        if update_metadata:
            self._send_update_metadata(list(self.live), full=False, tps=tps)

    # -- requests to brokers ------------------------------------------------------------
    def _partition_wire(self, tp: TP) -> list[Any]:
        st, version = self.states[tp]
        replicas = self.assignments[tp[0]].partitions[tp[1]]
        return [tp[0], tp[1], st.leader, st.leader_epoch, list(st.isr), version, list(replicas)]

    def _send_leader_and_isr(self, broker_id: int, tps: list[TP], *, init: bool = False) -> None:
        tps = [tp for tp in tps if tp in self.states]
        if not tps and not init:
            return
        topics = {tp[0] for tp in tps}
        leaders = {self.states[tp][0].leader for tp in tps} & set(self.live)
        body = {
            "controller_id": self.broker_id, "controller_epoch": self.epoch, "init": init,
            "live_leaders": {b: [self.live[b][0].host, self.live[b][0].inter_broker_port] for b in leaders},
            "topic_configs": {t: self.assignments[t].config for t in topics},
            "partitions": [self._partition_wire(tp) for tp in tps],
        }
        assert self.channel is not None
        self.channel.send(broker_id, "LeaderAndIsr", body)

    def _brokers_wire(self) -> list[dict[str, Any]]:
        return [
            {"id": b, "host": r.host, "port": r.port, "inter_broker_port": r.inter_broker_port,
             "admin_port": r.admin_port, "rack": r.rack, "epoch": e}
            for b, (r, e) in sorted(self.live.items())
        ]

    def _metadata_partition(self, tp: TP) -> list[Any]:
        st, _ = self.states[tp]
        replicas = self.assignments[tp[0]].partitions[tp[1]]
        offline = [b for b in replicas if b not in self.live]
        return [st.leader, st.leader_epoch, list(st.isr), list(replicas), offline]

    def _send_update_metadata(self, brokers: list[int], *, full: bool, tps: list[TP] | None = None,
                              brokers_changed: bool = False, deleted: list[str] | None = None) -> None:
        if full or brokers_changed:
            tps = [tp for tp in self.states]  # offline replica lists depend on the live set
        parts: dict[str, dict[int, Any]] = {}
        for tp in tps or []:
            if tp in self.states and tp[0] in self.assignments:
                parts.setdefault(tp[0], {})[tp[1]] = self._metadata_partition(tp)
        body = {
            "controller_id": self.broker_id, "controller_epoch": self.epoch, "full": full,
            "brokers": self._brokers_wire(), "partitions": parts,
            "topic_configs": {t: self.assignments[t].config for t in parts},
            "deleted_topics": deleted or [],
        }
        assert self.channel is not None
        for b in brokers:
            self.channel.send(b, "UpdateMetadata", body)

    def _on_channel_response(self, broker_id: int, api: str, header: dict[str, Any]) -> None:
        if header.get("error", 0) != 0:
            log.info("%s to broker %d answered error %s", api, broker_id, header.get("error"))

    # -- topics (seed section B) --------------------------------------------------------
    async def _on_topic_change(self) -> None:
        topics = set(await self.zk(self.broker.zk.get_topics))
        added = [t for t in topics if t not in self.assignments]
        removed = [t for t in self.assignments if t not in topics]
        for t in removed:
            self._forget_topic(t)
        if removed:
            self._send_update_metadata(list(self.live), full=False, deleted=removed)
        if not added:
            return
        assignments = await self.zk(self.broker.zk.get_topic_assignments, added)
        new_tps = []
        for t, (a, _v) in assignments.items():
            self.assignments[t] = a
            new_tps.extend((t, p) for p in a.partitions)
        existing = await self.zk(self.broker.zk.get_partition_states, new_tps)
        self.states.update(existing)
        await self._init_leaders([tp for tp in new_tps if tp not in existing])
        self._propagate([tp for tp in new_tps if tp in self.states])

    async def _init_leaders(self, tps: list[TP]) -> None:
        """New partitions: leader = first live assigned replica, ISR = the live replicas."""
        decided = election.init_leaders({tp: self.assignments[tp[0]].partitions[tp[1]] for tp in tps}, set(self.live))
        states = {tp: PartitionState(st.leader, st.leader_epoch, list(st.isr), self.epoch) for tp, st in decided.items()}
        if not states:
            return
        results = await self.zk(self.broker.zk.create_partition_states, states, self.epoch_zk_version)
        for tp, res in results.items():
            if isinstance(res, ControllerMovedError):
                raise res
            if isinstance(res, Exception):
                fresh = await self.zk(self.broker.zk.get_partition_states, [tp])
                if tp in fresh:
                    self.states[tp] = fresh[tp]
                continue
            self.states[tp] = (states[tp], 0)

    def _forget_topic(self, topic: str) -> None:
        a = self.assignments.pop(topic, None)
        if a is not None:
            for p in a.partitions:
                self.states.pop((topic, p), None)

    async def _on_topic_deletion(self) -> None:
        zk = self.broker.zk
        marked = await self.zk(zk.get_topics_marked_for_deletion)
        done = []
        for topic in marked:
            a = self.assignments.get(topic)
            if a is not None:
                replicas = {b for r in a.partitions.values() for b in r}
                futures = []
                for b in replicas:
                    if b in self.live:
                        fut = asyncio.get_running_loop().create_future()
                        assert self.channel is not None
                        self.channel.send(b, "StopReplica", {"controller_id": self.broker_id, "controller_epoch": self.epoch, "delete": True,
                                                             "partitions": [[topic, p] for p, r in a.partitions.items() if b in r]}, fut)
                        futures.append(fut)
                if futures:
                    await asyncio.wait(futures, timeout=self.settings["request.timeout.ms"] / 1000)
            await self.zk(zk.delete_topic_znodes, topic)
            self._forget_topic(topic)
            done.append(topic)
            log.info("controller: topic %s deleted", topic)
        if done:
            self._send_update_metadata(list(self.live), full=False, deleted=done)

    # -- AlterIsr (KIP-497) -------------------------------------------------------------
    async def _on_alter_isr(self, ev: AlterIsr) -> None:
        body = ev.request
        sender = int(body["broker_id"])
        code = election.validate_alter_isr_request(sender, body.get("broker_epoch", -1), {b: e for b, (_r, e) in self.live.items()}, self.active)
        if code != 0:
            ev.reply.set_result({"error": int(code)})
            return
        replicas = self._replica_map()
        answers: dict[TP, list[Any]] = {}
        changes: dict[TP, PartitionState] = {}
        decisions: dict[TP, Any] = {}
        for topic, p, leader, leader_epoch, new_isr, partition_epoch in body["partitions"]:
            tp = (topic, int(p))
            item = AlterIsrItem(topic, int(p), int(leader), int(leader_epoch), tuple(new_isr), int(partition_epoch))
            current = self._core_states([tp])[tp] if tp in self.states and tp in replicas else None
            d = election.validate_alter_isr(current, item, replicas.get(tp, []), set(self.live), self.shutting_down)
            if d.error != 0 or not d.write_needed:
                st, version = self.states.get(tp, (PartitionState(-1, -1, [], 0), -1))
                answers[tp] = [topic, p, int(d.error), st.leader, st.leader_epoch, list(st.isr), version]
                continue
            decisions[tp] = d
            changes[tp] = PartitionState(d.new_state.leader, d.new_state.leader_epoch, list(d.new_state.isr), self.epoch)
        written = await self._write_states(changes, rewrite_on_stale=False)
        for tp in changes:
            st, version = self.states[tp]
            if tp in written:
                answers[tp] = [tp[0], tp[1], 0, st.leader, st.leader_epoch, list(st.isr), version]
            else:
                answers[tp] = [tp[0], tp[1], int(ErrorCode.INVALID_UPDATE_VERSION), st.leader, st.leader_epoch, list(st.isr), version]
        # The leader learns its new ISR from this answer; everyone else from UpdateMetadata.
        if written:
            self._send_update_metadata(list(self.live), full=False, tps=list(written))
        ev.reply.set_result({"error": 0, "partitions": list(answers.values())})

    # -- controlled shutdown ------------------------------------------------------------
    async def _on_controlled_shutdown(self, ev: ControlledShutdown) -> None:
        bid, epoch = ev.broker_id, ev.broker_epoch
        if bid not in self.live or self.live[bid][1] != epoch:
            ev.reply.set_result({"error": int(ErrorCode.STALE_BROKER_EPOCH)})
            return
        self.shutting_down.add(bid)
        replicas = self._replica_map()
        decided, _ = election.on_controlled_shutdown(bid, self._core_states(), replicas, set(self.live), self.shutting_down)
        changes = {ch.topic_partition: PartitionState(ch.leader, ch.leader_epoch, list(ch.isr), self.epoch) for ch in decided}
        written = await self._write_and_propagate(changes)
        # Answered from what was written: as Kafka, only partitions with another replica
        # can move; RF 1 ones stop with us.
        remaining = [list(tp) for tp, (st, _v) in self.states.items() if st.leader == bid and len(replicas.get(tp, ())) > 1]
        log.info("controlled shutdown of broker %d: moved %d partitions, %d still led", bid, len(written), len(remaining))
        ev.reply.set_result({"error": 0, "remaining_partitions": remaining})

    # -- preferred leader election ------------------------------------------------------
    async def _on_preferred_election_znode(self) -> None:
        zk = self.broker.zk
        raw = await self.zk(zk.get, paths.preferred_replica_election_path())
        if raw is None:
            return
        try:
            requested = [(str(t), int(p)) for t, p in json.loads(raw[0].decode()).get("partitions", [])]
        except (ValueError, TypeError, AttributeError):
            requested = []
        await self._preferred_elect(requested)
        try:
            await self.zk(zk.client.delete, paths.preferred_replica_election_path())
        except Exception:  # noqa: BLE001 - already gone
            pass

    async def _preferred_elect(self, tps: list[TP] | None) -> list[TP]:
        replicas = self._replica_map()
        candidates = [tp for tp in (tps if tps is not None else self.states) if tp in self.states and tp in replicas]
        decided = election.preferred_leader_changes(candidates, self._core_states(candidates), replicas,
                                                    set(self.live) - self.shutting_down)
        changes = {ch.topic_partition: PartitionState(ch.leader, ch.leader_epoch, list(ch.isr), self.epoch) for ch in decided}
        written = await self._write_and_propagate(changes)
        return list(written)

    async def _rebalance_timer(self) -> None:
        interval = self.settings["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval)
            self.enqueue(AutoRebalance())

    async def _on_auto_rebalance(self) -> None:
        todo = election.partitions_to_rebalance(self._replica_map(), self._core_states(), set(self.live) - self.shutting_down,
                                                self.settings["leader.imbalance.per.broker.percentage"])
        if todo:
            moved = await self._preferred_elect(todo)
            log.info("auto leader rebalance moved %d partitions", len(moved))

    # -- views --------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {
            "active": self.active, "epoch": self.epoch, "live_brokers": sorted(self.live),
            "shutting_down": sorted(self.shutting_down), "partitions": len(self.states),
            "offline_partitions": sum(1 for st, _ in self.states.values() if st.leader == -1 or st.leader not in self.live),
            "unclean_elections": self.unclean_elections,
        }
