"""Issue 13, topic creation at scale and 100k partitions: a topic of thousands of partitions
on real brokers whose open segment files are bounded below the partition count. Bounded in
time (every wait has a deadline) without asserting on speed: the machines are shared."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

from kafkalite.cli.admin_client import AdminClient

PARTITIONS = 3000
OPEN_FILES_MAX = 500  # segment files per broker: far fewer than the 3,000 replicas each hosts
CREATE_TIMEOUT_S = 300
DELIVERY_TIMEOUT_S = 120


def test_topic_of_3000_partitions_rf3_is_created_led_and_writable_with_fewer_open_files_than_partitions(cluster_factory):
    cluster = cluster_factory(3, overrides={"log.open.files.max": OPEN_FILES_MAX})
    boot = cluster.status()["bootstrap"]
    created = subprocess.run(
        [sys.executable, "-m", "kafkalite.cli.main", "topics", "create", "big", "--partitions", str(PARTITIONS),
         "--replication-factor", "3", "--bootstrap", boot],
        capture_output=True, text=True, timeout=CREATE_TIMEOUT_S)
    assert created.returncode == 0, created.stderr
    with AdminClient(boot) as admin:
        parts = admin.metadata(["big"]).topics["big"].partitions
    assert len(parts) == PARTITIONS
    assert all(p.leader >= 0 for p in parts), "the CLI returns once every partition has a leader"
    assert all(len(p.replicas) == 3 for p in parts)

    from confluent_kafka import Consumer, Producer, TopicPartition

    delivered: dict[int, int] = {}
    errors: list = []
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 20,
                         "message.timeout.ms": DELIVERY_TIMEOUT_S * 1000})
    for p in range(PARTITIONS):
        producer.produce("big", value=f"v{p}".encode(), partition=p,
                         on_delivery=lambda err, msg: errors.append(err) if err else delivered.__setitem__(msg.partition(), msg.offset()))
        producer.poll(0)
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0
    assert errors == []
    assert delivered == {p: 0 for p in range(PARTITIONS)}

    for b in cluster.status()["brokers"]:
        fds = len(os.listdir(f"/proc/{b['pid']}/fd"))
        assert fds < PARTITIONS, f"broker {b['id']} holds {fds} descriptors for {PARTITIONS} partition replicas"

    sample = random.Random(13).sample(range(PARTITIONS), 40)
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "big-check", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("big", p, 0) for p in sample])
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + DELIVERY_TIMEOUT_S
        while len(seen) < len(sample) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen[msg.partition()] = msg.value()
        assert seen == {p: f"v{p}".encode() for p in sample}
    finally:
        consumer.close()
