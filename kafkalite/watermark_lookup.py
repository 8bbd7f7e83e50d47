"""A partition's watermarks (log start, log end) asked of its leader through librdkafka,
without sticking to a leader that has died.

librdkafka's `get_watermark_offsets(cached=False)` sends ListOffsets to the leader in the
client's metadata cache. If that broker is dead, the request waits on it, retried each time
a broker changes state, until the call's timeout; a transport error does not refresh the
cache (`rd_kafka_handle_ListOffsets` marks it retry only), and a client that only looks up
watermarks has no assigned partition whose fetcher would notice the new leader. So every
later call goes to the dead broker too, until something else refreshes the cache:
`metadata.max.age.ms`, 15 minutes. Measured on a 3-broker cluster: after a kill -9 of the
leader, every call timed out (30 s each) until one Metadata request for the topic, after
which the next answered in under a millisecond.

Hence: each attempt is short, a failed attempt re-reads the topic's metadata (which updates
the cache), and the caller's loop asks again.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

ATTEMPT_TIMEOUT_S = 5.0  # one ListOffsets round trip (two requests) answers in milliseconds
UNANSWERED_BACKOFF_S = 0.2  # between attempts that no broker answered (none may be reachable)
# Errors that a later attempt may not see: a leader moving or unreachable, no answer yet.
_RETRIABLE = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                        KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                        KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT})
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


def ask_watermarks(consumer: Consumer, topic: str, partition: int,
                   timeout_s: float = ATTEMPT_TIMEOUT_S) -> tuple[int, int]:
    """One attempt: (low, high) from the leader. On failure the topic's metadata is read
    again before the error is raised, so that the next attempt asks the current leader."""
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s, cached=False)
    except KafkaException:
        try:
            consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException:
            pass  # no broker answered either: the caller's next attempt tries again
        raise


def watermarks(consumer: Consumer, topic: str, partition: int, *, timeout_s: float, retries: int = 0,
               retry_interval_s: float = 0.0, attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
               on_retry=None) -> tuple[int, int]:
    """(low, high), asked again after a retriable error: after no answer, until `timeout_s`
    has passed; after a broker's retriable answer (a leader moving), up to `retries` times,
    `retry_interval_s` apart. Anything else is raised at once. `on_retry(exception)` is
    called before each new attempt."""
    deadline = time.monotonic() + timeout_s
    answered_failures = 0
    while True:
        attempt_s = max(0.1, min(attempt_timeout_s, deadline - time.monotonic()))
        try:
            return ask_watermarks(consumer, topic, partition, attempt_s)
        except KafkaException as e:
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
