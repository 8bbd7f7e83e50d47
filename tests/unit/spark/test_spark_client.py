"""An executor's read of one offset range (`kafkalite.spark.client.read_range`) against a
scripted consumer and a fake clock: where the range ends when its records do not fill it,
and what an offset-out-of-range means for it."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")  # the spark extra

from confluent_kafka import KafkaError

from kafkalite.spark import client
from kafkalite.spark.errors import KafkaliteDataLossError
from kafkalite.spark.offsets import OffsetRange
from kafkalite.testing.fake_clock import FakeClock


class Msg:
    """A record (or, with `error`, librdkafka's error event at `offset`) as consume() returns it."""

    def __init__(self, offset: int, error: int | None = None) -> None:
        self._offset = offset
        self._error = KafkaError(error) if error is not None else None

    def error(self):
        return self._error

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k%d" % self._offset

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)

    def headers(self):
        return None


class ScriptedConsumer:
    """consume() answers the next scripted batch; once they are used up it answers nothing
    after its whole timeout (on the fake clock). Watermark lookups answer `watermarks`."""

    def __init__(self, clock: FakeClock, batches: list[list[Msg]], watermarks: tuple[int, int] = (0, 0)) -> None:
        self.clock, self.batches, self.watermarks = clock, list(batches), watermarks
        self.assigned: list[tuple[str, int, int]] = []
        self.closed = False

    def assign(self, partitions) -> None:
        self.assigned.extend((tp.topic, tp.partition, tp.offset) for tp in partitions)

    def consume(self, num_messages: int, timeout: float) -> list[Msg]:
        if self.batches:
            return self.batches.pop(0)
        self.clock.now += timeout
        return []

    def get_watermark_offsets(self, tp, timeout, cached):
        return self.watermarks

    def list_topics(self, topic=None, timeout=None):
        return None

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(client.time, "monotonic", c.monotonic)
    return c


def read(consumer: ScriptedConsumer, monkeypatch, r: OffsetRange, *, fail_on_data_loss: bool = True) -> list[int]:
    monkeypatch.setattr(client, "open_consumer", lambda config: consumer)
    batches = client.read_range(r, {}, include_headers=False, fail_on_data_loss=fail_on_data_loss,
                                poll_timeout_ms=10_000)
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert consumer.closed
    return offsets


def test_a_range_whose_tail_was_compacted_away_ends_at_the_partition_eof(clock, monkeypatch):
    # Planned [0, 10) up to the HW; records 8 and 9 were compacted away since: librdkafka
    # skips them and reports the partition's end at offset 10, and nothing else comes.
    consumer = ScriptedConsumer(clock, [[Msg(o) for o in range(8)], [Msg(10, KafkaError._PARTITION_EOF)]])
    assert read(consumer, monkeypatch, OffsetRange("t", 0, 0, 10)) == list(range(8))
    assert clock.now == 0, "the read ended at the EOF, without waiting"


def test_a_partition_eof_below_the_range_end_waits_for_more(clock, monkeypatch):
    # An EOF before `until` (offsets 2 and 3 compacted away, 4 and 5 not yet fetched) moves
    # the read on to the EOF's offset and no further: the records after it are still read.
    consumer = ScriptedConsumer(clock, [[Msg(0), Msg(1)], [Msg(4, KafkaError._PARTITION_EOF)],
                                        [Msg(4), Msg(5)], [Msg(6, KafkaError._PARTITION_EOF)]])
    assert read(consumer, monkeypatch, OffsetRange("t", 0, 0, 6)) == [0, 1, 4, 5]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_transient_out_of_range_for_an_offset_the_log_holds_reads_it_again(clock, monkeypatch, fail_on_data_loss):
    consumer = ScriptedConsumer(clock, [[Msg(o) for o in range(5)], [Msg(5, KafkaError.OFFSET_OUT_OF_RANGE)],
                                        [Msg(o) for o in range(5, 10)]], watermarks=(0, 10))
    assert read(consumer, monkeypatch, OffsetRange("t", 0, 0, 10), fail_on_data_loss=fail_on_data_loss) == \
        list(range(10))
    assert consumer.assigned == [("t", 0, 0), ("t", 0, 5)]


def test_an_out_of_range_after_the_log_was_truncated_below_the_position_is_data_loss(clock, monkeypatch):
    def truncated():
        return ScriptedConsumer(clock, [[Msg(o) for o in range(5)], [Msg(5, KafkaError.OFFSET_OUT_OF_RANGE)]],
                                watermarks=(0, 5))
    with pytest.raises(KafkaliteDataLossError, match="offsets from 5 of t-0 are gone"):
        read(truncated(), monkeypatch, OffsetRange("t", 0, 0, 10))
    assert read(truncated(), monkeypatch, OffsetRange("t", 0, 0, 10), fail_on_data_loss=False) == list(range(5))
