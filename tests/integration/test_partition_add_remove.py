"""Partition add and remove on real processes (issue 9, seed 000 PartitionAdd/Remove).

Add: Kafka's CreatePartitions (through `kafkalite topics alter`), placement continuing the
topic's round robin. Remove: only the highest-numbered partitions, refused without
--force, through /admin/partitions_remove; every replica's data goes, metadata drops the
partitions, writes to them get UNKNOWN_TOPIC_OR_PARTITION, and librdkafka, kafka-python
and aiokafka producers that were writing to all partitions carry on with the rest.

librdkafka never lowers a known topic's partition count unless the topic id changes
(rdkafka_topic.c, rd_kafka_topic_metadata_update: "different_topic_id ||
partition_cnt > rkt_partition_cnt"), and Metadata below v10 carries no topic id: a
long-lived librdkafka producer keeps partitioning keys over the old count. Its records for
the remaining partitions are acknowledged; those for removed ones fail with an error
after message.timeout.ms (never a false acknowledgement); a new producer uses only the
remaining partitions. kafka-python and aiokafka follow the new count.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from kafkalite.cli.main import main as cli
from kafkalite.testing.probes import wait_until
from kafkalite.testing.verify import partition_dirs

TOPIC = "pr"
SENDS = 40


def _partitions(boot: str) -> list[int]:
    md = AdminClient({"bootstrap.servers": boot}).list_topics(TOPIC, timeout=10)
    return sorted(md.topics[TOPIC].partitions)


def _alter(boot: str, zk: str, count: int, *extra: str) -> int:
    return cli(["topics", "alter", TOPIC, "--partitions", str(count), "--bootstrap", boot, "--zookeeper", zk, *extra])


def _keys() -> list[bytes]:
    return [f"k{i}".encode() for i in range(SENDS)]


class Clients:
    """One producer of each library, kept open across the change, as an application would."""

    def __init__(self, boot: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.rdkafka = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5,
                                 "topic.metadata.refresh.interval.ms": 1000, "message.timeout.ms": 10000})
        self.kafka_python = KafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=5, metadata_max_age_ms=1000,
                                          request_timeout_ms=10000, delivery_timeout_ms=20000)

        async def start() -> AIOKafkaProducer:  # aiokafka builds its objects inside a running loop
            producer = AIOKafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=5, metadata_max_age_ms=1000,
                                        request_timeout_ms=10000)
            await producer.start()
            return producer

        self.aiokafka = self.loop.run_until_complete(start())

    def send_all(self, tag: str, rdkafka: bool = True) -> dict[str, list[tuple[int | None, str | None]]]:
        """SENDS keyed records from each client: (partition, error) per record."""
        out: dict[str, list[tuple[int | None, str | None]]] = {"kafka-python": [], "aiokafka": []}
        if rdkafka:
            out["librdkafka"] = _rdkafka_send(self.rdkafka, tag)
        futures = [self.kafka_python.send(TOPIC, key=k, value=tag.encode()) for k in _keys()]
        for f in futures:
            try:
                out["kafka-python"].append((f.get(timeout=60).partition, None))
            except Exception as e:  # noqa: BLE001 - the test reports what each record got
                out["kafka-python"].append((None, repr(e)))

        async def aio() -> None:
            for k in _keys():
                try:
                    md = await (await self.aiokafka.send(TOPIC, key=k, value=tag.encode()))
                    out["aiokafka"].append((md.partition, None))
                except Exception as e:  # noqa: BLE001
                    out["aiokafka"].append((None, repr(e)))

        self.loop.run_until_complete(asyncio.wait_for(aio(), 120))
        return out

    def close(self) -> None:
        self.rdkafka.flush(10)
        self.kafka_python.close(timeout=10)
        self.loop.run_until_complete(self.aiokafka.stop())
        self.loop.close()


def _rdkafka_send(producer: Producer, tag: str) -> list[tuple[int | None, str | None]]:
    out: list[tuple[int | None, str | None]] = []

    def delivered(err, msg) -> None:
        out.append((msg.partition(), None if err is None else str(err)))

    for k in _keys():
        producer.produce(TOPIC, key=k, value=tag.encode(), on_delivery=delivered)
    assert producer.flush(60) == 0
    return out


def _until_all_write(clients: Clients, tag: str, timeout_s: float, partitions: set[int], rdkafka: bool = True) -> dict:
    """Rounds of sends until one where every record of every client is acknowledged and
    each client's keys spread over exactly `partitions` (its metadata caught up); the
    last round's errors on failure."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = clients.send_all(tag, rdkafka)
        failed = {c: [e for _, e in r if e is not None] for c, r in got.items()}
        if not any(failed.values()) and all({p for p, _ in r} == partitions for r in got.values()):
            return got
        assert time.monotonic() < deadline, f"{tag}: clients still failing after {timeout_s} s: " + str(
            {c: (len(e), e[:2]) for c, e in failed.items()})


def _produce_raw(port: int, partition: int) -> int:
    """One acks=all Produce v7 to `partition`: its error code."""
    import socket
    import struct

    from kafkalite.log.records import encode_batch
    from kafkalite.protocol.codec import decode_response, encode_request
    from kafkalite.protocol.schema import ApiKey

    batch = encode_batch([(b"k", b"v", [])], base_timestamp=0)
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(encode_request(ApiKey.PRODUCE, 7, 1, "raw", body))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            assert chunk
            buf += chunk
    resp = decode_response(ApiKey.PRODUCE, 7, buf[4:])[1]
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def test_partitions_are_added_then_removed_and_every_client_carries_on(cluster):
    status = cluster.status()
    boot, zk = status["bootstrap"], status["zookeeper"]["connect"]
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=3,
                                           config={"min.insync.replicas": "2"})]).values():
        f.result(timeout=30)
    clients = Clients(boot)
    try:
        before = clients.send_all("before")
        assert all(err is None for got in before.values() for _, err in got), before

        # Add: 2 -> 4, placement continues the round robin (RF kept, spread over the brokers).
        assert _alter(boot, zk, 4) == 0
        wait_until(lambda: _partitions(boot) == [0, 1, 2, 3], 30, "4 partitions in metadata")
        md = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        assert all(len(md[p].replicas) == 3 and md[p].leader >= 0 for p in (2, 3))
        _until_all_write(clients, "grown", 60, {0, 1, 2, 3})

        # Remove: refused without --force, then 4 -> 2 with it.
        assert _alter(boot, zk, 2) == 1
        assert _partitions(boot) == [0, 1, 2, 3]
        assert _alter(boot, zk, 2, "--force") == 0
        wait_until(lambda: _partitions(boot) == [0, 1], 30, "2 partitions in metadata")
        wait_until(lambda: all(partition_dirs(cluster.status(), TOPIC, p, [1, 2, 3]) == [] for p in (2, 3)), 30,
                   "the removed partitions' directories to go on every broker")
        assert all(partition_dirs(cluster.status(), TOPIC, p, [1, 2, 3]) for p in (0, 1))
        for b in cluster.status()["brokers"]:
            assert _produce_raw(b["port"], 3) == 3  # UNKNOWN_TOPIC_OR_PARTITION

        # Producers that were writing to all four partitions carry on with the two left (once
        # their metadata, refreshed every second, has the new count).
        time.sleep(3)
        _until_all_write(clients, "after", 60, {0, 1}, rdkafka=False)
        kept = _rdkafka_send(clients.rdkafka, "after")  # see the module docstring
        assert {p for p, err in kept if err is None} == {0, 1}
        assert all(err is not None for p, err in kept if p in (2, 3)), kept
        fresh = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5})
        assert {p for p, err in _rdkafka_send(fresh, "fresh") if err is None} == {0, 1}
        assert all(err is None for _, err in _rdkafka_send(fresh, "fresh"))
    finally:
        clients.close()
