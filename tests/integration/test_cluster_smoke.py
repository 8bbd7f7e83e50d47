"""End to end on real processes: three brokers, RF 3, idempotent acks=all producer."""

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def test_three_brokers_replicate_and_serve_acks_all(cluster):
    boot = cluster.status()["bootstrap"]
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic("smoke", num_partitions=3, replication_factor=3)]).values():
        f.result(timeout=20)
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True})
    acked = []
    for i in range(600):
        producer.produce("smoke", key=str(i).encode(), value=b"v%d" % i,
                         on_delivery=lambda err, msg: acked.append((err, msg.partition(), msg.offset())))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert all(err is None for err, _, _ in acked)
    assert len(acked) == 600
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("smoke", p, 0) for p in range(3)])
    seen = {}
    for _ in range(200):
        if len(seen) == 600:
            break
        for msg in consumer.consume(500, timeout=0.5):
            assert msg.error() is None
            seen[(msg.partition(), msg.offset())] = msg.value()
    consumer.close()
    assert set(seen) == {(p, o) for _, p, o in acked}
