"""How the controller's requests reach a broker (seed section A; Kafka's RequestSendThread):
the policy both drivers' transports follow, the asyncio `ControllerChannel` and the
simulator's.

- Requests to one broker go in order, one at a time.
- A request is resent after a failure or timeout, backing off, for as long as the broker
  stays registered with the same broker epoch: a live, registered broker always ends up
  with the controller's current state. A broker that left or re-registered gets nothing
  queued for its old registration (the controller sends it everything anew).
- Requests queued behind one in flight merge into the next request of their kind, so one
  event touching 10,000 partitions costs one request per broker.
- An UpdateMetadata waits (bounded by METADATA_BARRIER_WAIT_MS) until the LeaderAndIsr
  requests queued before it, to any broker, were answered: clients must not learn of a new
  leader before the leader does (issue 7).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

from kafkalite.core.messages import ControllerRequest, LeaderAndIsr, StopReplica, UpdateMetadata

SEND_BACKOFF_MS = 100
SEND_BACKOFF_MAX_MS = 1000
METADATA_BARRIER_WAIT_MS = 2000  # an unresponsive new leader delays nobody's metadata longer


def resend_backoff_ms(attempt: int) -> int:
    """Wait before resend number `attempt` (1, 2, ...)."""
    assert attempt >= 1
    return min(SEND_BACKOFF_MS * attempt, SEND_BACKOFF_MAX_MS)


def merged(a: ControllerRequest, b: ControllerRequest) -> ControllerRequest | None:
    """`a` and then `b` as one request, or None when they must go separately."""
    if type(a) is not type(b) or a.controller_epoch != b.controller_epoch or a.broker_epoch != b.broker_epoch:
        return None
    match a, b:
        case LeaderAndIsr(), LeaderAndIsr():
            if a.init or b.init:
                return None
            by_tp = {p.topic_partition: p for p in a.partitions}
            by_tp.update({p.topic_partition: p for p in b.partitions})
            return dataclasses.replace(a, partitions=tuple(by_tp.values()),
                                       live_leaders={**a.live_leaders, **b.live_leaders},
                                       topic_configs={**a.topic_configs, **b.topic_configs}, throttle=_throttle_of(a, b),
                                       topic_ids={**a.topic_ids, **b.topic_ids})
        case StopReplica(), StopReplica():
            if a.delete != b.delete:
                return None
            return dataclasses.replace(a, partitions=a.partitions + tuple(tp for tp in b.partitions if tp not in a.partitions))
        case UpdateMetadata(), UpdateMetadata():
            if b.full:
                return None
            gone, gone_tps = set(b.deleted_topics), set(b.deleted_partitions)
            by_tp = {(m.topic, m.partition): m for m in a.partitions if m.topic not in gone and (m.topic, m.partition) not in gone_tps}
            by_tp.update({(m.topic, m.partition): m for m in b.partitions})
            # Every deletion is kept: a broker applies deletions before partitions, so a topic
            # deleted in `a` and listed again in `b` (re-created) loses what it had and gets
            # what `b` lists. Dropping the deletion left a re-created topic with fewer
            # partitions holding the old one's extra partitions in that broker's cache.
            return dataclasses.replace(a, brokers=b.brokers, partitions=tuple(by_tp.values()),
                                       deleted_topics=tuple(dict.fromkeys(a.deleted_topics + b.deleted_topics)),
                                       deleted_partitions=tuple(dict.fromkeys(a.deleted_partitions + b.deleted_partitions)),
                                       topic_configs={t: c for t, c in {**a.topic_configs, **b.topic_configs}.items() if t not in gone})
    return None


def _throttle_of(a: LeaderAndIsr, b: LeaderAndIsr) -> dict[str, int]:
    """The rates a broker ends with applying `a` and then `b`: it takes those of a request
    with replicas being added, so `b`'s if it adds any (the controller's newer rates, even
    none), else `a`'s. Taking `b`'s always left the moves of `a` unthrottled whenever a
    request about other partitions queued behind it (a leader change, an epoch bump)."""
    return dict(b.throttle if any(p.adding for p in b.partitions) else a.throttle)


class SendQueue:
    """One broker's requests, as the policy above says: in order, one in flight, what
    queued behind it merged into the next request, resent until answered. Each request may
    carry a token (the driver's: a future to answer, a barrier to release); `answered`
    and `drop` hand back the tokens of what they end."""

    def __init__(self, broker_id: int, broker_epoch: int) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self._queue: deque[tuple[ControllerRequest, Any]] = deque()
        self.in_flight: ControllerRequest | None = None
        self.in_flight_tokens: list[Any] = []
        self.attempt = 0

    def push(self, request: ControllerRequest, token: Any = None) -> None:
        assert request.broker_epoch == self.broker_epoch, "a request for another registration of this broker"
        self._queue.append((request, token))

    def __bool__(self) -> bool:
        return bool(self._queue) or self.in_flight is not None

    def next(self) -> ControllerRequest | None:
        """The request to send now (None while one is in flight or nothing is queued)."""
        if self.in_flight is not None or not self._queue:
            return None
        request, token = self._queue.popleft()
        tokens = [token]
        while self._queue and (both := merged(request, self._queue[0][0])) is not None:
            request = both
            tokens.append(self._queue.popleft()[1])
        self.in_flight, self.in_flight_tokens, self.attempt = request, tokens, 0
        return request

    def failed(self) -> int:
        """The in-flight request got no answer: how long to wait before resending it."""
        assert self.in_flight is not None
        self.attempt += 1
        return resend_backoff_ms(self.attempt)

    def answered(self) -> list[Any]:
        assert self.in_flight is not None
        tokens, self.in_flight, self.in_flight_tokens = self.in_flight_tokens, None, []
        return tokens

    def drop(self) -> list[Any]:
        """The broker left or re-registered: everything ends unsent."""
        tokens = self.in_flight_tokens + [t for _, t in self._queue]
        self._queue.clear()
        self.in_flight, self.in_flight_tokens = None, []
        return tokens
