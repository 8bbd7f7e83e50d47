"""Two named client listeners on one broker (what docker-compose uses: one for the
container network, one advertised to the host): each client is told the address of the
listener it connected to, and both serve produce and fetch."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.ports import free_ports


def test_clients_get_the_addresses_of_the_listener_they_connected_to(cluster_factory):
    internal, external = free_ports(2)
    c = cluster_factory(1, overrides={
        "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{external}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "default.replication.factor": 1, "offsets.topic.replication.factor": 1,
    })
    assert c.status()["brokers"][0]["alive"]
    seen = {}
    for name, port in (("INTERNAL", internal), ("EXTERNAL", external)):
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=20)
        seen[name] = {(b.host, b.port) for b in md.brokers.values()}
    assert seen == {"INTERNAL": {("127.0.0.1", internal)}, "EXTERNAL": {("localhost", external)}}

    admin = AdminClient({"bootstrap.servers": f"localhost:{external}"})
    for f in admin.create_topics([NewTopic("via-external", num_partitions=1, replication_factor=1)]).values():
        f.result(timeout=30)
    producer = Producer({"bootstrap.servers": f"localhost:{external}", "acks": "all"})
    delivered = []
    for i in range(10):
        producer.produce("via-external", value=f"m{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 10
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{internal}", "group.id": "g", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("via-external", 0, 0)])
        got = []
        while len(got) < 10:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(got)} of 10 messages"
            if msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [f"m{i}".encode() for i in range(10)]
