"""Topics, records and reads shared by the Spark data-source tests: create a topic and wait
for it in metadata, produce numbered records with keys, headers and timestamps, read a topic
back with a plain consumer or through the `kafkalite` format."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.probes import wait_until

# Record i is produced at TS0_MS + i seconds.
TS0_MS = 1_700_000_000_000


def create_topic(boot: str, topic: str, partitions: int = 3, config: dict[str, str] | None = None,
                 replication_factor: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                                                config=config or {})]).values():
        future.result(timeout=30)
    wait_until(lambda: partition_count(boot, topic) == partitions, 30, f"{topic} in metadata")


def partition_count(boot: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": boot, "group.id": "probe"})
    try:
        return len(c.list_topics(topic, timeout=5).topics[topic].partitions)
    finally:
        c.close()


def headers_of(i: int) -> list | None:
    return [("h", b"%d" % i), ("empty", None)] if i % 2 == 0 else None


def produce(boot: str, topic: str, n: int, partitions: int = 3, ts0_ms: int = TS0_MS, value_bytes: int = 0,
            flush_each: bool = False, first: int = 0) -> list[dict]:
    """Records first..first+n-1 round-robin over the partitions, with keys, headers and
    timestamps ts0 + i s; returns what the broker acknowledged."""
    acked: list[dict] = []
    errors: list = []

    def done(err, msg):
        if err is not None:
            errors.append(err)
            return
        acked.append({"partition": msg.partition(), "offset": msg.offset(), "key": msg.key(), "value": msg.value(),
                      "headers": headers_of(int(msg.key().split(b"-")[1])), "timestamp": msg.timestamp()[1]})

    p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(first, first + n):
        value = (b"value-%d-" % i).ljust(value_bytes, b"x")
        p.produce(topic, key=b"key-%d" % i, value=value, partition=i % partitions, timestamp=ts0_ms + 1000 * i,
                  headers=headers_of(i), on_delivery=done)
        if flush_each:  # one batch per record, so that small segments roll
            p.flush(30)
    assert p.flush(60) == 0
    assert errors == []
    return acked


def read(spark, boot: str, **options):
    """A batch DataFrame of the `kafkalite` format."""
    return spark.read.format("kafkalite").option("kafka.bootstrap.servers", boot).options(**options).load()


def as_records(rows, headers: bool = True) -> list[dict]:
    """Spark rows of the source's schema as the dicts `produce` returns, by (partition, offset)."""
    out = []
    for r in rows:
        rec = {"partition": r["partition"], "offset": r["offset"], "key": bytes(r["key"]) if r["key"] is not None else None,
               "value": bytes(r["value"]), "timestamp": int(r["timestamp"].timestamp() * 1000)}
        if headers:
            rec["headers"] = [(h["key"], bytes(h["value"]) if h["value"] is not None else None)
                              for h in r["headers"]] if r["headers"] is not None else None
        out.append(rec)
    return sorted(out, key=lambda rec: (rec["partition"], rec["offset"]))


def sort_acked(acked: list[dict]) -> list[dict]:
    return sorted(acked, key=lambda rec: (rec["partition"], rec["offset"]))


def consume_all(boot: str, topic: str, partitions: int, expected: int, timeout_s: float = 60) -> list:
    """Every record of the topic's partitions from offset 0, until `expected` arrived or the
    time is up (the caller checks the count)."""
    c = Consumer({"bootstrap.servers": boot, "group.id": f"check-{uuid.uuid4().hex}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            if m.error() is None:
                out.append(m)
    c.close()
    return out
