"""Fetch from the closest replica (KIP-392) on real processes: three brokers in racks a, b,
c (a real ZooKeeper, real broker processes), confluent-kafka (librdkafka) consumers with
`client.rack`. Which broker served a consumer is read from each broker's /metrics
(`kafkalite_consumer_fetch_bytes_total{topic, served_as}`).

Every partition is assigned [1, 2, 3]: broker 1 (rack a) leads, broker 2 is the rack-b
follower, broker 3 the rack-c follower.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.probes import consumer_bytes_served as served
from kafkalite.testing.probes import wait_fully_replicated, wait_until

RACKS = ["a", "b", "c"]
LEADER, RACK_B_FOLLOWER, RACK_C_FOLLOWER = 1, 2, 3
RACK_AWARE = {"replica.selector.class": "RackAwareReplicaSelector"}
PINNED = {"replica.selector.class": "kafkalite.testing.replica_selectors.PinnedReplicaSelector"}
VALUE_BYTES = 100
CONSUME_TIMEOUT_S = 120
FLUSH_TIMEOUT_S = 60


def create_topic(boot: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    new = NewTopic(topic, num_partitions=1, replication_factor=-1, replica_assignment=[[LEADER, RACK_B_FOLLOWER, RACK_C_FOLLOWER]])
    for future in admin.create_topics([new]).values():
        future.result(timeout=30)


def value_of(i: int) -> bytes:
    return f"{i:012d}".encode().ljust(VALUE_BYTES, b"x")


def produce(boot: str, topic: str, first: int, count: int, *, chunk: int = 0, pause_s: float = 0.0,
            chunk_done: threading.Event | None = None) -> list[int]:
    """Records first..first+count-1 (value_of(i)), acks=all, idempotent; returns the offsets.
    With `chunk`, flushes every `chunk` records, sets `chunk_done` and pauses `pause_s`."""
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    offsets: list[int] = []
    errors: list[object] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i in range(first, first + count):
        producer.produce(topic, value=value_of(i), partition=0, on_delivery=on_delivery)
        producer.poll(0)
        if chunk and (i - first) % chunk == chunk - 1:
            producer.flush(FLUSH_TIMEOUT_S)
            if chunk_done is not None:
                chunk_done.set()
            time.sleep(pause_s)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    assert errors == []
    return sorted(offsets)


def rack_consumer(boot: str, topic: str, rack: str, **extra) -> Consumer:
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "unused", "enable.auto.commit": False,
                         "enable.partition.eof": False, "client.rack": rack, "fetch.error.backoff.ms": 100, **extra})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def consume(consumer: Consumer, count: int, seen: list[tuple[int, bytes]]) -> None:
    """Append what arrives to `seen` until it holds `count` records (bounded in time)."""
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    while len(seen) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=0.5):
            assert msg.error() is None, msg.error()
            seen.append((msg.offset(), msg.value()))
    assert len(seen) >= count, f"consumed {len(seen)} of {count} records in {CONSUME_TIMEOUT_S} s"


def assert_every_offset_once_in_order(seen: list[tuple[int, bytes]], count: int) -> None:
    assert [offset for offset, _ in seen] == list(range(count))
    assert all(value == value_of(offset) for offset, value in seen)


def test_rack_b_consumer_reads_from_the_rack_b_follower(cluster_factory):
    cluster = cluster_factory(3, overrides=RACK_AWARE, racks=RACKS)
    boot = cluster.status()["bootstrap"]
    topic = "closest"
    create_topic(boot, topic)
    count = 5000
    assert produce(boot, topic, 0, count) == list(range(count))
    wait_fully_replicated(cluster, topic, 1)

    consumer = rack_consumer(boot, topic, "b")
    seen: list[tuple[int, bytes]] = []
    try:
        consume(consumer, count, seen)
    finally:
        consumer.close()

    assert_every_offset_once_in_order(seen, count)
    leader, rack_b, rack_c = (served(cluster, b, topic) for b in (LEADER, RACK_B_FOLLOWER, RACK_C_FOLLOWER))
    assert rack_b["follower"] >= count * VALUE_BYTES  # every record came from the rack-b follower
    assert rack_b["same_rack"] == rack_b["follower"]  # ... which is in the consumer's rack
    assert leader["redirects"] >= 1  # ... because the leader named it
    assert leader["leader"] == 0
    assert rack_b["leader"] == 0
    assert rack_c["leader"] + rack_c["follower"] == 0


@pytest.mark.parametrize("fault", ["KILL", "STOP"])
def test_consumer_falls_back_to_the_leader_when_its_follower_dies_or_stalls(cluster_factory, fault):
    """The rack-b follower is killed (kill -9) or paused (SIGSTOP) while a rack-b consumer
    reads from it and a producer keeps writing: the consumer goes back to the leader and
    reads every offset exactly once, in order."""
    cluster = cluster_factory(3, overrides=RACK_AWARE, racks=RACKS)
    boot = cluster.status()["bootstrap"]
    topic = f"fallback-{fault.lower()}"
    create_topic(boot, topic)
    first, second = 3000, 3000
    assert produce(boot, topic, 0, first) == list(range(first))
    wait_fully_replicated(cluster, topic, 1)

    # socket.timeout.ms: a paused broker never answers; librdkafka gives up on its requests
    # after this long, drops the connection and goes back to the leader.
    consumer = rack_consumer(boot, topic, "b", **{"socket.timeout.ms": 6000})
    seen: list[tuple[int, bytes]] = []
    produced: list[int] = []
    writer_errors: list[BaseException] = []

    first_chunk = threading.Event()

    def write_more() -> None:
        try:
            produced.extend(produce(boot, topic, first, second, chunk=150, pause_s=0.1, chunk_done=first_chunk))
        except BaseException as e:  # noqa: BLE001 - reported by the test thread below
            writer_errors.append(e)

    writer = threading.Thread(target=write_more, name="writer", daemon=True)
    try:
        consume(consumer, first, seen)
        assert served(cluster, RACK_B_FOLLOWER, topic)["follower"] > 0
        leader_before = served(cluster, LEADER, topic)["leader"]
        writer.start()
        # The fault strikes while the writer still has most of its records to write, so
        # the consumer can only get those from the leader.
        wait_until(lambda: first_chunk.is_set() or not writer.is_alive(), 60, "the writer's first records")
        cluster.kill(RACK_B_FOLLOWER, fault)
        consume(consumer, first + second, seen)
        writer.join(FLUSH_TIMEOUT_S * 2)
    finally:
        consumer.close()
        if fault == "STOP":
            cluster.kill(RACK_B_FOLLOWER, "CONT")
    assert not writer.is_alive()
    assert writer_errors == []
    assert produced == list(range(first, first + second))
    assert_every_offset_once_in_order(seen, first + second)
    after = {b: served(cluster, b, topic) for b in (LEADER, RACK_C_FOLLOWER)}
    assert after[LEADER]["leader"] > leader_before, after  # the leader served the rest


def test_a_selector_given_by_class_path_decides(cluster_factory):
    """`replica.selector.class` names a Python class (kafkalite.testing.replica_selectors):
    it sends a client whose id ends with @3 to broker 3, whatever its rack, and everyone
    else (here a rack-b client, which the rack-aware selector would send to broker 2) to
    the leader."""
    cluster = cluster_factory(3, overrides=PINNED, racks=RACKS)
    boot = cluster.status()["bootstrap"]
    topic = "pinned"
    create_topic(boot, topic)
    count = 2000
    assert produce(boot, topic, 0, count) == list(range(count))
    wait_fully_replicated(cluster, topic, 1)

    for client_id in ("reader@3", "rack-b-reader"):
        consumer = rack_consumer(boot, topic, "b", **{"client.id": client_id})
        seen: list[tuple[int, bytes]] = []
        try:
            consume(consumer, count, seen)
        finally:
            consumer.close()
        assert_every_offset_once_in_order(seen, count)

    leader, rack_b, rack_c = (served(cluster, b, topic) for b in (LEADER, RACK_B_FOLLOWER, RACK_C_FOLLOWER))
    assert rack_c["follower"] >= count * VALUE_BYTES  # reader@3
    assert leader["leader"] >= count * VALUE_BYTES  # rack-b-reader
    assert rack_b["follower"] + rack_b["leader"] == 0
