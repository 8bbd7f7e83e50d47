"""Log compaction on a real broker (a real ZooKeeper, a broker process whose cleaner runs in
its worker processes), written and read with confluent-kafka (librdkafka).

- a compacted topic with small segments and many updates of 1,000 keys ends with exactly
  the latest value of each key, at the offset the producer was told; tombstones delete
  their keys and are gone after delete.retention.ms; Produce refuses a record without a key;
  kafka-python and aiokafka read the compacted log too;
- a follower copying a compacted leader's log from scratch (offsets missing before, inside
  and between batches) catches up, rejoins the ISR and, once leader, serves the same
  latest values to consumers and keeps the idempotent producer's state;
- kill -9 of the broker while it cleans (again and again, under an idempotent producer that
  keeps writing across the restarts) leaves a log that opens, reads and ends compacted to
  the latest value per key.

The record count is COMPACTION_RECORDS (default 1,000,000; bench/cleaner.py measures the
cleaner alone at that size).
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kafkalite.testing.probes import metrics_text, partition_view, wait_fully_replicated, wait_until

KEYS = 1000
RECORDS = int(os.environ.get("COMPACTION_RECORDS", "1000000"))
FLUSH_TIMEOUT_S = 120
TOPIC_CONFIG = {
    "cleanup.policy": "compact", "segment.bytes": str(1 << 20), "segment.ms": "2000",
    "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3000",
}
BROKER = {"log.cleaner.backoff.ms": 200, "log.retention.check.interval.ms": 500, "replica.high.watermark.checkpoint.interval.ms": 500}


def create_topic(boot: str, topic: str, config: dict[str, str], replicas: list[int] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config=config) if replicas is None else \
        NewTopic(topic, num_partitions=1, replication_factor=-1, replica_assignment=[replicas], config=config)
    for future in admin.create_topics([new]).values():
        future.result(timeout=30)


def key_of(i: int) -> bytes:
    return b"key-%04d" % (i % KEYS)


class KeyedWriter:
    """An idempotent acks=all producer remembering, per key, the last value and the offset
    the broker gave it."""

    def __init__(self, boot: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 20,
                                  "batch.size": 1 << 20, "message.timeout.ms": 120_000, "queue.buffering.max.messages": 1_000_000})
        self.latest: dict[bytes, tuple[int, bytes | None]] = {}
        self.errors: list[object] = []

    def _done(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
            return
        known = self.latest.get(msg.key())
        if known is None or known[0] < msg.offset():
            self.latest[msg.key()] = (msg.offset(), msg.value())

    def write(self, first: int, count: int, *, tombstone: bool = False) -> None:
        for i in range(first, first + count):
            value = None if tombstone else b"value-%d-of-%s" % (i, key_of(i))
            while True:
                try:
                    self.producer.produce(self.topic, key=key_of(i), value=value, partition=0, on_delivery=self._done)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        assert self.producer.flush(FLUSH_TIMEOUT_S) == 0
        assert self.errors == [], self.errors[:3]

    def expected(self) -> dict[bytes, tuple[int, bytes]]:
        """Key -> (offset, value) a compacted log ends with (tombstoned keys gone)."""
        return {k: v for k, v in self.latest.items() if v[1] is not None}


def read_partition(boot: str, topic: str, timeout_s: float = 60) -> list[tuple[int, bytes, bytes | None]]:
    """Every record from the beginning to the high watermark, as librdkafka delivers them."""
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "unused", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.max.bytes": 8 << 20})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(10_000, timeout=0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    raise AssertionError(f"consumer error: {m.error()}")
                out.append((m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    raise AssertionError(f"did not reach the end of {topic} in {timeout_s} s ({len(out)} records read)")


def read_with_kafka_python(boot: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return [(m.offset, m.key, m.value) for m in consumer]
    finally:
        consumer.close()


async def read_with_aiokafka(boot: str, topic: str, end_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = AioTopicPartition(topic, 0)
        consumer.assign([tp])
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 60
        while await consumer.position(tp) < end_offset and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                out += [(m.offset, m.key, m.value) for m in messages]
        return out
    finally:
        await consumer.stop()


def compacted_view(records: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets strictly increase, whatever the gaps"
    return {k: (o, v) for o, k, v in records}


def is_compacted(boot: str, topic: str, expected: dict[bytes, tuple[int, bytes]]) -> bool:
    records = read_partition(boot, topic)
    return len(records) == len(expected) and compacted_view(records) == expected


def cleaner_metric(admin_port: int, name: str, labels: dict[str, str] | None = None) -> float:
    for family in text_string_to_metric_families(metrics_text(admin_port)):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                return sample.value
    return 0.0


def test_a_compacted_topic_keeps_the_latest_value_per_key_and_tombstones_expire(cluster_factory):
    cluster = cluster_factory(1, overrides=BROKER)
    boot = cluster.status()["bootstrap"]
    admin_port = cluster.broker(1)["admin_port"]
    create_topic(boot, "compacted", TOPIC_CONFIG)
    writer = KeyedWriter(boot, "compacted")
    started = time.monotonic()
    writer.write(0, RECORDS)
    produced_s = time.monotonic() - started

    # A record without a key is refused (INVALID_RECORD), as Kafka's broker does.
    refused: list[object] = []
    keyless = Producer({"bootstrap.servers": boot, "acks": "all", "retries": 0})
    keyless.produce("compacted", value=b"no key", partition=0, on_delivery=lambda err, msg: refused.append(err))
    keyless.flush(30)
    assert len(refused) == 1 and refused[0] is not None and refused[0].code() == KafkaError.INVALID_RECORD

    # The last segment rolls after segment.ms; the cleaner then compacts everything.
    wait_until(lambda: is_compacted(boot, "compacted", writer.expected()), 300, "the topic compacted to one record per key",
               interval_s=1)
    assert cleaner_metric(admin_port, "kafkalite_log_cleaner_passes_total", {"outcome": "swapped"}) >= 1
    removed = cleaner_metric(admin_port, "kafkalite_log_cleaner_records_removed_total", {"reason": "superseded"})
    assert removed >= RECORDS - KEYS
    # kafka-python and aiokafka step over the gaps (and the empty batches) too.
    assert compacted_view(read_with_kafka_python(boot, "compacted")) == writer.expected()
    end_offset = max(o for o, _ in writer.latest.values()) + 1
    assert compacted_view(asyncio.run(read_with_aiokafka(boot, "compacted", end_offset))) == writer.expected()
    print(f"\n{RECORDS} records over {KEYS} keys produced in {produced_s:.1f} s; compacted to {KEYS} "
          f"{time.monotonic() - started:.1f} s after the first write")

    # Tombstones for a tenth of the keys: they delete those keys, and go after delete.retention.ms.
    writer.write(0, KEYS // 10, tombstone=True)
    expected = writer.expected()
    assert len(expected) == KEYS - KEYS // 10
    wait_until(lambda: is_compacted(boot, "compacted", expected), 120, "tombstones removed after delete.retention.ms",
               interval_s=1)
    assert cleaner_metric(admin_port, "kafkalite_log_cleaner_records_removed_total", {"reason": "tombstone_expired"}) == KEYS // 10


def cleaner_workers(broker_pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"kafkalite.log.cleaner_worker {broker_pid}"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_kill_9_during_cleaning_leaves_a_correct_log_after_restart(cluster_factory):
    records = max(RECORDS // 5, 20_000)
    # A slow cleaner (2 MB/s) so that the kills land while it works.
    cluster = cluster_factory(1, overrides={**BROKER, "log.cleaner.io.max.bytes.per.second": 2_000_000})
    boot = cluster.status()["bootstrap"]
    admin_port = cluster.broker(1)["admin_port"]
    create_topic(boot, "crashy", {**TOPIC_CONFIG, "segment.bytes": str(256 << 10)})
    writer = KeyedWriter(boot, "crashy")  # one idempotent producer across every restart
    writer.write(0, records)
    data = os.path.join(cluster.broker(1)["log_dirs"][0], "crashy-0")
    rng = random.Random(10)
    kills = interrupted = 0
    for round_ in range(4):
        if round_ == 0 or not interrupted:
            # In the middle of writing a cleaned segment (a group that turns out unchanged
            # loses its .cleaned files at once: then this round catches nothing, the next tries).
            wait_until(lambda: any(n.endswith(".cleaned") for n in os.listdir(data)), 120, "a .cleaned file", interval_s=0.01)
        else:
            # Let a pass finish after the restart, then add dirt, so this kill may land in a
            # short pass, near or in its swap.
            wait_until(lambda: cleaner_metric(admin_port, "kafkalite_log_cleaner_passes_total", {"outcome": "swapped"}) >= 1,
                       120, "a pass swapped in")
            writer.write(records + round_ * 5_000, 5_000)  # the producer's state survived the restart
            wait_until(lambda: cleaner_metric(admin_port, "kafkalite_log_cleaner_busy") >= 1, 120, "the cleaner at work",
                       interval_s=0.02)
            time.sleep(rng.uniform(0, 0.3))
        pid = cluster.broker(1)["pid"]
        cluster.kill(1)
        kills += 1
        # The worker dies with its broker: nothing writes the log directory any more.
        wait_until(lambda: cleaner_workers(pid) == [], 10, "the cleaner worker gone with its broker")
        leftovers = [n for n in os.listdir(data) if n.endswith((".cleaned", ".swap", ".deleted"))]
        with open(cluster.broker(1)["log"]) as f:
            recoveries = f.read().count("finished a log cleaner swap a crash interrupted")
        cluster.start(1)  # the log opens (an interrupted swap completed or undone)
        assert read_partition(boot, "crashy")  # and reads
        if leftovers:
            interrupted += 1
            with open(cluster.broker(1)["log"]) as f:
                assert f.read().count("finished a log cleaner swap a crash interrupted") == recoveries + 1
    assert interrupted >= 1, "at least one kill left a cleaning's files behind"
    assert kills == 4
    wait_until(lambda: is_compacted(boot, "crashy", writer.expected()), 300, "the topic compacted after the restarts", interval_s=1)
    cluster.stop_broker(1)
    assert not [n for n in os.listdir(data) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_a_follower_copies_a_compacted_log_and_leads_it(cluster_factory):
    records = max(RECORDS // 10, 20_000)
    cluster = cluster_factory(2, overrides=BROKER)
    boot = cluster.status()["bootstrap"]
    create_topic(boot, "shared", {**TOPIC_CONFIG, "segment.bytes": str(256 << 10)}, replicas=[1, 2])
    wait_fully_replicated(cluster, "shared", 1)
    writer = KeyedWriter(boot, "shared")
    writer.write(0, records)
    wait_until(lambda: is_compacted(boot, "shared", writer.expected()), 300, "the leader's log compacted", interval_s=1)

    # Broker 2 loses its copy and fetches the compacted log from broker 1 from offset 0.
    cluster.stop_broker(2)
    data = os.path.join(cluster.broker(2)["log_dirs"][0], "shared-0")
    for name in os.listdir(data):
        os.remove(os.path.join(data, name))
    os.rmdir(data)
    cluster.start(2)
    wait_fully_replicated(cluster, "shared", 1, timeout_s=120)
    writer.write(records, 2_000)

    # Broker 2 leads: consumers read the latest value of every key from its copy, and the
    # idempotent producer goes on (its state rebuilt from the compacted log's headers).
    cluster.kill(1)
    wait_until(lambda: (partition_view(cluster, "shared", 0) or {}).get("leader") == 2, 60, "broker 2 leading")
    writer.write(records + 2_000, 2_000)
    wait_until(lambda: is_compacted(boot, "shared", writer.expected()), 300, "the new leader's copy compacted", interval_s=1)
