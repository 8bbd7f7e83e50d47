"""aiokafka against real brokers: AIOKafkaAdminClient creates the topic, an idempotent
acks=all producer writes 10,000 records, a group-less consumer reads them back by
assignment from the beginning and from given offsets, and ListOffsets answers."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from compat_workload import (
    PARTITIONS,
    READ_TIMEOUT_S,
    Acked,
    assert_same,
    make_records,
    normalize_headers,
    start_offsets,
    tail_count,
)

pytestmark = pytest.mark.slow
SEND_TIMEOUT_S = 60


async def create_topic(boot: str, topic: str, partitions: int, replication_factor: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=30_000)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(topic, partitions, replication_factor)])
        assert [error for _name, error, *_ in response.topic_errors] == [0]
    finally:
        await admin.close()


async def produce(boot: str, topic: str, records: list, **config) -> Acked:
    acked = Acked(records)
    producer = AIOKafkaProducer(bootstrap_servers=boot, acks="all", enable_idempotence=True, linger_ms=5, **config)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=key, value=value, headers=list(headers), timestamp_ms=ts)
                   for key, value, headers, ts in records]
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), SEND_TIMEOUT_S)
        for i, result in enumerate(results):
            if isinstance(result, BaseException):
                acked.failed(i, result)
            else:
                acked.ok(i, result.partition, result.offset)
    finally:
        await producer.stop()
    acked.check_complete()
    return acked


async def read(boot: str, topic: str, starts: dict[int, int], count: int) -> dict:
    consumer = AIOKafkaConsumer(bootstrap_servers=boot, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in starts])
        for p, offset in starts.items():
            consumer.seek(TopicPartition(topic, p), offset)
        got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
        n = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_TIMEOUT_S
        while n < count and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=2000)
            for tp, messages in batch.items():
                for m in messages:
                    got[tp.partition].append((m.offset, (m.key, m.value, normalize_headers(m.headers), m.timestamp)))
                    n += 1
        assert n == count, f"read {n} of {count} records in {READ_TIMEOUT_S:.0f} s"
        return got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("brokers", [1, 3])
async def test_aiokafka_admin_creates_topic_and_10k_idempotent_acks_all_records_read_back_exactly(cluster_factory, brokers):
    boot = cluster_factory(brokers).status()["bootstrap"]
    topic = f"compat-aiokafka-rf{brokers}"
    await create_topic(boot, topic, PARTITIONS, brokers)
    records = make_records()  # aiokafka needs a key or a value; null header values unused
    expected = (await produce(boot, topic, records, **({"compression_type": "gzip"} if brokers == 3 else {}))).expected()

    assert_same(await read(boot, topic, {p: 0 for p in range(PARTITIONS)}, len(records)), expected)
    starts = start_offsets(expected)
    assert_same(await read(boot, topic, starts, tail_count(expected, starts)), expected, starts)

    consumer = AIOKafkaConsumer(bootstrap_servers=boot, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert await consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert await consumer.end_offsets(tps) == {tp: len(expected[tp.partition]) for tp in tps}
        offset, (_key, _value, _headers, ts) = expected[2][len(expected[2]) // 2]
        found = (await consumer.offsets_for_times({TopicPartition(topic, 2): ts}))[TopicPartition(topic, 2)]
        assert (found.offset, found.timestamp) == (offset, ts)
    finally:
        await consumer.stop()
