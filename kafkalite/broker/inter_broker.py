"""Handlers of the inter-broker msgpack RPC (DESIGN.md section 4).

Controller requests are fenced by controller epoch and broker epoch before anything is
applied; requests for the controller role are queued onto its event loop; replica fetches
answer with a small header and the raw batch bytes as payload.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kafkalite.broker.controller_events import AlterIsr, ControlledShutdown, PreferredElection, Replying
from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for
from kafkalite.clock import monotonic_ms
from kafkalite.core.fetch_session import SessionPartition
from kafkalite.core.messages import AlterIsrRequest
from kafkalite.gc_pause import gc_paused
from kafkalite.protocol.errors import ErrorCode
from kafkalite.rpc.framing import REPLICA_FETCH_RESPONSE_BYTES_MAX

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)


Answer = tuple[dict[str, Any], bytes]


class InterBrokerHandlers:
    def __init__(self, broker: Broker):
        self.broker = broker
        self.rm = broker.replica_manager
        # The APIs served, by the name a request carries, and nothing else: the name comes
        # off the wire, and a lookup by attribute let a frame reach any method (api
        # "_init__" called self.__init__(header), and every later request failed).
        self.apis: dict[str, Callable[[dict[str, Any]], Awaitable[Answer]]] = {
            "LeaderAndIsr": self._LeaderAndIsr,
            "StopReplica": self._StopReplica,
            "UpdateMetadata": self._UpdateMetadata,
            "Ping": self._Ping,
            "AlterIsr": self._AlterIsr,
            "ControlledShutdown": self._ControlledShutdown,
            "PreferredElection": self._PreferredElection,
            "ReplicaFetch": self._ReplicaFetch,
            "EndOffsets": self._EndOffsets,
            "OffsetsForLeaderEpoch": self._OffsetsForLeaderEpoch,
        }

    async def handle(self, header: dict[str, Any], payload: memoryview) -> Answer:
        api = header["api"]
        fn = self.apis.get(api)
        if fn is None:
            log.warning("unknown inter-broker request %r from %s", api, header.get("sender"))
            return {"error": int(ErrorCode.INVALID_REQUEST)}, b""
        try:
            return await fn(header)
        except (KeyError, TypeError, ValueError) as e:
            log.warning("malformed %s from %s: %s", api, header.get("sender"), e)
            return {"error": int(ErrorCode.INVALID_REQUEST)}, b""
        except OPERATING_ERRORS as e:  # typed errors carry their code
            return {"error": error_code_for(e)}, b""

    # -- controller -> broker -------------------------------------------------------------
    # Each waits until this broker registered (as Kafka serves nothing before): until then
    # its broker epoch is unknown, and a request resent to its previous incarnation's
    # registration (which lives until that session expires) would pass the broker-epoch
    # fence. A broker restarted with a shorter log then took the leadership (or an ISR
    # member's place) its previous incarnation had been given (found by the simulator,
    # issue 9, sweep seed 3705). Unanswered meanwhile, the controller resends.
    async def _LeaderAndIsr(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        await self.broker.registered.wait()
        for bid, (host, port) in (h.get("live_leaders") or {}).items():
            self.broker.note_broker_address(int(bid), host, int(port))
        with gc_paused():  # thousands of partitions at once (kafkalite.gc_pause)
            return self.rm.handle_leader_and_isr(h), b""

    async def _StopReplica(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        await self.broker.registered.wait()
        return self.rm.handle_stop_replica(h), b""

    async def _UpdateMetadata(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        await self.broker.registered.wait()
        self.rm.check_controller(int(h["controller_epoch"]), h.get("broker_epoch"))
        with gc_paused():  # a full update lists every partition of the cluster
            deleted = self.broker.metadata_cache.apply_update(h)
        if deleted:
            self.broker.groups.on_partitions_deleted(deleted)  # their committed offsets go
        for b in self.broker.metadata_cache.brokers.values():
            self.broker.note_broker_address(b.id, b.host, b.inter_broker_port)
        self.rm.apply_topic_configs(h.get("topic_configs") or {})
        self.broker.follow_peers()
        self.broker.metadata_updates.notify()
        return {"error": 0}, b""

    async def _Ping(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """Who answers on this address: the controller's process watch (broker_watch.py)."""
        b = self.broker
        return {"error": 0, "broker_id": b.broker_id, "broker_epoch": b.broker_epoch, "incarnation": b.incarnation}, b""

    # -- broker -> controller -------------------------------------------------------------
    async def _controller_call(self, make: Callable[[asyncio.Future], Replying]) -> tuple[dict[str, Any], bytes]:
        ctrl = self.broker.controller
        if not ctrl.active:
            return {"error": int(ErrorCode.NOT_CONTROLLER)}, b""
        reply = asyncio.get_running_loop().create_future()
        ctrl.enqueue(make(reply))
        return await reply, b""

    async def _AlterIsr(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        # Decoded here, not in the controller's loop: a request that does not decode is a
        # sender's bug, which closes this connection (kafkalite.rpc.transport) and leaves the
        # controller running.
        request = AlterIsrRequest.from_wire(h)
        return await self._controller_call(lambda reply: AlterIsr(request, reply))

    async def _ControlledShutdown(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        broker_epoch = h.get("broker_epoch")
        return await self._controller_call(
            lambda reply: ControlledShutdown(int(h["broker_id"]), None if broker_epoch is None else int(broker_epoch), reply))

    async def _PreferredElection(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        parts = h.get("partitions")
        partitions = None if parts is None else [(str(t), int(p)) for t, p in parts]
        return await self._controller_call(lambda reply: PreferredElection(partitions, reply))

    # -- follower -> leader ---------------------------------------------------------------
    async def _ReplicaFetch(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        replica_id = int(h["sender"])
        cached = self.broker.metadata_cache.brokers.get(replica_id)
        if cached is not None and h.get("broker_epoch", -1) < cached.epoch:
            return {"error": int(ErrorCode.STALE_BROKER_EPOCH)}, b""
        # Clamped so the answer fits in one frame whatever the follower asked (a follower
        # configured before the bound, or another build): an answer over the frame bound is
        # refused by the follower, which would send the same fetch again forever.
        part_max = min(int(h.get("partition_max_bytes", 1 << 20)), REPLICA_FETCH_RESPONSE_BYTES_MAX)
        max_wait_ms = int(h.get("max_wait_ms", 0))
        min_bytes = int(h.get("min_bytes", 1))
        max_bytes = min(int(h.get("max_bytes", 10 << 20)), REPLICA_FETCH_RESPONSE_BYTES_MAX)
        session_id, session_epoch = (int(x) for x in h["session"])  # kafkalite.core.fetch_session
        # A sixth field, the follower's log start (DeleteRecords' low watermark), is absent
        # from a broker that predates it.
        changed = {(str(t), int(p)): SessionPartition(int(off), int(epoch), int(last_epoch), int(rest[0]) if rest else -1)
                   for t, p, off, epoch, last_epoch, *rest in h["partitions"]}
        now = monotonic_ms()
        sessions = self.rm.fetch_sessions
        if session_id == 0:  # a full request opens a session
            session = sessions.start(replica_id, changed, now)
            to_read = sorted(changed)
        else:
            session = sessions.get(replica_id, session_id, session_epoch)  # or the follower starts over
            to_read = session.apply(changed, [(str(t), int(p)) for t, p in h.get("forgotten") or ()], now)
        results = await self.rm.fetch_in_session(session, to_read, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                                 max_bytes=max_bytes, partition_max_bytes=part_max,
                                                 follower_broker_epoch=int(h.get("broker_epoch", -1)))
        chunks = []
        pos = 0
        out = []
        for (t, p), r in results:
            data = r["records"] or b""
            out.append([t, p, r["error"], r["hw"], r["log_start"], r["leo"], pos, len(data),
                        r.get("diverging_epoch"), r.get("diverging_end_offset")])
            if data:
                chunks.append(data)
                pos += len(data)
        return {"error": 0, "session": [session.session_id, session.epoch], "partitions": out}, b"".join(chunks)

    async def _EndOffsets(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """The high watermarks of partitions led here (a group coordinator's lag figures)."""
        out = []
        for t, p in h["partitions"]:
            part = self.rm.partitions.get((t, int(p)))
            if part is None or not part.is_leader:
                out.append([t, p, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1])
            else:
                out.append([t, p, 0, part.hw])
        return {"error": 0, "partitions": out}, b""

    async def _OffsetsForLeaderEpoch(self, h: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        out = []
        for t, p, current_epoch, requested_epoch in h["partitions"]:
            try:
                answer = self.rm.core.offsets_for_leader_epoch((t, int(p)), int(current_epoch), int(requested_epoch))
                out.append([t, p, 0, answer.epoch, answer.end_offset])
            except OPERATING_ERRORS as e:
                out.append([t, p, error_code_for(e), -1, -1])
        return {"error": 0, "partitions": out}, b""
