"""Lookups asked of a partition's leader through librdkafka (ListOffsets: watermarks, offsets
for timestamps), without sticking to a leader that has died.

librdkafka's `get_watermark_offsets(cached=False)` and `offsets_for_times` send ListOffsets
to the leader in the client's metadata cache. If that broker is dead, the request waits on
it, retried each time a broker changes state, until the call's timeout; a transport error
does not refresh the cache (`rd_kafka_handle_ListOffsets` marks it retry only), and a client
that only looks offsets up has no assigned partition whose fetcher would notice the new
leader. So every later call goes to the dead broker too, until something else refreshes the
cache: `metadata.max.age.ms`, 15 minutes. Measured on a 3-broker cluster: after a kill -9
of the leader, every call timed out (30 s each) until one Metadata request for the topic,
after which the next answered in under a millisecond.

Hence: each attempt is short, a failed attempt re-reads its topics' metadata (which updates
the cache), and the attempt is made again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

T = TypeVar("T")
ATTEMPT_TIMEOUT_S = 5.0  # a ListOffsets round trip answers in milliseconds
UNANSWERED_BACKOFF_S = 0.2  # between attempts that no broker answered (none may be reachable)
# Errors that a later attempt may not see: a leader moving or unreachable, no answer yet, or
# a partition the cached metadata lacks (librdkafka answers _UNKNOWN_PARTITION from its
# cache without asking; the metadata read after the failure mends that).
_RETRIABLE = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                        KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                        KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
                        KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART})
# ... of which these mean no broker answered (the others are a broker's answer).
_UNANSWERED = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


def error_of(e: KafkaException) -> KafkaError | None:
    return e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None


def retriable(e: KafkaException) -> bool:
    err = error_of(e)
    return err is not None and (err.retriable() or err.code() in _RETRIABLE)


def unanswered(e: KafkaException) -> bool:
    err = error_of(e)
    return err is not None and err.code() in _UNANSWERED


def _refresh(consumer: Consumer, topics: Iterable[str], timeout_s: float) -> None:
    """Metadata of the topics, read again: librdkafka's cache then names their current leaders."""
    for topic in sorted(set(topics)):
        try:
            consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException:
            return  # no broker answered either: the next attempt tries again


def asked_again(attempt: Callable[[float], T], consumer: Consumer, topics: Iterable[str], *, timeout_s: float,
                retries: int = 0, retry_interval_s: float = 0.0, attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
                on_retry: Callable[[KafkaException], None] | None = None) -> T:
    """`attempt(timeout_s)`, made again after a retriable error, with the topics' metadata
    read again in between: after no answer, until `timeout_s` has passed; after a broker's
    retriable answer (a leader moving), up to `retries` times, `retry_interval_s` apart.
    Anything else is raised at once. `on_retry(exception)` is called before each new attempt."""
    deadline = time.monotonic() + timeout_s
    answered_failures = 0
    while True:
        attempt_s = max(0.1, min(attempt_timeout_s, deadline - time.monotonic()))
        try:
            return attempt(attempt_s)
        except KafkaException as e:
            _refresh(consumer, topics, attempt_s)  # before raising too: the caller's next call asks afresh
            if not retriable(e):
                raise
            if unanswered(e):
                if time.monotonic() >= deadline:
                    raise
            else:
                answered_failures += 1
                if answered_failures > retries:
                    raise
            if on_retry is not None:
                on_retry(e)
            time.sleep(UNANSWERED_BACKOFF_S if unanswered(e) else retry_interval_s)


def watermarks(consumer: Consumer, topic: str, partition: int, *, timeout_s: float, **retry: Any) -> tuple[int, int]:
    """(low, high) of a partition, from its leader (`asked_again`'s keywords)."""
    def attempt(t: float) -> tuple[int, int]:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=t, cached=False)
    return asked_again(attempt, consumer, [topic], timeout_s=timeout_s, **retry)


def offsets_for_times(consumer: Consumer, requests: Mapping[tuple[str, int], int], *, timeout_s: float,
                      **retry: Any) -> dict[tuple[str, int], int]:
    """Per partition, the first offset whose timestamp is >= the requested ms (-1: none),
    from the leaders (`asked_again`'s keywords). A partition's own error is raised."""
    def attempt(t: float) -> dict[tuple[str, int], int]:
        found = consumer.offsets_for_times([TopicPartition(tp, p, ts) for (tp, p), ts in requests.items()], timeout=t)
        for tp in found:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {(tp.topic, tp.partition): tp.offset for tp in found}
    return asked_again(attempt, consumer, [t for t, _ in requests], timeout_s=timeout_s, **retry)
