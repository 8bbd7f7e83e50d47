"""The retry policy of `kafkalite.watermark_lookup.watermarks` against a scripted consumer
(the real librdkafka behaviour it answers is in tests/integration/spark/test_spark_streaming.py):
each failed attempt re-reads the topic's metadata; a broker's retriable answer is asked again
up to `retries` times, no answer until the deadline; anything else is raised at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafkalite import watermark_lookup


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class ScriptedConsumer:
    """Each get_watermark_offsets call takes the next outcome: a pair, or an error code
    (raised as KafkaException after `attempt` seconds, or the call's whole timeout for
    _TIMED_OUT)."""

    def __init__(self, clock: Clock, outcomes: list, attempt_s: float = 0.01) -> None:
        self.clock, self.outcomes, self.attempt_s = clock, list(outcomes), attempt_s
        self.calls: list[tuple[str, object]] = []

    def get_watermark_offsets(self, tp, timeout, cached):
        assert cached is False, "the lookup must ask the leader, not the cache"
        self.calls.append(("ListOffsets", timeout))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, tuple):
            self.clock.now += self.attempt_s
            return outcome
        self.clock.now += timeout if outcome == KafkaError._TIMED_OUT else self.attempt_s
        raise KafkaException(KafkaError(outcome))

    def list_topics(self, topic, timeout):
        self.calls.append(("Metadata", topic))


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(watermark_lookup.time, "monotonic", c.monotonic)
    monkeypatch.setattr(watermark_lookup.time, "sleep", c.sleep)
    return c


def test_a_timed_out_attempt_re_reads_metadata_and_the_next_one_answers(clock):
    consumer = ScriptedConsumer(clock, [KafkaError._TIMED_OUT, (3, 9)])
    assert watermark_lookup.watermarks(consumer, "t", 0, timeout_s=30) == (3, 9)
    assert consumer.calls == [("ListOffsets", watermark_lookup.ATTEMPT_TIMEOUT_S), ("Metadata", "t"),
                              ("ListOffsets", watermark_lookup.ATTEMPT_TIMEOUT_S)]


def test_no_answer_is_asked_again_until_the_deadline_and_no_attempt_outlives_it(clock):
    consumer = ScriptedConsumer(clock, [KafkaError._TIMED_OUT] * 20)
    with pytest.raises(KafkaException) as e:
        watermark_lookup.watermarks(consumer, "t", 0, timeout_s=12, retries=0)
    assert e.value.args[0].code() == KafkaError._TIMED_OUT
    attempts = [t for what, t in consumer.calls if what == "ListOffsets"]
    assert len(attempts) == 3 and attempts[:2] == [5.0, 5.0] and 1.5 <= attempts[2] <= 2.0, attempts
    assert clock.now == pytest.approx(12, abs=0.01)


def test_a_leader_moving_is_asked_again_retries_times_then_raised(clock):
    moving = KafkaError.NOT_LEADER_FOR_PARTITION
    consumer = ScriptedConsumer(clock, [moving, moving, (0, 5)])
    assert watermark_lookup.watermarks(consumer, "t", 1, timeout_s=30, retries=2, retry_interval_s=1.0) == (0, 5)
    consumer = ScriptedConsumer(clock, [moving, moving, moving, (0, 5)])
    seen = []
    with pytest.raises(KafkaException):
        watermark_lookup.watermarks(consumer, "t", 1, timeout_s=30, retries=2, retry_interval_s=1.0,
                                    on_retry=seen.append)
    assert len(seen) == 2 and consumer.calls.count(("Metadata", "t")) == 3


def test_a_permanent_error_is_raised_at_once(clock):
    consumer = ScriptedConsumer(clock, [KafkaError.TOPIC_AUTHORIZATION_FAILED, (0, 1)])
    with pytest.raises(KafkaException):
        watermark_lookup.watermarks(consumer, "t", 0, timeout_s=30, retries=5)
    assert [what for what, _ in consumer.calls] == ["ListOffsets", "Metadata"]
