"""Issue 16: describe and alter topic and broker configs live, with confluent-kafka's and
kafka-python's admin clients and the kafkalite CLI, against one module-scoped cluster of
three real brokers.

Changes take effect without a restart (retention deletes old segments; min.insync.replicas
decides whether acks=all writes pass with a replica down) and survive a controller
failover and a broker restart. Bad names and values are refused with a message and change
nothing; validate_only changes nothing.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from kafkalite.config import SETTINGS, TOPIC_CONFIGS
from kafkalite.testing.cli_runner import failed_with, ok
from kafkalite.testing.fixtures import module_cluster

confluent_admin = pytest.importorskip("confluent_kafka.admin")
confluent_kafka = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("kafka.admin")

from confluent_kafka import KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402

STATIC_RETENTION_MS = 86_400_000  # set in the brokers' config: source STATIC_BROKER_CONFIG
WAIT_S = 20.0
SOURCE_DYNAMIC_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC, SOURCE_DEFAULT = 1, 2, 3, 4, 5


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    with module_cluster(zk_server, tmp_path_factory, "configs",
                        overrides={"log.retention.ms": STATIC_RETENTION_MS, "log.retention.check.interval.ms": 300}) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.status()["bootstrap"]})


def create(admin: AdminClient, name: str, config: dict | None = None, assignment: list[list[int]] | None = None) -> None:
    topic = (NewTopic(name, num_partitions=len(assignment), replication_factor=-1, replica_assignment=assignment, config=config or {}) if assignment
             else NewTopic(name, 1, 3, config=config or {}))
    admin.create_topics([topic], operation_timeout=10)[name].result()


def describe(admin: AdminClient, rtype: str, name: str) -> dict:
    resource = ConfigResource(rtype, name)
    return admin.describe_configs([resource], request_timeout=10)[resource].result()


def overrides(admin: AdminClient, topic: str) -> dict[str, str]:
    return {k: e.value for k, e in describe(admin, "topic", topic).items() if e.source == SOURCE_DYNAMIC_TOPIC}


def incremental(admin: AdminClient, rtype: str, name: str, *ops: tuple[str, str | None, AlterConfigOpType], validate_only=False):
    resource = ConfigResource(rtype, name, incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops])
    return admin.incremental_alter_configs([resource], request_timeout=10, validate_only=validate_only)[resource].result()


def wait_for(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = condition()
        except KafkaException as e:
            # librdkafka may have sent the request to the broker that was just killed, and
            # keeps it there until its timeout: one such miss is the client's, not a strand
            # (the admin calls after the wait would catch a client that stays stranded).
            if e.args[0].code() != KafkaError._TIMED_OUT:
                raise
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def broker_state(cluster, broker_id: int) -> dict:
    port = cluster.broker(broker_id)["admin_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=5) as r:
        return json.loads(r.read())


def partition0(admin: AdminClient, topic: str):
    return admin.list_topics(topic, timeout=5).topics[topic].partitions[0]


def produce_one(cluster, topic: str, value: bytes = b"v") -> KafkaError | None:
    """One acks=all record without retries: the broker's own answer."""
    result: list = []
    p = Producer({"bootstrap.servers": cluster.status()["bootstrap"], "acks": "all", "retries": 0,
                  "enable.idempotence": False, "message.timeout.ms": 10000, "linger.ms": 0})
    p.produce(topic, value, on_delivery=lambda err, msg: result.append(err))
    p.flush(15)
    assert result, "no delivery report"
    return result[0]


def test_describe_returns_every_config_with_its_source(admin):
    create(admin, "plain")
    create(admin, "created-with-config", {"segment.bytes": "4096"})
    plain = describe(admin, "topic", "plain")
    assert set(plain) == set(TOPIC_CONFIGS)
    assert (plain["retention.ms"].value, plain["retention.ms"].source) == (str(STATIC_RETENTION_MS), SOURCE_STATIC)
    assert plain["segment.bytes"].source == SOURCE_DEFAULT
    assert not plain["retention.ms"].is_read_only
    created = describe(admin, "topic", "created-with-config")
    assert (created["segment.bytes"].value, created["segment.bytes"].source) == ("4096", SOURCE_DYNAMIC_TOPIC)
    broker = describe(admin, "broker", "2")
    assert set(broker) == set(SETTINGS)
    assert broker["broker.id"].value == "2"
    assert broker["broker.id"].is_read_only
    assert not broker["log.retention.ms"].is_read_only


def test_kafka_python_describes_with_synonyms_and_alters(cluster, admin):
    from kafka.admin import ConfigResource as KResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    create(admin, "kp", {"segment.bytes": "4096"})
    client = KafkaAdminClient(bootstrap_servers=cluster.status()["bootstrap"])
    try:
        described = client.describe_configs([KResource(ConfigResourceType.TOPIC, "kp")], include_synonyms=True, config_filter="all")
        retention = described["topic"]["kp"]["retention.ms"]
        assert [(s["name"], s["source"]) for s in retention["synonyms"]] == [
            ("log.retention.ms", "STATIC_BROKER_CONFIG"), ("log.retention.ms", "DEFAULT_CONFIG")]
        # kafka-python 3 uses IncrementalAlterConfigs where the broker offers it ...
        client.alter_configs([KResource(ConfigResourceType.TOPIC, "kp", configs={"retention.bytes": "1000000"})])
        assert overrides(admin, "kp") == {"segment.bytes": "4096", "retention.bytes": "1000000"}
        # ... and AlterConfigs when told to, filling in the other overrides it read first.
        client.alter_configs([KResource(ConfigResourceType.TOPIC, "kp", configs={"retention.bytes": "2000000"})], incremental=False)
        assert overrides(admin, "kp") == {"segment.bytes": "4096", "retention.bytes": "2000000"}
        for broker_id in (1, 2, 3):  # each broker's own configs, asked of that broker
            described = client.describe_configs([KResource(ConfigResourceType.BROKER, str(broker_id))], config_filter="all")
            assert described["broker"][str(broker_id)]["broker.id"]["value"] == str(broker_id)
    finally:
        client.close()


def test_confluent_incremental_and_legacy_alter(admin):
    create(admin, "inc", {"segment.bytes": "4096"})
    incremental(admin, "topic", "inc", ("retention.ms", "60000", AlterConfigOpType.SET),
                ("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert overrides(admin, "inc") == {"segment.bytes": "4096", "retention.ms": "60000", "cleanup.policy": "compact,delete"}
    incremental(admin, "topic", "inc", ("retention.ms", None, AlterConfigOpType.DELETE),
                ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    after = describe(admin, "topic", "inc")
    assert (after["retention.ms"].value, after["retention.ms"].source) == (str(STATIC_RETENTION_MS), SOURCE_STATIC)
    assert after["cleanup.policy"].value == "compact"
    resource = ConfigResource("topic", "inc", set_config={"max.message.bytes": "2000000"})
    admin.alter_configs([resource], request_timeout=10)[resource].result()
    assert overrides(admin, "inc") == {"max.message.bytes": "2000000"}


@pytest.mark.parametrize("ops, message", [
    ([("retention.msx", "1", AlterConfigOpType.SET)], "unknown topic config 'retention.msx'"),
    ([("retention.ms", "1", AlterConfigOpType.SET), ("min.insync.replicas", "0", AlterConfigOpType.SET)], ">= 1"),
    ([("retention.ms", "2", AlterConfigOpType.APPEND)], "not a list"),
    ([("cleanup.policy", "shred", AlterConfigOpType.SET)], "delete, compact"),
])
def test_bad_names_and_values_are_refused_and_change_nothing(admin, ops, message):
    if "guarded" not in admin.list_topics(timeout=10).topics:
        create(admin, "guarded", {"retention.ms": "500000"})
    before = {k: (e.value, e.source) for k, e in describe(admin, "topic", "guarded").items()}
    with pytest.raises(KafkaException) as e:
        incremental(admin, "topic", "guarded", *ops)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert message in e.value.args[0].str()
    assert {k: (e.value, e.source) for k, e in describe(admin, "topic", "guarded").items()} == before


def test_validate_only_changes_nothing(admin):
    create(admin, "validated")
    incremental(admin, "topic", "validated", ("retention.ms", "1234", AlterConfigOpType.SET), validate_only=True)
    assert overrides(admin, "validated") == {}


def test_small_retention_ms_deletes_old_segments_without_restart(cluster, admin):
    create(admin, "retained", {"segment.bytes": "1024"})
    p = Producer({"bootstrap.servers": cluster.status()["bootstrap"], "acks": "all", "linger.ms": 0})
    for i in range(100):  # ten batches of about 1 KiB: segments roll at 1024 bytes
        p.produce("retained", b"x" * 100, key=str(i).encode())
        if i % 10 == 9:
            assert p.flush(15) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.status()["bootstrap"], "group.id": "retention-probe"})
    try:
        tp = confluent_kafka.TopicPartition("retained", 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=10)
        assert (low, high) == (0, 100)
        incremental(admin, "topic", "retained", ("retention.ms", "1000", AlterConfigOpType.SET))
        low = wait_for(lambda: consumer.get_watermark_offsets(tp, timeout=10)[0], "retention to delete old segments")
        assert 0 < low <= 100
    finally:
        consumer.close()


def test_broker_configs_per_broker_and_cluster_default_and_read_only_ones(cluster, admin):
    boot = cluster.status()["bootstrap"]
    # librdkafka refuses the empty broker name of the cluster-wide default: the CLI sends it.
    ok("configs", "alter", "--broker-defaults", "--set", "log.retention.bytes=5000000", boot=boot)
    incremental(admin, "broker", "3", ("log.retention.bytes", "6000000", AlterConfigOpType.SET),
                ("leader.replication.throttled.rate", "1048576", AlterConfigOpType.SET))
    two = wait_for(lambda: (e := describe(admin, "broker", "2")["log.retention.bytes"]).source == SOURCE_DYNAMIC_DEFAULT and e,
                   "broker 2 to apply the cluster default")
    assert two.value == "5000000"
    three = wait_for(lambda: (e := describe(admin, "broker", "3")["log.retention.bytes"]).source == SOURCE_DYNAMIC_BROKER and e,
                     "broker 3 to apply its own value")
    assert three.value == "6000000"
    # A topic without the override shows the broker's value, with the broker's source.
    assert describe(admin, "topic", "plain")["retention.bytes"].value in ("5000000", "6000000")
    with pytest.raises(KafkaException) as e:
        incremental(admin, "broker", "1", ("broker.id", "9", AlterConfigOpType.SET))
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "read-only" in e.value.args[0].str()
    shown = json.loads(ok("configs", "describe", "--broker-defaults", "--json", boot=boot))["configs"]
    assert [(c["name"], c["value"], c["source"]) for c in shown] == [
        ("log.retention.bytes", "5000000", "DYNAMIC_DEFAULT_BROKER_CONFIG")]
    ok("configs", "alter", "--broker-defaults", "--delete", "log.retention.bytes", boot=boot)
    incremental(admin, "broker", "3", ("log.retention.bytes", None, AlterConfigOpType.DELETE),
                ("leader.replication.throttled.rate", None, AlterConfigOpType.DELETE))
    wait_for(lambda: describe(admin, "broker", "3")["log.retention.bytes"].source == SOURCE_DEFAULT, "the defaults back")


def test_min_insync_replicas_applies_live_and_survives_controller_failover_and_restart(cluster, admin):
    """The controller is also a follower of the topic: killing it takes one follower down
    and makes another broker the controller, which must pick up the changes."""
    controller = admin.list_topics(timeout=10).controller_id
    leader = next(b for b in (1, 2, 3) if b != controller)
    third = next(b for b in (1, 2, 3) if b not in (controller, leader))
    create(admin, "mir", assignment=[[leader, controller, third]])
    wait_for(lambda: sorted(partition0(admin, "mir").isrs) == [1, 2, 3], "a full ISR")
    # A change made before the failover stays in force after it (max.message.bytes, live).
    big = b"x" * 3000
    assert produce_one(cluster, "mir", big) is None
    incremental(admin, "topic", "mir", ("max.message.bytes", "2000", AlterConfigOpType.SET))
    wait_for(lambda: produce_one(cluster, "mir", big) is not None, "max.message.bytes=2000 in force")
    cluster.kill(controller)
    wait_for(lambda: sorted(partition0(admin, "mir").isrs) == sorted([leader, third]), "the ISR to shrink")
    wait_for(lambda: admin.list_topics(timeout=10).controller_id not in (-1, controller), "a new controller")
    assert produce_one(cluster, "mir") is None
    err = produce_one(cluster, "mir", big)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert overrides(admin, "mir") == {"max.message.bytes": "2000"}

    incremental(admin, "topic", "mir", ("min.insync.replicas", "3", AlterConfigOpType.SET))
    err = produce_one(cluster, "mir")
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS

    incremental(admin, "topic", "mir", ("min.insync.replicas", "2", AlterConfigOpType.SET))
    assert produce_one(cluster, "mir") is None

    incremental(admin, "topic", "mir", ("min.insync.replicas", "3", AlterConfigOpType.SET))
    # A broker's own dynamic config, written while it is down, is in force when it is back.
    ok("configs", "alter", "--broker", str(controller), "--set", "log.retention.bytes=7000000",
       boot=cluster.status()["bootstrap"])
    cluster.start(controller)
    wait_for(lambda: sorted(partition0(admin, "mir").isrs) == [1, 2, 3], "the restarted broker back in the ISR")
    assert produce_one(cluster, "mir") is None  # three in sync: min.insync.replicas=3 is met
    restarted = broker_state(cluster, controller)["metadata"]["topic_configs"]
    assert restarted["mir"]["min.insync.replicas"] == "3"
    assert restarted["mir"]["max.message.bytes"] == "2000"
    fresh = AdminClient({"bootstrap.servers": cluster.status()["bootstrap"]})  # no reconnect back-off to the restarted one
    mine = describe(fresh, "broker", str(controller))["log.retention.bytes"]
    assert (mine.value, mine.source) == ("7000000", SOURCE_DYNAMIC_BROKER)
    incremental(fresh, "broker", str(controller), ("log.retention.bytes", None, AlterConfigOpType.DELETE))


def test_cli_describe_and_alter(cluster, admin):
    boot = cluster.status()["bootstrap"]
    create(admin, "cli-topic")
    ok("configs", "alter", "--topic", "cli-topic", "--set", "retention.ms=70000", "--set", "segment.ms=80000", boot=boot)
    shown = json.loads(ok("configs", "describe", "--topic", "cli-topic", "--json", boot=boot))["configs"]
    assert {c["name"]: (c["value"], c["source"]) for c in shown} == {
        "retention.ms": ("70000", "DYNAMIC_TOPIC_CONFIG"), "segment.ms": ("80000", "DYNAMIC_TOPIC_CONFIG")}
    every = json.loads(ok("configs", "describe", "--topic", "cli-topic", "--all", "--json", boot=boot))["configs"]
    assert len(every) == len(TOPIC_CONFIGS)
    ok("configs", "alter", "--topic", "cli-topic", "--delete", "segment.ms", boot=boot)
    table = ok("configs", "describe", "--topic", "cli-topic", boot=boot)
    assert "retention.ms" in table and "DYNAMIC_TOPIC_CONFIG" in table and "segment.ms" not in table
    failed_with("'retention.ms'", "configs", "alter", "--topic", "cli-topic", "--set", "retention.ms=soon", boot=boot)
    failed_with("unknown topic", "configs", "describe", "--topic", "no-such-topic", boot=boot)
    failed_with("read-only", "configs", "alter", "--broker", "1", "--set", "log.dirs=/tmp/x", boot=boot)
    assert "log.retention.ms" in ok("configs", "describe", "--broker", "1", "--all", boot=boot)
    ok("configs", "alter", "--broker", "1", "--set", "message.max.bytes=2000000", boot=boot)
    own = json.loads(ok("configs", "describe", "--broker", "1", "--json", boot=boot))["configs"]
    assert [(c["name"], c["value"], c["source"]) for c in own] == [("message.max.bytes", "2000000", "DYNAMIC_BROKER_CONFIG")]
    ok("configs", "alter", "--broker", "1", "--delete", "message.max.bytes", boot=boot)


def test_each_resource_of_a_request_is_altered_or_refused_whole(cluster, admin):
    """Raw IncrementalAlterConfigs v0: a good resource is altered, a bad one left exactly as
    it was (even its valid configs), and a resource named twice refused both times."""
    from kafkalite.cli.admin_client import AdminClient as KafkaliteAdmin
    from kafkalite.protocol.schema import ApiKey

    create(admin, "whole-good")
    create(admin, "whole-bad", {"retention.ms": "900000"})

    def resource(topic, *configs):
        return {"resource_type": 2, "resource_name": topic,
                "configs": [{"name": k, "config_operation": 0, "value": v} for k, v in configs]}

    body = {"resources": [resource("whole-good", ("retention.ms", "800000")),
                          resource("whole-bad", ("retention.ms", "700000"), ("segment.bytes", "12")),
                          resource("plain", ("retention.ms", "1")), resource("plain", ("retention.ms", "2"))],
            "validate_only": False}
    with KafkaliteAdmin(cluster.status()["bootstrap"]) as client:
        response = client._request_any(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body)
    codes = [(r["resource_name"], r["error_code"]) for r in response["responses"]]
    assert codes == [("whole-good", 0), ("whole-bad", 40), ("plain", 42), ("plain", 42)]
    assert "segment.bytes" in response["responses"][1]["error_message"]
    assert overrides(admin, "whole-good") == {"retention.ms": "800000"}
    assert overrides(admin, "whole-bad") == {"retention.ms": "900000"}
    assert "retention.ms" not in overrides(admin, "plain")
