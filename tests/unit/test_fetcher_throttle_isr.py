"""The follower's replication throttle (kafkalite.broker.fetcher) spares a replica in the ISR,
as Kafka does. A follower added mid-move hears of its AlterIsr expansion only through
UpdateMetadata (the metadata cache), not LeaderAndIsr: judged by its LeaderAndIsr alone it
stayed throttled, and acks=all produces waited on it. Real partition over a real log; the
leader is a recording RPC peer."""

from __future__ import annotations

import asyncio
from typing import Any

from kafkalite.broker.fetcher import FetcherManager
from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.broker.partition import Partition
from kafkalite.clock import monotonic_ms
from kafkalite.core.consumer_fetch import ClusterView
from kafkalite.core.quota import FOLLOWER_RATE, ReplicationQuotas
from kafkalite.core.replica_manager import Follow
from kafkalite.log.config import LogConfig
from kafkalite.log.log import Log

SETTINGS = {"replica.fetch.backoff.ms": 20, "replica.fetch.wait.max.ms": 500, "request.timeout.ms": 1000,
            "replica.fetch.min.bytes": 1, "replica.fetch.response.max.bytes": 1 << 20, "replica.fetch.max.bytes": 1 << 20}
TP = ("t", 0)


class RecordingLeader:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def call(self, api: str, body: dict[str, Any], timeout_ms: int):
        self.requests.append(body)
        await asyncio.sleep(30)
        raise AssertionError("the test ends first")


async def _fetches_within_a_second(tmp_path, isr_in_cache: tuple[int, ...]) -> bool:
    part = Partition(TP[0], TP[1], 2, Log.open(str(tmp_path / f"t-0-{len(isr_in_cache)}"), LogConfig(), now_ms=0), 0)
    assert 2 not in part.state.isr  # its LeaderAndIsr said it was not in sync
    leader = RecordingLeader()
    mgr = FetcherManager(SETTINGS, lambda leader_id: leader, lambda: 5, BrokerMetrics(), lambda e: (_ for _ in ()).throw(e))
    mgr.broker_id = 2
    quotas = mgr.quotas = ReplicationQuotas(2)
    quotas.on_partition(TP, (2,))  # being added, throttled at 1 kB/s, and far over it
    quotas.set_rates({FOLLOWER_RATE: 1000}, monotonic_ms())
    quotas.record_follower(TP, 10_000_000, monotonic_ms())
    mgr.cluster_view = lambda tp: ClusterView({1: None, 2: None}, True, isr_in_cache, part.state.leader_epoch)
    mgr.add([Follow(part, 1, 0, truncating=False)])
    try:
        for _ in range(100):
            if leader.requests:
                return True
            await asyncio.sleep(0.01)
        return False
    finally:
        await mgr.close()


async def test_a_replica_the_controller_added_to_the_isr_is_not_throttled(tmp_path):
    assert await _fetches_within_a_second(tmp_path, (1, 2))
    assert not await _fetches_within_a_second(tmp_path, (1,))  # not in sync: throttled
