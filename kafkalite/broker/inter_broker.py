"""Handlers of the inter-broker msgpack RPC (DESIGN.md section 4).

Controller requests are fenced by controller epoch and broker epoch before anything is
applied; requests for the controller role are queued onto its event loop; replica fetches
answer with a small header and the raw batch bytes as payload.

Every request is decoded into a typed message first (kafkalite.core.messages for the
controller's, kafkalite.broker.peer_messages for the peers'), then served. A request that
does not decode is the sender's bug: answered INVALID_REQUEST with a log line. What fails
while a decoded request is served is this broker's own bug: it goes to the RPC transport,
which logs it with its traceback and closes the connection (a KeyError deep in a handler
used to be answered as a malformed request, with no traceback).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafkalite.broker.controller_events import AlterIsr, ControlledShutdown, PreferredElection, Replying
from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for
from kafkalite.broker.peer_messages import EndOffsetsRequest, OffsetsForLeaderEpochRequest, ReplicaFetchRequest
from kafkalite.clock import monotonic_ms
from kafkalite.core.messages import (
    AlterIsrRequest,
    ControlledShutdownRequest,
    LeaderAndIsr,
    PreferredElectionRequest,
    StopReplica,
    UpdateMetadata,
)
from kafkalite.gc_pause import gc_paused
from kafkalite.protocol.errors import ErrorCode
from kafkalite.rpc.framing import REPLICA_FETCH_RESPONSE_BYTES_MAX

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)


Answer = tuple[dict[str, Any], bytes]

# What decoding raises for a field that is missing or of the wrong shape. Caught around
# decoding only (InterBrokerHandlers.handle).
_WIRE_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)


def _nothing(h: Mapping[str, Any]) -> None:
    return None


def _bulk(decode: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
    """`decode` with the collector paused (kafkalite.gc_pause): a LeaderAndIsr or an
    UpdateMetadata may list every partition of the cluster."""

    def paused(h: Mapping[str, Any]) -> Any:
        with gc_paused():
            return decode(h)

    return paused


class InterBrokerHandlers:
    def __init__(self, broker: Broker):
        self.broker = broker
        self.rm = broker.replica_manager
        # The APIs served, by the name a request carries, and nothing else: the name comes
        # off the wire, and a lookup by attribute let a frame reach any method (api
        # "_init__" called self.__init__(header), and every later request failed). Each is
        # (decode the header into a typed request, serve it).
        self.apis: dict[str, tuple[Callable[[Mapping[str, Any]], Any], Callable[[Any], Awaitable[Answer]]]] = {
            "LeaderAndIsr": (_bulk(LeaderAndIsr.from_wire), self._LeaderAndIsr),
            "StopReplica": (StopReplica.from_wire, self._StopReplica),
            "UpdateMetadata": (_bulk(UpdateMetadata.from_wire), self._UpdateMetadata),
            "Ping": (_nothing, self._Ping),
            "AlterIsr": (AlterIsrRequest.from_wire, self._AlterIsr),
            "ControlledShutdown": (ControlledShutdownRequest.from_wire, self._ControlledShutdown),
            "PreferredElection": (PreferredElectionRequest.from_wire, self._PreferredElection),
            "ReplicaFetch": (ReplicaFetchRequest.from_wire, self._ReplicaFetch),
            "EndOffsets": (EndOffsetsRequest.from_wire, self._EndOffsets),
            "OffsetsForLeaderEpoch": (OffsetsForLeaderEpochRequest.from_wire, self._OffsetsForLeaderEpoch),
        }

    async def handle(self, header: dict[str, Any], payload: memoryview) -> Answer:
        api = header["api"]
        entry = self.apis.get(api)
        if entry is None:
            log.warning("unknown inter-broker request %r from %s", api, header.get("sender"))
            return {"error": int(ErrorCode.INVALID_REQUEST)}, b""
        decode, serve = entry
        try:
            request = decode(header)
        except _WIRE_ERRORS as e:
            log.warning("malformed %s from %s: %s", api, header.get("sender"), e)
            return {"error": int(ErrorCode.INVALID_REQUEST)}, b""
        try:
            return await serve(request)
        except OPERATING_ERRORS as e:  # typed errors carry their code
            return {"error": error_code_for(e)}, b""

    # -- controller -> broker -------------------------------------------------------------
    # Each waits until this broker registered (as Kafka serves nothing before): until then
    # its broker epoch is unknown, and a request resent to its previous incarnation's
    # registration (which lives until that session expires) would pass the broker-epoch
    # fence. A broker restarted with a shorter log then took the leadership (or an ISR
    # member's place) its previous incarnation had been given (found by the simulator,
    # issue 9, sweep seed 3705). Unanswered meanwhile, the controller resends.
    async def _LeaderAndIsr(self, request: LeaderAndIsr) -> Answer:
        await self.broker.registered.wait()
        for bid, (host, port) in request.live_leaders.items():
            self.broker.note_broker_address(bid, host, port)
        with gc_paused():  # thousands of partitions at once (kafkalite.gc_pause)
            return self.rm.handle_leader_and_isr(request), b""

    async def _StopReplica(self, request: StopReplica) -> Answer:
        await self.broker.registered.wait()
        return self.rm.handle_stop_replica(request), b""

    async def _UpdateMetadata(self, update: UpdateMetadata) -> Answer:
        await self.broker.registered.wait()
        self.rm.core.check_controller(update.controller_epoch, update.broker_epoch)
        with gc_paused():  # a full update lists every partition of the cluster
            deleted = self.broker.metadata_cache.apply_update(update)
        if deleted:
            self.broker.groups.on_partitions_deleted(deleted)  # their committed offsets go
        for b in self.broker.metadata_cache.brokers.values():
            self.broker.note_broker_address(b.id, b.host, b.inter_broker_port)
        self.rm.apply_topic_configs(update.topic_configs)
        self.broker.follow_peers()
        self.broker.metadata_updates.notify()
        return {"error": 0}, b""

    async def _Ping(self, _request: None) -> Answer:
        """Who answers on this address: the controller's process watch (broker_watch.py)."""
        b = self.broker
        return {"error": 0, "broker_id": b.broker_id, "broker_epoch": b.broker_epoch, "incarnation": b.incarnation}, b""

    # -- broker -> controller -------------------------------------------------------------
    async def _controller_call(self, make: Callable[[asyncio.Future], Replying]) -> Answer:
        ctrl = self.broker.controller
        if not ctrl.active:
            return {"error": int(ErrorCode.NOT_CONTROLLER)}, b""
        reply = asyncio.get_running_loop().create_future()
        ctrl.enqueue(make(reply))
        return await reply, b""

    async def _AlterIsr(self, request: AlterIsrRequest) -> Answer:
        # Decoded before it reaches the controller's loop: a request that does not decode
        # is a sender's bug, answered here, and leaves the controller running.
        return await self._controller_call(lambda reply: AlterIsr(request, reply))

    async def _ControlledShutdown(self, request: ControlledShutdownRequest) -> Answer:
        # (-1 when the request carries no epoch: no registered broker has it, so the
        # controller refuses it STALE_BROKER_EPOCH)
        return await self._controller_call(lambda reply: ControlledShutdown(request.broker_id, request.broker_epoch, reply))

    async def _PreferredElection(self, request: PreferredElectionRequest) -> Answer:
        partitions = None if request.partitions is None else list(request.partitions)
        return await self._controller_call(lambda reply: PreferredElection(partitions, reply))

    # -- follower -> leader ---------------------------------------------------------------
    async def _ReplicaFetch(self, request: ReplicaFetchRequest) -> Answer:
        replica_id = request.replica_id
        cached = self.broker.metadata_cache.brokers.get(replica_id)
        if cached is not None and request.broker_epoch < cached.epoch:
            return {"error": int(ErrorCode.STALE_BROKER_EPOCH)}, b""
        # Clamped so the answer fits in one frame whatever the follower asked (a follower
        # configured before the bound, or another build): an answer over the frame bound is
        # refused by the follower, which would send the same fetch again forever.
        part_max = min(request.partition_max_bytes, REPLICA_FETCH_RESPONSE_BYTES_MAX)
        max_bytes = min(request.max_bytes, REPLICA_FETCH_RESPONSE_BYTES_MAX)
        changed = request.changed
        now = monotonic_ms()
        sessions = self.rm.fetch_sessions
        if request.session_id == 0:  # a full request opens a session
            session = sessions.start(replica_id, changed, now)
            to_read = sorted(changed)
        else:
            session = sessions.get(replica_id, request.session_id, request.session_epoch)  # or the follower starts over
            to_read = session.apply(changed, request.forgotten, now)
        results = await self.rm.fetch_in_session(session, to_read, max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes,
                                                 max_bytes=max_bytes, partition_max_bytes=part_max,
                                                 follower_broker_epoch=request.broker_epoch)
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

    async def _EndOffsets(self, request: EndOffsetsRequest) -> Answer:
        """The high watermarks of partitions led here (a group coordinator's lag figures)."""
        out = []
        for t, p in request.partitions:
            part = self.rm.partitions.get((t, p))
            if part is None or not part.is_leader:
                out.append([t, p, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1])
            else:
                out.append([t, p, 0, part.hw])
        return {"error": 0, "partitions": out}, b""

    async def _OffsetsForLeaderEpoch(self, request: OffsetsForLeaderEpochRequest) -> Answer:
        out = []
        for t, p, current_epoch, requested_epoch in request.partitions:
            try:
                answer = self.rm.core.offsets_for_leader_epoch((t, p), current_epoch, requested_epoch)
                out.append([t, p, 0, answer.epoch, answer.end_offset])
            except OPERATING_ERRORS as e:
                out.append([t, p, error_code_for(e), -1, -1])
        return {"error": 0, "partitions": out}, b""
