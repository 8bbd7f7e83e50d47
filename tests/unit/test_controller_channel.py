"""The controller's per-broker senders: UpdateMetadata waits for earlier LeaderAndIsr sends
to every broker (issue 7: a client must not learn of a leader before the leader does)."""

from __future__ import annotations

import asyncio

from kafkalite.broker import controller_channel
from kafkalite.broker.controller_channel import BrokerSender, ControllerChannel
from kafkalite.core.messages import LeaderAndIsr, PartitionLeadership, UpdateMetadata


def lai(broker_epoch: int, *partitions: PartitionLeadership) -> LeaderAndIsr:
    return LeaderAndIsr(controller_id=1, controller_epoch=1, broker_epoch=broker_epoch, partitions=partitions)


def um(broker_epoch: int) -> UpdateMetadata:
    return UpdateMetadata(controller_id=1, controller_epoch=1, broker_epoch=broker_epoch, brokers=())


class FakeClient:
    """Records calls; LeaderAndIsr calls to a gated client wait until released."""

    def __init__(self, name: str, log: list[str], gate: asyncio.Event | None = None):
        self.name, self.log, self.gate = name, log, gate

    async def call(self, api, body, payload=b"", *, timeout_ms=30000):
        if api == "LeaderAndIsr" and self.gate is not None:
            await self.gate.wait()
        self.log.append(f"{api}->{self.name}")
        return {"error": 0}, memoryview(b"")

    async def close(self):
        pass


def _channel(log: list[str], gate: asyncio.Event) -> ControllerChannel:
    channel = ControllerChannel(1, 1000, lambda *args: None)
    channel.senders[2] = BrokerSender(2, 10, FakeClient("b2", log, gate), 1000, lambda *args: None)
    channel.senders[3] = BrokerSender(3, 11, FakeClient("b3", log), 1000, lambda *args: None)
    return channel


async def test_update_metadata_waits_for_an_earlier_leader_and_isr_to_another_broker():
    log: list[str] = []
    gate = asyncio.Event()
    channel = _channel(log, gate)
    channel.send(2, lai(10, PartitionLeadership("t", 0, 2, 5, (2, 3), 1, (2, 3))))  # broker 2 becomes leader; its answer is slow
    channel.send(3, um(11))
    await asyncio.sleep(0.1)
    assert log == []  # nobody hears of the new leader before it knows
    gate.set()
    await asyncio.sleep(0.1)
    assert log == ["LeaderAndIsr->b2", "UpdateMetadata->b3"]
    await channel.close()


async def test_update_metadata_goes_out_after_the_bound_when_a_leader_never_answers(monkeypatch):
    monkeypatch.setattr(controller_channel, "METADATA_BARRIER_WAIT_MS", 200)
    log: list[str] = []
    gate = asyncio.Event()
    channel = _channel(log, gate)
    channel.send(2, lai(10))
    channel.send(3, um(11))
    await asyncio.sleep(0.5)
    assert log == ["UpdateMetadata->b3"]
    gate.set()
    await asyncio.sleep(0.1)
    assert log == ["UpdateMetadata->b3", "LeaderAndIsr->b2"]
    await channel.close()


async def test_update_metadata_sent_before_a_leader_and_isr_does_not_wait_for_it():
    log: list[str] = []
    gate = asyncio.Event()
    channel = _channel(log, gate)
    channel.send(3, um(11))
    channel.send(2, lai(10))
    await asyncio.sleep(0.1)
    assert log == ["UpdateMetadata->b3"]
    gate.set()
    await asyncio.sleep(0.1)
    await channel.close()


async def test_a_send_is_retried_until_the_broker_answers(monkeypatch):
    """Issue 7: the sender used to give up after 20 attempts, leaving a live, registered
    broker without its LeaderAndIsr; Kafka's RequestSendThread retries until the broker is
    gone, and so do we (a re-registered broker gets a new sender)."""
    from kafkalite.core import controller_sends
    from kafkalite.rpc.transport import RpcError

    monkeypatch.setattr(controller_sends, "resend_backoff_ms", lambda attempt: 1)
    answers: list[tuple[int, str, dict]] = []

    class Flaky(FakeClient):
        calls = 0

        async def call(self, api, body, payload=b"", *, timeout_ms=30000):
            Flaky.calls += 1
            if Flaky.calls <= 50:
                raise RpcError("connection refused")
            return await super().call(api, body, payload, timeout_ms=timeout_ms)

    log: list[str] = []
    sender = BrokerSender(2, 10, Flaky("b2", log), 1000, lambda *args: answers.append(args))
    fut = asyncio.get_running_loop().create_future()
    sender.enqueue(controller_channel._Queued(lai(10), fut))
    assert await asyncio.wait_for(fut, 5) == {"error": 0}
    assert Flaky.calls == 51
    assert log == ["LeaderAndIsr->b2"]
    assert answers == [(2, "LeaderAndIsr", {"error": 0})]
    await sender.close()
