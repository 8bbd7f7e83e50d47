"""Topics created before topic ids (KIP-516) get one from the controller, as Kafka's
controller gives them on upgrade, and the brokers record it in the logs they hold, keeping
their records: a topic znode written the old way, and a whole cluster restarted on data from
before ids (znode without an id, partition directories without partition.metadata)."""

from __future__ import annotations

import dataclasses
import os

from confluent_kafka import Producer

from kafkalite.log import partition_metadata
from kafkalite.testing.fixtures import start_client, stop_client
from kafkalite.testing.probes import partition_view, wait_fully_replicated, wait_until
from kafkalite.testing.verify import partition_dirs, read_partition
from kafkalite.zk import ZkAdapter
from kafkalite.zk.codec import TopicAssignment

TOPIC = "legacy"


def _zk(cluster):
    client = start_client(cluster.status()["zookeeper"]["connect"])
    return client, ZkAdapter(client)


def _ids_recorded(cluster, topic_id: str) -> bool:
    status = cluster.status()
    dirs = [d for p in range(2) for d in partition_dirs(status, TOPIC, p, [1, 2, 3])]
    return len(dirs) == 6 and all(partition_metadata.read(d) == topic_id for d in dirs)


def test_a_topic_made_without_an_id_gets_one_and_its_logs_keep_their_records_across_an_upgrade(cluster):
    boot = cluster.status()["bootstrap"]
    client, zk = _zk(cluster)
    try:
        # As a broker from before topic ids created it: the assignment znode has no id.
        zk.create_topic_znode(TOPIC, TopicAssignment({0: [1, 2, 3], 1: [2, 3, 1]}, {}))
        wait_until(lambda: all((v := partition_view(cluster, TOPIC, p)) and v["leader"] >= 0 for p in range(2)), 30,
                   "the legacy topic's partitions to have leaders")
        first_id = zk.get_topic_assignment(TOPIC)[0].topic_id
        assert first_id is not None

        p = Producer({"bootstrap.servers": boot, "acks": "all", "log_level": 3})
        for i in range(100):
            p.produce(TOPIC, value=b"r-%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        wait_fully_replicated(cluster, TOPIC, 2, 60)
        # (a partition's directory is made at its first write, with the id it was told)
        wait_until(lambda: _ids_recorded(cluster, first_id), 30, "every replica to record the topic id")

        # The whole cluster stopped and its data taken back to before topic ids.
        for b in (1, 2, 3):
            cluster.stop_broker(b)
        assignment, version = zk.get_topic_assignment(TOPIC)
        zk.set_topic_assignment(TOPIC, dataclasses.replace(assignment, topic_id=None), version)
        status = cluster.status()
        for part in range(2):
            for d in partition_dirs(status, TOPIC, part, [1, 2, 3]):
                os.remove(partition_metadata.path_in(d))
        for b in (1, 2, 3):
            cluster.start(b)

        second_id = wait_until(lambda: zk.get_topic_assignment(TOPIC)[0].topic_id, 30, "the controller to give an id")
        assert second_id != first_id
        wait_until(lambda: _ids_recorded(cluster, second_id), 30, "every replica to record the new id in its old log")
        wait_fully_replicated(cluster, TOPIC, 2, 60)
        values = sorted(v for part in range(2) for _o, v in read_partition(boot, TOPIC, part))
        assert values == sorted(b"r-%d" % i for i in range(100))  # kept, not replaced
    finally:
        stop_client(client)
