"""kafka-python 3.x against real brokers: KafkaAdminClient creates the topic, the default
(idempotent, so InitProducerId is required) producer writes 10,000 records with acks=all,
a group-less consumer reads them back by assignment from the beginning and from given
offsets, and ListOffsets answers earliest / latest / by timestamp."""

from __future__ import annotations

import warnings

import pytest

with warnings.catch_warnings():  # kafka-python's schema loader uses importlib APIs deprecated in 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

from compat_workload import (
    PARTITIONS,
    Acked,
    assert_reads_back,
    drain,
    make_records,
    normalize_headers,
)

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
FLUSH_TIMEOUT_S = 60


def create_topic(boot: str, topic: str, partitions: int, replication_factor: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, partitions, replication_factor)])
    finally:
        admin.close()


def produce(boot: str, topic: str, records: list, **config) -> Acked:
    acked = Acked(records)
    producer = KafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=5, **config)
    try:
        # 3.x defaults to the idempotent producer; the broker must hand out a producer id.
        assert producer.config["enable_idempotence"] is True
        futures = [producer.send(topic, key=key, value=value, headers=list(headers), timestamp_ms=ts)
                   for key, value, headers, ts in records]
        producer.flush(FLUSH_TIMEOUT_S)
        for i, future in enumerate(futures):
            if future.failed():
                acked.failed(i, future.exception)
            else:
                meta = future.get(timeout=0)
                acked.ok(i, meta.partition, meta.offset)
        assert producer._transaction_manager.producer_id_and_epoch.producer_id >= 0
    finally:
        producer.close(timeout=10)
    acked.check_complete()
    return acked


def read(boot: str, topic: str, starts: dict[int, int], count: int) -> dict:
    consumer = KafkaConsumer(bootstrap_servers=boot, group_id=None, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, p) for p in starts])
        for p, offset in starts.items():
            if offset == 0:
                consumer.seek_to_beginning(TopicPartition(topic, p))
            else:
                consumer.seek(TopicPartition(topic, p), offset)

        def poll():
            for tp, messages in consumer.poll(timeout_ms=500, max_records=2000).items():
                for m in messages:
                    yield tp.partition, m.offset, (m.key, m.value, normalize_headers(m.headers), m.timestamp)

        return drain(poll, count)
    finally:
        consumer.close()


@pytest.mark.parametrize("brokers", [1, 3])
def test_kafka_python_admin_creates_topic_and_10k_idempotent_acks_all_records_read_back_exactly(cluster_factory, brokers):
    boot = cluster_factory(brokers).status()["bootstrap"]
    topic = f"compat-kafka-python-rf{brokers}"
    create_topic(boot, topic, PARTITIONS, brokers)
    records = make_records()  # kafka-python refuses null header values client-side
    expected = produce(boot, topic, records, **({"compression_type": "gzip"} if brokers == 3 else {})).expected()

    assert_reads_back(read, boot, topic, expected)

    consumer = KafkaConsumer(bootstrap_servers=boot, group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert consumer.end_offsets(tps) == {tp: len(expected[tp.partition]) for tp in tps}
        offset, (_key, _value, _headers, ts) = expected[1][len(expected[1]) // 2]
        found = consumer.offsets_for_times({TopicPartition(topic, 1): ts})[TopicPartition(topic, 1)]
        assert found.offset == offset
        assert found.timestamp == ts
    finally:
        consumer.close()
