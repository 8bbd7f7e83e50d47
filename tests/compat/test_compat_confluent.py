"""confluent-kafka (librdkafka) against real brokers: AdminClient creates the topic, an
idempotent acks=all producer writes 10,000 records, a consumer reads them back by
assignment from the beginning and from given offsets; plus every compression codec."""

from __future__ import annotations

import pytest
from compat_workload import (
    PARTITIONS,
    Acked,
    assert_reads_back,
    assert_same,
    drain,
    make_records,
    normalize_headers,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.slow
TOPIC_CREATE_TIMEOUT_S = 30
FLUSH_TIMEOUT_S = 60


def create_topic(boot: str, topic: str, partitions: int, replication_factor: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=config or {})])
    for future in futures.values():
        future.result(timeout=TOPIC_CREATE_TIMEOUT_S)


def produce(boot: str, topic: str, records: list, **config) -> Acked:
    acked = Acked(records)
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 5, **config})

    def report(index: int):
        def on_delivery(err, msg):
            if err is not None:
                acked.failed(index, err)
            else:
                acked.ok(index, msg.partition(), msg.offset())
        return on_delivery

    for i, (key, value, headers, ts) in enumerate(records):
        producer.produce(topic, key=key, value=value, headers=list(headers), timestamp=ts, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    acked.check_complete()
    return acked


def read(boot: str, topic: str, starts: dict[int, int], count: int) -> dict:
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "compat-unused", "enable.auto.commit": False,
                         "enable.partition.eof": False})
    try:
        consumer.assign([TopicPartition(topic, p, offset) for p, offset in starts.items()])

        def poll():
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                _ts_type, ts = msg.timestamp()
                yield msg.partition(), msg.offset(), (msg.key(), msg.value(), normalize_headers(msg.headers()), ts)

        return drain(poll, count)
    finally:
        consumer.close()


@pytest.mark.parametrize("brokers", [1, 3])
def test_confluent_admin_creates_topic_and_10k_acks_all_records_read_back_exactly(cluster_factory, brokers):
    boot = cluster_factory(brokers).status()["bootstrap"]
    topic = f"compat-confluent-rf{brokers}"
    create_topic(boot, topic, PARTITIONS, brokers)
    records = make_records(null_header_values=True)
    expected = produce(boot, topic, records).expected()

    assert_reads_back(read, boot, topic, expected)

    consumer = Consumer({"bootstrap.servers": boot, "group.id": "compat-unused"})
    try:
        for p, pairs in expected.items():  # ListOffsets earliest / latest (the HW)
            assert consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) == (0, len(pairs))
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_compressed_batches_round_trip_and_offsets_for_times(cluster_factory, codec):
    boot = cluster_factory(1).status()["bootstrap"]
    topic = f"compat-{codec}"
    create_topic(boot, topic, PARTITIONS, 1)
    records = make_records(3000, null_header_values=True)
    expected = produce(boot, topic, records, **{"compression.type": codec}).expected()
    assert_same(read(boot, topic, {p: 0 for p in range(PARTITIONS)}, len(records)), expected)

    consumer = Consumer({"bootstrap.servers": boot, "group.id": "compat-unused"})
    try:
        # ListOffsets by timestamp: the first offset whose timestamp is >= the one asked.
        offset, (_key, _value, _headers, ts) = expected[0][len(expected[0]) // 2]
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
        assert found.error is None
        assert found.offset == offset
        [past] = consumer.offsets_for_times([TopicPartition(topic, 0, ts + 10**9)], timeout=10)
        assert past.offset == -1  # no such record: the broker answers offset -1 (OFFSET_END)
    finally:
        consumer.close()
