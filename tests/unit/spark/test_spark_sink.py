"""The Spark sink without a Spark session (`kafkalite.spark.sink`): the driver's schema
checks and a task's writes, against a fake producer."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from kafkalite.spark import client, sink
from kafkalite.spark.errors import KafkaliteSparkOptionError
from kafkalite.spark.options import parse_sink_options

BOOT = {"kafka.bootstrap.servers": "b:9092"}


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def produce(self, topic, value=None, key=None, on_delivery=None, **kwargs) -> None:
        self.sent.append((topic, key, value, kwargs))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def schema(**columns) -> StructType:
    return StructType([StructField(name, t) for name, t in columns.items()])


@pytest.mark.parametrize("columns, topic, column", [
    ({"Value": BinaryType()}, "out", "value"),
    ({"value": BinaryType(), "Key": StringType()}, "out", "key"),
    ({"value": BinaryType(), "PARTITION": IntegerType()}, "out", "partition"),
    ({"value": BinaryType(), "Topic": StringType()}, None, "topic"),
])
def test_a_column_named_as_a_sink_column_but_for_case_is_refused_on_the_driver(columns, topic, column):
    # Spark's sink finds its columns by exact name: a task looking up 'value' in a row of
    # 'Value' failed with KeyError after the driver's check had passed.
    options = parse_sink_options({**BOOT, **({"topic": topic} if topic else {})})
    with pytest.raises(KafkaliteSparkOptionError, match="case-sensitive") as info:
        sink.check_schema(schema(**columns), options)
    assert info.value.option == column


def test_exactly_named_columns_are_written_and_others_ignored(monkeypatch):
    producer = FakeProducer()
    monkeypatch.setattr(client, "open_producer", lambda config: producer)
    options = parse_sink_options(BOOT)
    # 'Topic' is ignored beside 'topic' (Spark keeps the exact match); 'Extra' is not a sink column
    columns = schema(topic=StringType(), Topic=StringType(), key=StringType(), value=BinaryType(),
                     Extra=StringType())
    sink.check_schema(columns, options)
    written = sink.write_rows(options, iter([Row(topic="out", Topic="no", key="k", value=b"v", Extra="x")]))
    assert written.rows == 1
    assert producer.sent == [("out", b"k", b"v", {})]
    # the topic option makes a 'Topic' column irrelevant, as in Spark
    sink.check_schema(schema(value=BinaryType(), Topic=StringType()), parse_sink_options({**BOOT, "topic": "out"}))
