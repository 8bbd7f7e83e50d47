"""Controller -> broker requests: one ordered sender per broker, following the policy in
kafkalite.core.controller_sends (resend until answered while the broker keeps its
registration, merge what queued up, UpdateMetadata after the LeaderAndIsr before it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from kafkalite.aio import cancel_and_wait, spawn
from kafkalite.core.controller_sends import METADATA_BARRIER_WAIT_MS, SendQueue
from kafkalite.core.messages import ControllerRequest, LeaderAndIsr, UpdateMetadata
from kafkalite.gc_pause import gc_paused
from kafkalite.rpc.transport import RpcClient, RpcError

log = logging.getLogger(__name__)

SEND_FAILURES_LOGGED_EVERY = 20


@dataclasses.dataclass
class _Queued:
    request: ControllerRequest
    future: asyncio.Future | None
    done: asyncio.Future | None = None  # LeaderAndIsr: resolved when its send ended
    barrier: tuple[asyncio.Future, ...] = ()  # UpdateMetadata: LeaderAndIsr sends to wait for


class BrokerSender:
    """Drives one broker's core SendQueue over the RPC client."""

    def __init__(self, broker_id: int, broker_epoch: int, client: RpcClient, timeout_ms: int, on_response: Callable[[int, str, dict[str, Any]], None]):
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.client = client
        self.timeout_ms = timeout_ms
        self.on_response = on_response
        self.queue = SendQueue(broker_id, broker_epoch)
        self._event = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"controller-sender-{broker_id}")

    def enqueue(self, item: _Queued) -> None:
        self.queue.push(item.request, item)
        self._event.set()

    async def _run(self) -> None:
        while True:
            request = self.queue.next()
            if request is None:
                self._event.clear()
                await self._event.wait()
                continue
            api = type(request).__name__
            barrier = {f for q in self.queue.in_flight_tokens for f in q.barrier if not f.done()}
            if barrier:
                await asyncio.wait(barrier, timeout=METADATA_BARRIER_WAIT_MS / 1000)
            with gc_paused():  # many partitions' lists (kafkalite.gc_pause)
                body = request.to_wire()
            result = await self._send_until_answered(api, body)
            items = self.queue.answered()
            for q in items:
                if q.future is not None and not q.future.done():
                    q.future.set_result(result)
            _release(items)  # answered: metadata may follow
            self.on_response(self.broker_id, api, result)

    async def _send_until_answered(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """Until the broker answers; only closing this sender (the broker left or
        re-registered, or the controller resigned) ends it otherwise."""
        while True:
            try:
                header, _ = await self.client.call(api, body, timeout_ms=self.timeout_ms)
                return dict(header)
            except RpcError as e:
                backoff_ms = self.queue.failed()
                if self.queue.attempt % SEND_FAILURES_LOGGED_EVERY == 0:
                    log.warning("%s to broker %d still unanswered after %d attempts: %s", api, self.broker_id, self.queue.attempt, e)
                else:
                    log.debug("%s to broker %d failed (attempt %d): %s", api, self.broker_id, self.queue.attempt, e)
                await asyncio.sleep(backoff_ms / 1000)

    async def close(self) -> None:
        await cancel_and_wait([self._task])
        items = self.queue.drop()
        _release(items)
        for q in items:
            if q.future is not None and not q.future.done():
                q.future.set_exception(RpcError("controller channel closed"))
        await self.client.close()


def _release(items: list[_Queued]) -> None:
    """The LeaderAndIsr sends among `items` are over: UpdateMetadata waiting on them may go."""
    for q in items:
        if q.done is not None and not q.done.done():
            q.done.set_result(None)


class ControllerChannel:
    def __init__(self, sender_id: int, timeout_ms: int, on_response: Callable[[int, str, dict[str, Any]], None],
                 secret: bytes | None = None):
        self.sender_id = sender_id
        self.secret = secret  # the inter-broker RPC secret (kafkalite.rpc.auth), None: off
        self.timeout_ms = timeout_ms
        self.on_response = on_response
        self.senders: dict[int, BrokerSender] = {}
        self._leader_and_isr_in_flight: set[asyncio.Future] = set()
        self._closing: set[asyncio.Task] = set()  # senders of brokers that left or re-registered

    def add_broker(self, broker_id: int, broker_epoch: int, host: str, port: int) -> None:
        old = self.senders.get(broker_id)
        if old is not None and old.broker_epoch == broker_epoch:
            return
        if old is not None:
            spawn(old.close(), name=f"close-sender-{broker_id}", owner=self._closing)
        self.senders[broker_id] = BrokerSender(broker_id, broker_epoch, RpcClient(host, port, sender=self.sender_id, secret=self.secret), self.timeout_ms, self.on_response)

    def remove_broker(self, broker_id: int) -> None:
        old = self.senders.pop(broker_id, None)
        if old is not None:
            spawn(old.close(), name=f"close-sender-{broker_id}", owner=self._closing)

    def send(self, broker_id: int, request: ControllerRequest, future: asyncio.Future | None = None) -> bool:
        sender = self.senders.get(broker_id)
        if sender is None:
            return False
        item = _Queued(request, future)
        if isinstance(request, LeaderAndIsr):
            item.done = asyncio.get_running_loop().create_future()
            self._leader_and_isr_in_flight.add(item.done)
            item.done.add_done_callback(self._leader_and_isr_in_flight.discard)
        elif isinstance(request, UpdateMetadata):
            item.barrier = tuple(self._leader_and_isr_in_flight)
        sender.enqueue(item)
        return True

    async def close(self) -> None:
        for s in list(self.senders.values()):
            await s.close()
        self.senders.clear()
        await asyncio.gather(*list(self._closing), return_exceptions=True)
