"""The retry policy of `kafkalite.leader_lookups` against a scripted consumer
(the real librdkafka behaviour it answers is in tests/integration/spark/test_spark_streaming.py):
each failed attempt re-reads the topic's metadata; a broker's retriable answer is asked again
up to `retries` times, no answer until the deadline; anything else is raised at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kafkalite import leader_lookups
from kafkalite.testing.fake_clock import FakeClock


class ScriptedConsumer:
    """Each lookup takes the next outcome: its answer (a pair of watermarks, or a dict of
    offsets by partition), or an error code (raised as KafkaException after `attempt_s`
    seconds, or the call's whole timeout for _TIMED_OUT)."""

    def __init__(self, clock: FakeClock, outcomes: list, attempt_s: float = 0.01) -> None:
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

    def offsets_for_times(self, partitions, timeout):
        self.calls.append(("ListOffsets", timeout))
        outcome = self.outcomes.pop(0)
        self.clock.now += timeout if outcome == KafkaError._TIMED_OUT else self.attempt_s
        if isinstance(outcome, int):
            raise KafkaException(KafkaError(outcome))
        return [TopicPartition(tp.topic, tp.partition, outcome.get((tp.topic, tp.partition), -1)) for tp in partitions]


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(leader_lookups.time, "monotonic", c.monotonic)
    monkeypatch.setattr(leader_lookups.time, "sleep", c.sleep)
    return c


def test_a_timed_out_attempt_re_reads_metadata_and_the_next_one_answers(clock):
    consumer = ScriptedConsumer(clock, [KafkaError._TIMED_OUT, (3, 9)])
    assert leader_lookups.watermarks(consumer, "t", 0, timeout_s=30) == (3, 9)
    assert consumer.calls == [("ListOffsets", leader_lookups.ATTEMPT_TIMEOUT_S), ("Metadata", "t"),
                              ("ListOffsets", leader_lookups.ATTEMPT_TIMEOUT_S)]


def test_no_answer_is_asked_again_until_the_deadline_and_no_attempt_outlives_it(clock):
    consumer = ScriptedConsumer(clock, [KafkaError._TIMED_OUT] * 20)
    with pytest.raises(KafkaException) as e:
        leader_lookups.watermarks(consumer, "t", 0, timeout_s=12, retries=0)
    assert e.value.args[0].code() == KafkaError._TIMED_OUT
    attempts = [t for what, t in consumer.calls if what == "ListOffsets"]
    assert len(attempts) == 3 and attempts[:2] == [5.0, 5.0] and 1.5 <= attempts[2] <= 2.0, attempts
    assert clock.now == pytest.approx(12, abs=0.01)


def test_a_leader_moving_is_asked_again_retries_times_then_raised(clock):
    moving = KafkaError.NOT_LEADER_FOR_PARTITION
    consumer = ScriptedConsumer(clock, [moving, moving, (0, 5)])
    assert leader_lookups.watermarks(consumer, "t", 1, timeout_s=30, retries=2, retry_interval_s=1.0) == (0, 5)
    consumer = ScriptedConsumer(clock, [moving, moving, moving, (0, 5)])
    seen = []
    with pytest.raises(KafkaException):
        leader_lookups.watermarks(consumer, "t", 1, timeout_s=30, retries=2, retry_interval_s=1.0,
                                    on_retry=seen.append)
    assert len(seen) == 2 and consumer.calls.count(("Metadata", "t")) == 3


def test_a_permanent_error_is_raised_at_once(clock):
    consumer = ScriptedConsumer(clock, [KafkaError.TOPIC_AUTHORIZATION_FAILED, (0, 1)])
    with pytest.raises(KafkaException):
        leader_lookups.watermarks(consumer, "t", 0, timeout_s=30, retries=5)
    assert [what for what, _ in consumer.calls] == ["ListOffsets", "Metadata"]


def test_offsets_for_times_re_read_every_topic_asked_and_answer_per_partition(clock):
    consumer = ScriptedConsumer(clock, [KafkaError._TRANSPORT, {("a", 0): 7, ("b", 1): 3}])
    got = leader_lookups.offsets_for_times(consumer, {("a", 0): 100, ("b", 1): 100, ("b", 2): 10**12}, timeout_s=30)
    assert got == {("a", 0): 7, ("b", 1): 3, ("b", 2): -1}
    assert [c for c in consumer.calls if c[0] == "Metadata"] == [("Metadata", "a"), ("Metadata", "b")]


def test_a_partition_missing_from_the_cached_metadata_is_asked_again_after_a_metadata_read(clock):
    """librdkafka answers _UNKNOWN_PARTITION from its cache when that lists the topic without
    the partition (the CI failure of stop 25): the metadata read after the failure mends it."""
    consumer = ScriptedConsumer(clock, [KafkaError._UNKNOWN_PARTITION, (0, 4)])
    assert leader_lookups.watermarks(consumer, "t", 3, timeout_s=30, retries=1) == (0, 4)
    assert [what for what, _ in consumer.calls] == ["ListOffsets", "Metadata", "ListOffsets"]
