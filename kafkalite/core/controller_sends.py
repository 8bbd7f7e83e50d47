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
                                       topic_configs={**a.topic_configs, **b.topic_configs})
        case StopReplica(), StopReplica():
            if a.delete != b.delete:
                return None
            return dataclasses.replace(a, partitions=a.partitions + tuple(tp for tp in b.partitions if tp not in a.partitions))
        case UpdateMetadata(), UpdateMetadata():
            if b.full:
                return None
            gone = set(b.deleted_topics)
            by_tp = {(m.topic, m.partition): m for m in a.partitions if m.topic not in gone}
            by_tp.update({(m.topic, m.partition): m for m in b.partitions})
            return dataclasses.replace(a, brokers=b.brokers, partitions=tuple(by_tp.values()),
                                       deleted_topics=a.deleted_topics + b.deleted_topics,
                                       topic_configs={t: c for t, c in {**a.topic_configs, **b.topic_configs}.items() if t not in gone})
    return None
