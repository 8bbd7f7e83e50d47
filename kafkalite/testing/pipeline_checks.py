"""Checks of the pipeline's Spark job (kafkalite.pipeline.job) against real brokers, shared by
its test modules (local SparkSession and standalone cluster): produce seeded records and
remember where each landed, read a topic to its end, map a query's progress back to its
micro-batches of events, and compare the job's outputs with the plain-Python reference.

It lives in kafkalite.testing, not in a test module, so that several test modules share it
(tests/ is not a package)."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from decimal import Decimal

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kafkalite.cli.pipeline_run import ensure_topics, read_results
from kafkalite.pipeline import job
from kafkalite.pipeline.events import DETAIL_HEADER, REASON_HEADER, Generated, GeneratorConfig, Rejection, validate
from kafkalite.pipeline.reference import WindowKey, append_mode_output, window_key

PARTITIONS = 3
# 25 events/s of event time: 250 records span one 10 s window. Late events are 60 s old, so
# micro-batches after the second drop them (the watermark has passed their window).
CONFIG = GeneratorConfig(seed=11, start_ms=1_790_000_000_000, rate_per_s=25, bad_fraction=0.08,
                         late_fraction=0.05, late_by_ms=60_000)
QUERY_TIMEOUT_S = 240
CONSUME_TIMEOUT_S = 60


def produce(boot: str, topic: str, records: list[Generated], first_index: int) -> dict[tuple[int, int], Generated]:
    """Record i (counting from first_index) to partition i % PARTITIONS; returns where each
    landed, (partition, offset) -> record, from the delivery reports."""
    located: dict[tuple[int, int], Generated] = {}
    errors: list = []
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i, record in enumerate(records, start=first_index):
        def done(err, msg, record=record):
            if err is not None:
                errors.append(err)
            else:
                located[(msg.partition(), msg.offset())] = record
        producer.produce(topic, key=record.key, value=record.value, partition=i % PARTITIONS, on_delivery=done)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    assert len(located) == len(records)
    return located


def consume_all(boot: str, topic: str) -> list:
    """Every record in the topic now (up to each partition's high watermark)."""
    consumer = Consumer({"bootstrap.servers": boot, "group.id": f"check-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list = []
    pending = {p for p, end in ends.items() if end > 0}
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    while pending:
        assert time.monotonic() < deadline, f"{topic}: partitions {pending} not read to their end"
        for m in consumer.consume(500, 0.2):  # returns what it has after 0.2 s, not 500 or nothing
            if m.error() is None:
                out.append(m)
                if m.offset() + 1 >= ends[m.partition()]:
                    pending.discard(m.partition())
            else:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
    consumer.close()
    return out


def _partition_offsets(text, topic: str) -> dict[int, int]:
    """A source offset of the kafkalite stream (JSON per partition, as Spark's Kafka
    source: {"topic": {"0": 42, ...}}) -> partition -> offset; null (before batch 0) -> {}."""
    if text is None or text == "null":
        return {}
    parsed = json.loads(text) if isinstance(text, str) else text
    return {int(p): int(o) for p, o in parsed[topic].items()}


def micro_batches(progresses: list, topic: str, located: dict[tuple[int, int], Generated]) -> list[list]:
    """The accepted events of each micro-batch the query ran, in batch order, from its
    progress: batch k read [startOffset, endOffset) of each partition."""
    by_id = {}
    for p in progresses:
        assert p["batchId"] not in by_id, f"batch {p['batchId']} reported twice"
        by_id[p["batchId"]] = p
    assert sorted(by_id) == list(range(len(by_id))), sorted(by_id)
    batches, read = [], 0
    for batch_id in sorted(by_id):
        source = by_id[batch_id]["sources"][0]
        start = _partition_offsets(source["startOffset"], topic)
        end = _partition_offsets(source["endOffset"], topic)
        records = [r for (partition, offset), r in located.items() if start.get(partition, 0) <= offset < end.get(partition, 0)]
        assert len(records) == by_id[batch_id]["numInputRows"], batch_id
        read += len(records)
        batches.append([e for e in (validate(r.value) for r in records) if not isinstance(e, Rejection)])
    assert read == len(located), "the query read every produced record exactly once"
    return batches


def duplicated_keys(messages: list) -> dict[bytes, int]:
    """Keys of the output topic written more than once, with their counts; asserts every
    copy of a row is byte-identical (what makes deduplication by key correct)."""
    values: dict[bytes, set[bytes]] = {}
    for m in messages:
        values.setdefault(m.key(), set()).add(m.value())
    assert all(len(v) == 1 for v in values.values()), "two different rows for one window"
    keys = Counter(m.key() for m in messages)
    return {k: n for k, n in keys.items() if n > 1}


def window_rows_of_topic(messages: list, *, duplicates_allowed: bool = False) -> dict[WindowKey, tuple[int, Decimal]]:
    """The output topic's window rows (deduplicated by key if `duplicates_allowed`)."""
    if not duplicates_allowed:
        assert duplicated_keys(messages) == {}, "a window row was written twice"
    out = {}
    for m in messages:
        value = json.loads(m.value(), parse_float=Decimal)
        start_ms = _epoch_ms(value["window_start"])
        assert m.key().decode() == job.window_key(start_ms, value["type"], value["currency"])
        assert value == job.window_record(start_ms, value["type"], value["currency"], value["count"], value["amount_sum"])
        out[WindowKey(start_ms, value["type"], value["currency"])] = (value["count"], Decimal(value["amount_sum"]))
    return out


def _epoch_ms(iso: str) -> int:
    from kafkalite.pipeline.events import parse_event_time

    ms = parse_event_time(iso)
    assert ms is not None, iso
    return ms


def window_rows_of_parquet(directory) -> dict[WindowKey, tuple[int, Decimal]]:
    rows = read_results(str(directory))
    out = {}
    for r in rows:
        assert tuple(r) == (*job.WINDOW_COLUMNS, job.BATCH_PARTITION)
        key = WindowKey(int(r["window_start"].timestamp() * 1000), r["type"], r["currency"])
        assert key not in out, f"{key} in Parquet twice"
        assert (r["window_end"] - r["window_start"]).total_seconds() == 10
        out[key] = (r["count"], r["amount_sum"])
    return out


def assert_dead_letters_are_exactly_the_rejected(boot: str, topic: str, records: list[Generated]) -> None:
    want = Counter()
    for r in records:
        verdict = validate(r.value)
        if isinstance(verdict, Rejection):
            want[(r.key, r.value, verdict.reason.encode(), verdict.detail.encode())] += 1
    got = Counter()
    for m in consume_all(boot, topic):
        headers = dict(m.headers())
        assert [h for h, _ in m.headers()] == [REASON_HEADER, DETAIL_HEADER]
        got[(m.key(), m.value(), headers[REASON_HEADER], headers[DETAIL_HEADER])] += 1
    assert got == want
    assert {reason for _, _, reason, _ in want} >= {b"not_json", b"missing_field", b"wrong_type", b"bad_event_time"}


def run_available_now(spark, config: job.PipelineConfig) -> list:
    """Run the job until it has processed what the input holds; the aggregation's progress."""
    pipeline = job.start(spark, config)
    try:
        assert pipeline.await_termination(QUERY_TIMEOUT_S), "the pipeline did not finish"
    finally:
        pipeline.stop()
    for query in pipeline.queries:
        assert query.exception() is None, query.exception()
    return list(pipeline.aggregates.recentProgress)


def topics(boot: str, name: str) -> dict[str, str]:
    names = {"input_topic": f"{name}-in", "output_topic": f"{name}-windows", "dead_letter_topic": f"{name}-dead"}
    ensure_topics(boot, list(names.values()), PARTITIONS)
    return names


def expected_and_check(batches, got_topic, got_parquet, progresses):
    """The windows the job wrote equal the reference over the query's micro-batches."""
    result = append_mode_output(batches)
    want = {k: (a.count, a.amount_sum) for k, a in result.emitted.items()}
    assert got_topic == want
    assert got_parquet == want
    assert result.dropped_late, "the example must exercise late-row dropping"
    assert result.open_windows, "and leave windows open (append mode never emits them)"
    # Spark's numRowsDroppedByWatermark counts rows reaching the stateful operator, i.e.
    # partial aggregates (one per window key per input task), not events: between the
    # number of (batch, window key) dropped and that times the input partitions.
    dropped_keys = 0
    for k in range(len(batches)):  # a prefix's trailing empty batch drops nothing
        late = append_mode_output(batches[:k + 1]).dropped_late
        earlier = append_mode_output(batches[:k]).dropped_late
        dropped_keys += len({window_key(e) for e in late[len(earlier):]})
    dropped = sum(op["numRowsDroppedByWatermark"] for p in progresses for op in p["stateOperators"])
    assert dropped_keys <= dropped <= PARTITIONS * dropped_keys
    return result
