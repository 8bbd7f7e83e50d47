"""Controller -> broker requests: one ordered sender per broker, batched (seed section A).

LeaderAndIsr, StopReplica and UpdateMetadata queued for a broker while a send is in flight
are merged into the next request of their kind, so one event that touches 10,000
partitions costs one request per broker, not 10,000. A send is retried (backing off up to
a second) for as long as the broker stays registered with the same epoch, as Kafka's
RequestSendThread does: a live, registered broker always ends up with the controller's
current state. A broker that left or re-registered gets a new sender and nothing stale.

An UpdateMetadata waits (bounded) until every LeaderAndIsr queued before it, to any broker,
has been answered: clients learn of a new leader from any broker's metadata, and one that
learned it before the leader did gets NOT_LEADER for one batch while its next batch, sent
a moment later, succeeds. librdkafka then reports the first batch delivered without an
offset (issue 7). Kafka's controller sends both at once and has the same window.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from kafkalite.aio import cancel_and_wait, spawn
from kafkalite.rpc.transport import RpcClient, RpcError

log = logging.getLogger(__name__)

SEND_BACKOFF_S = 0.1
SEND_BACKOFF_MAX_S = 1.0
SEND_FAILURES_LOGGED_EVERY = 20
METADATA_BARRIER_WAIT_S = 2.0  # an unresponsive new leader delays nobody's metadata longer


@dataclasses.dataclass
class _Queued:
    api: str
    body: dict[str, Any]
    future: asyncio.Future | None
    done: asyncio.Future | None = None  # LeaderAndIsr: resolved when its send ended
    barrier: tuple[asyncio.Future, ...] = ()  # UpdateMetadata: LeaderAndIsr sends to wait for


class BrokerSender:
    def __init__(self, broker_id: int, broker_epoch: int, client: RpcClient, timeout_ms: int, on_response: Callable[[int, str, dict[str, Any]], None]):
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.client = client
        self.timeout_ms = timeout_ms
        self.on_response = on_response
        self._queue: list[_Queued] = []
        self._in_flight: list[_Queued] = []  # the items merged into the request being sent
        self._event = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"controller-sender-{broker_id}")

    def enqueue(self, item: _Queued) -> None:
        item.body = dict(item.body)
        item.body["broker_epoch"] = self.broker_epoch
        self._queue.append(item)
        self._event.set()

    def _take_batch(self) -> tuple[str, dict[str, Any], list[_Queued]]:
        """The next request: the head of the queue merged with same-kind followers, and
        the queued items it answers."""
        head = self._queue.pop(0)
        api, body = head.api, head.body
        merged = [head]
        while self._queue and self._queue[0].api == api and _mergeable(api, body, self._queue[0].body):
            nxt = self._queue.pop(0)
            body = _merge(api, body, nxt.body)
            merged.append(nxt)
        return api, body, merged

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._event.clear()
                await self._event.wait()
                continue
            api, body, self._in_flight = self._take_batch()
            barrier = {f for q in self._in_flight for f in q.barrier if not f.done()}
            if barrier:
                await asyncio.wait(barrier, timeout=METADATA_BARRIER_WAIT_S)
            result = await self._send_until_answered(api, body)
            for q in self._in_flight:
                if q.future is not None and not q.future.done():
                    q.future.set_result(result)
            _release(self._in_flight)  # answered: metadata may follow
            self._in_flight = []
            self.on_response(self.broker_id, api, result)

    async def _send_until_answered(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """Until the broker answers; only closing this sender (the broker left or
        re-registered, or the controller resigned) ends it otherwise."""
        attempt = 0
        while True:
            try:
                header, _ = await self.client.call(api, body, timeout_ms=self.timeout_ms)
                return dict(header)
            except RpcError as e:
                attempt += 1
                if attempt % SEND_FAILURES_LOGGED_EVERY == 0:
                    log.warning("%s to broker %d still unanswered after %d attempts: %s", api, self.broker_id, attempt, e)
                else:
                    log.debug("%s to broker %d failed (attempt %d): %s", api, self.broker_id, attempt, e)
                await asyncio.sleep(min(SEND_BACKOFF_S * attempt, SEND_BACKOFF_MAX_S))

    async def close(self) -> None:
        await cancel_and_wait([self._task])
        _release(self._in_flight + self._queue)
        for q in self._queue:
            if q.future is not None and not q.future.done():
                q.future.set_exception(RpcError("controller channel closed"))
        await self.client.close()


def _release(items: list[_Queued]) -> None:
    """The LeaderAndIsr sends among `items` are over: UpdateMetadata waiting on them may go."""
    for q in items:
        if q.done is not None and not q.done.done():
            q.done.set_result(None)


def _mergeable(api: str, a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.get("controller_epoch") != b.get("controller_epoch"):
        return False
    if api == "StopReplica":
        return a.get("delete") == b.get("delete")
    if api == "UpdateMetadata":
        return not b.get("full")
    if api == "LeaderAndIsr":
        return not b.get("init") and not a.get("init")
    return False


def _merge(api: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    if api == "LeaderAndIsr":
        by_tp = {(w[0], w[1]): w for w in a["partitions"]}
        for w in b["partitions"]:
            by_tp[(w[0], w[1])] = w
        out["partitions"] = list(by_tp.values())
        out["topic_configs"] = {**a.get("topic_configs", {}), **b.get("topic_configs", {})}
    elif api == "StopReplica":
        out["partitions"] = a["partitions"] + b["partitions"]
    elif api == "UpdateMetadata":
        parts = {t: dict(ps) for t, ps in a.get("partitions", {}).items()}
        for t, ps in b.get("partitions", {}).items():
            parts.setdefault(t, {}).update(ps)
        deleted = list(a.get("deleted_topics", [])) + list(b.get("deleted_topics", []))
        for t in b.get("deleted_topics", []):
            parts.pop(t, None)
        out.update(brokers=b["brokers"], controller_id=b["controller_id"], partitions=parts, deleted_topics=deleted,
                   topic_configs={**a.get("topic_configs", {}), **b.get("topic_configs", {})})
    return out


class ControllerChannel:
    def __init__(self, sender_id: int, timeout_ms: int, on_response: Callable[[int, str, dict[str, Any]], None]):
        self.sender_id = sender_id
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
        self.senders[broker_id] = BrokerSender(broker_id, broker_epoch, RpcClient(host, port, sender=self.sender_id), self.timeout_ms, self.on_response)

    def remove_broker(self, broker_id: int) -> None:
        old = self.senders.pop(broker_id, None)
        if old is not None:
            spawn(old.close(), name=f"close-sender-{broker_id}", owner=self._closing)

    def send(self, broker_id: int, api: str, body: dict[str, Any], future: asyncio.Future | None = None) -> bool:
        sender = self.senders.get(broker_id)
        if sender is None:
            return False
        item = _Queued(api, body, future)
        if api == "LeaderAndIsr":
            item.done = asyncio.get_running_loop().create_future()
            self._leader_and_isr_in_flight.add(item.done)
            item.done.add_done_callback(self._leader_and_isr_in_flight.discard)
        elif api == "UpdateMetadata":
            item.barrier = tuple(self._leader_and_isr_in_flight)
        sender.enqueue(item)
        return True

    async def close(self) -> None:
        for s in list(self.senders.values()):
            await s.close()
        self.senders.clear()
        await asyncio.gather(*list(self._closing), return_exceptions=True)
