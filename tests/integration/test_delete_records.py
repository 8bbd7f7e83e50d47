"""DeleteRecords and DescribeLogDirs against 3 live brokers (one module-scoped cluster, each
test on its own topic), with confluent-kafka's and kafka-python's admin clients and the CLI:

- under replication every replica's log start advances before the answer (its acks wait on
  the ISR's low watermark), the segments wholly below it are gone from every broker's disk,
  ListOffsets earliest says it, and consumers starting from earliest (or falling below it
  with auto.offset.reset=earliest) begin there;
- DescribeLogDirs reports each replica's bytes on disk as the segment files hold them;
- the log start survives a leader change and a broker's kill -9 and restart
  (log-start-offset-checkpoint);
- errors: above the HW (OFFSET_OUT_OF_RANGE), a follower asked (NOT_LEADER_OR_FOLLOWER), an
  unknown partition (UNKNOWN_TOPIC_OR_PARTITION), a compacted topic (POLICY_VIOLATION); the
  CLI says each in one line.

confluent-kafka 2.16 has delete_records but no describe_log_dirs; kafka-python has both.
"""

from __future__ import annotations

import json
import os

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.cli.admin_client import AdminClient as CliAdmin
from kafkalite.protocol.errors import ErrorCode
from kafkalite.protocol.schema import ApiKey
from kafkalite.testing.cli_runner import failed_with, ok
from kafkalite.testing.fixtures import module_cluster
from kafkalite.testing.probes import broker_state, wait_fully_replicated, wait_until

SEGMENT_BYTES = 4096
VALUE = b"v" * 200
BROKER = {"replica.high.watermark.checkpoint.interval.ms": 500, "log.retention.check.interval.ms": 500}


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    with module_cluster(zk_server, tmp_path_factory, "delete-records", overrides=BROKER) as c:
        yield c


@pytest.fixture(scope="module")
def boot(cluster) -> str:
    return cluster.status()["bootstrap"]


def create(cluster, boot: str, topic: str, replicas: list[int], **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    new = NewTopic(topic, num_partitions=1, replication_factor=-1, replica_assignment=[replicas],
                   config={"segment.bytes": str(SEGMENT_BYTES), **config})
    for future in admin.create_topics([new]).values():
        future.result(timeout=30)
    wait_fully_replicated(cluster, topic, 1)


def produce(boot: str, topic: str, count: int) -> None:
    # Small batches (7 records), so a segment holds a few and a log start falls inside one.
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5, "batch.num.messages": 7})
    failures = []
    for _ in range(count):
        producer.produce(topic, VALUE, partition=0, on_delivery=lambda err, msg: failures.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not failures


def replica_state(cluster, broker_id: int, topic: str) -> dict:
    b = cluster.broker(broker_id)
    return broker_state(b["admin_port"])["partitions"][f"{topic}-0"]


def segment_files(cluster, broker_id: int, topic: str) -> dict[int, int]:
    """Segment base offset -> .log file size, on this broker's disk."""
    d = os.path.join(cluster.broker(broker_id)["log_dirs"][0], f"{topic}-0")
    return {int(n[:-4]): os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log")}


def first_offset(boot: str, topic: str, *, start: int | None = None) -> int:
    """The offset of the first record a consumer with auto.offset.reset=earliest gets,
    from the beginning (None) or from `start`."""
    consumer = Consumer({"bootstrap.servers": boot, "group.id": f"g-{os.urandom(4).hex()}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, start if start is not None else -2)])
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "no record within 10 s"
            if msg.error() is None:
                return msg.offset()
    finally:
        consumer.close()


def test_confluent_delete_records_moves_every_replica_and_deletes_their_segments(cluster, boot):
    topic = "dr-confluent"
    create(cluster, boot, topic, [1, 2, 3])
    produce(boot, topic, 1000)
    before = {b: segment_files(cluster, b, topic) for b in (1, 2, 3)}
    assert all(len(files) > 20 for files in before.values())
    admin = AdminClient({"bootstrap.servers": boot})
    [future] = admin.delete_records([TopicPartition(topic, 0, 600)], request_timeout=30).values()
    assert future.result(timeout=30).low_watermark == 600
    for b in (1, 2, 3):  # the answer waited for the whole ISR: no polling needed
        assert replica_state(cluster, b, topic)["log_start"] == 600
        bases = sorted(segment_files(cluster, b, topic))
        assert bases[0] <= 600 < bases[1]  # only the segment holding 600 reaches below it
        assert len(bases) < len(before[b])
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "dr-watermarks"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (600, 1000)
    finally:
        consumer.close()
    assert first_offset(boot, topic) == 600  # from earliest
    assert first_offset(boot, topic, start=100) == 600  # below the log start: OFFSET_OUT_OF_RANGE, reset to earliest


def test_kafka_python_delete_records_and_describe_log_dirs(cluster, boot):
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient

    topic = "dr-kafka-python"
    create(cluster, boot, topic, [2, 3, 1])
    produce(boot, topic, 500)
    admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=30000)
    try:
        tp = KTopicPartition(topic, 0)
        result = admin.delete_records({tp: 300})
        assert result[tp]["low_watermark"] == 300
        for b in (1, 2, 3):
            assert replica_state(cluster, b, topic)["log_start"] == 300
        result = admin.delete_records({tp: -1})  # -1: everything below the HW
        assert result[tp]["low_watermark"] == 500
        sizes = {}
        for answer in admin.describe_log_dirs(topic_partitions={topic: [0]}):
            [log_dir] = answer["log_dirs"]
            assert log_dir["error_code"] == 0
            [t] = log_dir["topics"]
            [p] = t["partitions"]
            assert (t["name"], p["partition_index"], p["is_future_key"]) == (topic, 0, False)
            assert p["offset_lag"] >= 0
            sizes[answer["broker"]] = p["partition_size"]
        assert sizes == {b: sum(segment_files(cluster, b, topic).values()) for b in (1, 2, 3)}
    finally:
        admin.close()


def test_errors_above_the_hw_on_a_follower_and_for_an_unknown_partition(cluster, boot):
    topic = "dr-errors"
    create(cluster, boot, topic, [3, 1, 2])
    produce(boot, topic, 50)
    admin = AdminClient({"bootstrap.servers": boot})
    [future] = admin.delete_records([TopicPartition(topic, 0, 51)], request_timeout=30).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=30)
    assert raised.value.args[0].code() == ErrorCode.OFFSET_OUT_OF_RANGE
    with CliAdmin(boot) as raw:
        def delete_on(broker_id: int, t: str, p: int, offset: int) -> dict:
            b = cluster.broker(broker_id)
            body = {"topics": [{"name": t, "partitions": [{"partition_index": p, "offset": offset}]}], "timeout_ms": 5000}
            return raw.request_broker(b["host"], b["port"], ApiKey.DELETE_RECORDS, 1, body)["topics"][0]["partitions"][0]
        assert delete_on(1, topic, 0, 10)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER  # 1 follows
        assert delete_on(3, topic, 7, 10)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert delete_on(3, "no-such-topic", 0, 10)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert delete_on(3, topic, 0, -5)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert {replica_state(cluster, b, topic)["log_start"] for b in (1, 2, 3)} == {0}  # nothing moved
    failed_with("offset 51 is above the high watermark 50", "records", "delete", "--topic", topic, "--partition", "0",
                "--before", "51", boot=boot)
    failed_with("has no partition 4", "records", "delete", "--topic", topic, "--partition", "4", "--before", "1", boot=boot)
    failed_with("unknown topic", "records", "delete", "--topic", "no-such-topic", "--partition", "0", "--before", "1", boot=boot)
    create(cluster, boot, "dr-compacted", [1, 2, 3], **{"cleanup.policy": "compact"})
    [future] = admin.delete_records([TopicPartition("dr-compacted", 0, 0)], request_timeout=30).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=30)
    assert raised.value.args[0].code() == ErrorCode.POLICY_VIOLATION
    failed_with("cleanup.policy=compact", "records", "delete", "--topic", "dr-compacted", "--partition", "0", "--before", "0",
                boot=boot)


def test_cli_records_delete_and_log_dirs(cluster, boot):
    topic = "dr-cli"
    create(cluster, boot, topic, [1, 2, 3])
    produce(boot, topic, 200)
    out = ok("records", "delete", "--topic", topic, "--partition", "0", "--before", "120", boot=boot)
    assert out.strip() == f"{topic}-0: low watermark 120"
    doc = json.loads(ok("log-dirs", "--json", boot=boot))
    assert [b["id"] for b in doc["brokers"]] == [1, 2, 3]
    for b in doc["brokers"]:
        [d] = b["log_dirs"]
        assert d["error"] is None
        mine = [p for p in d["partitions"] if p["topic"] == topic]
        assert [p["size"] for p in mine] == [sum(segment_files(cluster, b["id"], topic).values())]
        assert b["size"] == d["size"] == sum(p["size"] for p in d["partitions"])
    assert doc["size"] == sum(b["size"] for b in doc["brokers"])
    table = ok("log-dirs", boot=boot)
    assert topic in table
    assert "broker total" in table


def test_log_start_survives_a_leader_change_and_a_restart(cluster, boot):
    replicated, single = "dr-failover", "dr-restart"
    create(cluster, boot, replicated, [1, 2, 3])
    create(cluster, boot, single, [3])
    produce(boot, replicated, 400)
    produce(boot, single, 400)
    with CliAdmin(boot) as raw:
        from kafkalite.cli.records_cmd import delete_records
        assert delete_records(raw, replicated, 0, 250, 30000) == 250
        assert delete_records(raw, single, 0, 333, 30000) == 333
    assert min(segment_files(cluster, 3, single)) < 333  # the log start lies inside the first segment
    cluster.stop_broker(1)  # the leader of `replicated` goes (controlled shutdown)
    # The only replica of `single` is killed -9 once the periodic checkpoint has it: only
    # the checkpoint knows 333 when it starts again.
    cp = os.path.join(cluster.broker(3)["log_dirs"][0], "log-start-offset-checkpoint")
    wait_until(lambda: os.path.exists(cp) and f"{single} 0 333" in open(cp).read(), 10, "the log start checkpointed")
    cluster.kill(3)
    cluster.start(3)
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "dr-failover"})
    try:
        def earliest(topic: str) -> int | None:
            try:
                return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[0]
            except KafkaException:
                return None
        assert wait_until(lambda: earliest(replicated) == 250, 30, "the new leader's log start")
        assert wait_until(lambda: earliest(single) == 333, 30, "the restarted broker's log start")
        cluster.start(1)
        assert wait_until(lambda: replica_state(cluster, 1, replicated)["log_start"] == 250, 30, "broker 1's log start")
    finally:
        consumer.close()


def test_the_answer_waits_for_every_in_sync_follower(cluster, boot):
    """A paused follower (still in the ISR: paused well under replica.lag.time.max.ms) holds
    the low watermark back: the leader's log start moves at once, the answer times out
    with the low watermark reached so far, and once the follower runs again it follows."""
    topic = "dr-acks"
    create(cluster, boot, topic, [1, 2, 3])
    produce(boot, topic, 100)
    leader = cluster.broker(1)

    with CliAdmin(boot) as raw:
        def delete(offset: int, timeout_ms: int) -> dict:
            body = {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}], "timeout_ms": timeout_ms}
            return raw.request_broker(leader["host"], leader["port"], ApiKey.DELETE_RECORDS, 1, body)["topics"][0]["partitions"][0]

        # The follower is stopped only for the 500 ms request and one read of the leader's
        # state: well under replica.lag.time.max.ms (4 s) even on a slow moment, or the
        # follower would leave the ISR and no longer hold the low watermark back.
        cluster.kill(3, "STOP")
        try:
            answer = delete(40, 500)
            state = replica_state(cluster, 1, topic)
        finally:
            cluster.kill(3, "CONT")
        assert (answer["error_code"], answer["low_watermark"]) == (ErrorCode.REQUEST_TIMED_OUT, 0)
        assert (state["log_start"], state["low_watermark"]) == (40, 0)
        answer = delete(40, 10_000)
    assert (answer["error_code"], answer["low_watermark"]) == (ErrorCode.NONE, 40)
    assert replica_state(cluster, 3, topic)["log_start"] == 40
    assert wait_until(lambda: 3 in replica_state(cluster, 1, topic)["isr"], 30, "broker 3 back in the ISR")
