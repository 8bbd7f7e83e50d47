"""The driver side of the Spark source (`kafkalite.spark.source`) against a scripted
consumer and a fake clock, without a Spark session: which lookups it makes, how often it
asks again, and when a streaming trigger runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafkalite import leader_lookups
from kafkalite.spark import client, source
from kafkalite.spark.offsets import OffsetRange
from kafkalite.spark.options import parse_source_options
from kafkalite.testing.fake_clock import FakeClock

BOOT = {"kafka.bootstrap.servers": "b:9092"}
MOVING = KafkaError.NOT_LEADER_FOR_PARTITION


class DriverConsumer:
    """Topic `t` with one partition, watermarks (0, 10), and offset 3 for any timestamp. The
    first `moving` lookups of each kind answer NOT_LEADER_FOR_PARTITION (a leader moving)."""

    def __init__(self, moving: int = 0) -> None:
        self.failures = {"watermarks": moving, "times": moving}
        self.lookups = {"watermarks": 0, "times": 0}

    def _lookup(self, kind: str) -> None:
        self.lookups[kind] += 1
        if self.failures[kind] > 0:
            self.failures[kind] -= 1
            raise KafkaException(KafkaError(MOVING))

    def list_topics(self, topic=None, timeout=None):
        return SimpleNamespace(topics={"t": SimpleNamespace(error=None, partitions={0: None})})

    def get_watermark_offsets(self, tp, timeout, cached):
        self._lookup("watermarks")
        return (0, 10)

    def offsets_for_times(self, partitions, timeout):
        self._lookup("times")
        return [TopicPartition(tp.topic, tp.partition, 3) for tp in partitions]

    def close(self) -> None:
        pass


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(leader_lookups.time, "monotonic", c.monotonic)
    monkeypatch.setattr(leader_lookups.time, "sleep", c.sleep)
    return c


def driver(monkeypatch, consumer: DriverConsumer) -> DriverConsumer:
    monkeypatch.setattr(client, "open_consumer", lambda config: consumer)
    return consumer


def test_batch_planning_asks_a_moving_leader_again_per_fetch_offset_options(clock, monkeypatch):
    # Spark applies fetchOffset.numRetries (3 by default) and fetchOffset.retryIntervalMs to
    # every offset lookup, a batch query's too.
    consumer = driver(monkeypatch, DriverConsumer(moving=2))
    plan = source.plan_ranges(parse_source_options({**BOOT, "subscribe": "t"}, streaming=False))
    assert plan.ranges == (OffsetRange("t", 0, 0, 10),)
    assert consumer.lookups["watermarks"] == 3
    assert clock.slept == [1.0, 1.0]  # fetchOffset.retryIntervalMs's default, 1000 ms

    driver(monkeypatch, DriverConsumer(moving=1))
    with pytest.raises(KafkaException):
        source.plan_ranges(parse_source_options({**BOOT, "subscribe": "t", "fetchOffset.numRetries": "0"},
                                                streaming=False))


def test_batch_timestamp_lookups_ask_a_moving_leader_again(clock, monkeypatch):
    consumer = driver(monkeypatch, DriverConsumer())
    consumer.failures["times"] = 2
    opts = {**BOOT, "subscribe": "t", "startingTimestamp": "1000", "endingTimestamp": "2000",
            "fetchOffset.retryIntervalMs": "20"}
    assert source.plan_ranges(parse_source_options(opts, streaming=False)).ranges == ()  # [3, 3): nothing
    assert consumer.lookups["times"] == 4 and clock.slept == [0.02, 0.02]


def test_streaming_start_by_timestamp_asks_a_moving_leader_again(clock, monkeypatch):
    consumer = driver(monkeypatch, DriverConsumer())
    consumer.failures["times"] = 1
    reader = source.KafkaliteStreamReader(parse_source_options({**BOOT, "subscribe": "t", "startingTimestamp": "1000"},
                                                               streaming=True))
    assert reader.initialOffset() == {"t": {"0": 3}}
    assert consumer.lookups["times"] == 2


def test_the_first_trigger_after_a_restart_runs_below_min_offsets_per_trigger(monkeypatch):
    # Spark's lastTriggerMillis starts at 0: the first trigger is never held back for
    # minOffsetsPerTrigger; later ones wait for it, at most maxTriggerDelay.
    driver(monkeypatch, DriverConsumer())
    reader = source.KafkaliteStreamReader(parse_source_options({**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "5"},
                                                               streaming=True))
    assert reader.latestOffset({"t": {"0": 7}}, ReadAllAvailable()) == {"t": {"0": 10}}  # 3 records < 5
    assert reader.latestOffset({"t": {"0": 8}}, ReadAllAvailable()) == {"t": {"0": 8}}  # the next one waits
