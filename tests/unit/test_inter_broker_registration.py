"""Controller requests wait for the broker's registration (found by the simulator, issue 9,
sweep seed 3705): before it, a request resent to the previous incarnation's registration
would pass the broker-epoch fence (the broker's own epoch is still unknown, -1)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kafkalite.broker.inter_broker import InterBrokerHandlers


class FakeReplicaManager:
    def __init__(self) -> None:
        self.handled: list[str] = []

    def handle_leader_and_isr(self, h):
        self.handled.append("LeaderAndIsr")
        return {"error": 0, "partitions": []}

    def handle_stop_replica(self, h):
        self.handled.append("StopReplica")
        return {"error": 0, "partitions": []}


async def test_controller_requests_wait_until_the_broker_registered():
    rm = FakeReplicaManager()
    broker = SimpleNamespace(replica_manager=rm, registered=asyncio.Event(), note_broker_address=lambda *a: None)
    handlers = InterBrokerHandlers(broker)  # type: ignore[arg-type]
    header = {"controller_id": 1, "controller_epoch": 3, "broker_epoch": 20, "partitions": [], "live_leaders": {}}
    calls = [asyncio.create_task(handlers.handle({"api": api, **header}, memoryview(b""))) for api in ("LeaderAndIsr", "StopReplica")]
    for _ in range(5):
        await asyncio.sleep(0)
    assert rm.handled == [] and not any(c.done() for c in calls)
    broker.registered.set()
    answers = await asyncio.gather(*calls)
    assert rm.handled == ["LeaderAndIsr", "StopReplica"]
    assert all(h["error"] == 0 for h, _ in answers)
