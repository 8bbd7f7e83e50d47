"""A broker's replica manager over real logs in a directory, with no broker around it: for
tests and benchmarks of the append and fetch paths (tests/unit, bench/replication_round.py);
and an RPC client that reaches a leader's inter-broker handlers through the frame encoding
with no socket (FramedLoopback)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from kafkalite.broker.inter_broker import InterBrokerHandlers
from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.core.messages import LeaderAndIsr, PartitionLeadership
from kafkalite.log.config import LogConfig
from kafkalite.log.log_manager import LogManager
from kafkalite.rpc.framing import decode_frame, encode_frame

# What the replica manager's append and fetch paths read of a broker's settings.
REPLICA_MANAGER_SETTINGS: Mapping[str, Any] = {
    "purgatory.max.size": 100, "min.insync.replicas": 1, "message.max.bytes": 1 << 20,
    "replica.lag.time.max.ms": 30000, "broker.rack": None,
}


def replica_manager(root: str, broker_id: int, config: LogConfig, settings: Mapping[str, Any] | None = None) -> ReplicaManager:
    """Broker `broker_id`'s replica manager, its one log dir under `root`; `settings` over
    REPLICA_MANAGER_SETTINGS."""
    logs = LogManager([os.path.join(root, f"broker-{broker_id}")], config)
    logs.open_all()
    return ReplicaManager(broker_id, logs, config, {**REPLICA_MANAGER_SETTINGS, **(settings or {})}, BrokerMetrics())


def leader_and_isr(partitions: Sequence[tuple[str, int]], *, leader: int, epoch: int, replicas: Sequence[int],
                   isr: Sequence[int] | None = None) -> LeaderAndIsr:
    """A LeaderAndIsr request (as the controller sends it) for `partitions`."""
    in_sync = tuple(replicas if isr is None else isr)
    return LeaderAndIsr(9, 1, -1, tuple(PartitionLeadership(t, p, leader, epoch, in_sync, 0, tuple(replicas)) for t, p in partitions))


class FramedLoopback:
    """An RpcClient's `call` that goes through the frame encoding both ways and the
    leader's inter-broker handler, with no socket in between."""

    def __init__(self, handlers: InterBrokerHandlers, sender: int):
        self.handlers = handlers
        self.sender = sender
        self.cid = 0

    async def call(self, api: str, body: dict[str, Any], payload: bytes = b"", *, timeout_ms: int = 30000):
        self.cid += 1
        header = dict(body, api=api, version=0, correlation_id=self.cid, sender=self.sender)
        request = b"".join(encode_frame(header, payload))
        h, p = decode_frame(request[4:])
        resp, resp_payload = await self.handlers.handle(h, p)
        resp["correlation_id"] = h["correlation_id"]
        answer = b"".join(encode_frame(resp, resp_payload))
        return decode_frame(answer[4:])
