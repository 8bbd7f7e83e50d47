"""Per-group lag on /metrics (issue 10): the coordinator of a group exports, per partition the
group committed an offset for, the partition's high watermark minus that offset, asking the
partition's leader when it does not lead it itself."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.probes import metrics_text, wait_until

GROUPS = {"offsets.topic.num.partitions": 6, "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}


def _group_lags(cluster) -> dict[str, float]:
    out = {}
    for b in cluster.status()["brokers"]:
        for line in metrics_text(b["admin_port"]).splitlines():
            if line.startswith("kafkalite_consumer_group_lag{"):
                labels, value = line[len("kafkalite_consumer_group_lag{"):].rsplit("} ", 1)
                out[labels] = float(value)
    return out


def test_group_lag_is_exported_by_the_coordinator(cluster_factory):
    c = cluster_factory(3, overrides=GROUPS)
    boot = c.status()["bootstrap"]
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic("lagged", 2, 1)]).values():  # RF 1: some leaders are not the coordinator
        f.result(30)
    producer = Producer({"bootstrap.servers": boot, "acks": "all"})
    for i in range(100):
        producer.produce("lagged", value=b"v", partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "lagging", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("lagged", 0, 10), TopicPartition("lagged", 1, 50)], asynchronous=False)
    finally:
        consumer.close()
    lags = wait_until(lambda: (got := _group_lags(c)) and len(got) == 2 and got, 30, "the group's lag on /metrics")
    assert lags == {'group="lagging",partition="0",topic="lagged"': 40.0, 'group="lagging",partition="1",topic="lagged"': 0.0}, lags
