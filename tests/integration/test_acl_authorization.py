"""ACL authorization on a real 3-broker cluster with `authorizer.class.name` set (issue 15).

Every client here is User:ANONYMOUS (plaintext listener). The test grants it, through the
Kafka protocol (confluent-kafka's AdminClient create_acls/delete_acls), exactly what each
scenario needs and shows the rest refused with Kafka's error codes in real clients. ACLs
start from one bootstrap ACL written to ZooKeeper (Alter and Describe on the cluster, as
an admin would with Kafka's kafka-acls --authorizer-properties zookeeper.connect=...).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from kafkalite.core import acl as core_acl
from kafkalite.rpc.transport import RpcClient, RpcError
from kafkalite.testing.cli_runner import failed_with, ok
from kafkalite.testing.cluster import LocalCluster
from kafkalite.testing.fixtures import TEST_BROKER_OVERRIDES, fresh_chroot
from kafkalite.testing.ports import free_ports
from kafkalite.zk import ZkAdapter
from kafkalite.zk.acl_store import AclStore
from kafkalite.zk.security import make_client

ANON = "User:ANONYMOUS"
PROPAGATION_S = 10.0


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    """Three brokers with the ACL authorizer, the inter-broker secret the launcher makes,
    and ZooKeeper ACLs (digest identity of the cluster, zookeeper.set.acl)."""
    connect = fresh_chroot(zk_server, "acl")
    ports = free_ports(9)
    overrides = dict(TEST_BROKER_OVERRIDES, **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "offsets.topic.num.partitions": 3, "offsets.topic.replication.factor": 3, "group.initial.rebalance.delay.ms": 0})
    c = LocalCluster(tmp_path_factory.mktemp("acl-cluster"), brokers=3, overrides=overrides, zk_connect=connect,
                     ports=[(ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(3)], zk_acl=True)
    try:
        c.up()
        _bootstrap_acl(c)
        yield c
    finally:
        c.down()


def _bootstrap_acl(c: LocalCluster) -> None:
    """Alter and Describe on the cluster for ANONYMOUS, written to ZooKeeper with the
    cluster's credentials (as Kafka's kafka-acls --authorizer-properties zookeeper.connect)."""
    client = make_client(c.status()["zookeeper"]["connect"], 5, c.zk_security())
    client.start(timeout=10)
    try:
        store = AclStore(ZkAdapter(client))
        cluster_pattern = core_acl.ResourcePattern(core_acl.ResourceType.CLUSTER, core_acl.CLUSTER_NAME, core_acl.PatternType.LITERAL)
        store.update(cluster_pattern, lambda old: old | {
            core_acl.AccessControlEntry(ANON, "*", op, core_acl.Permission.ALLOW)
            for op in (core_acl.Operation.ALTER, core_acl.Operation.DESCRIBE)})
    finally:
        client.stop()
        client.close()
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)

    def described_everywhere() -> bool:
        for b in (1, 2, 3):
            a = admin(c, b)
            try:
                if len(a.describe_acls(everything, request_timeout=10).result(timeout=15)) != 2:
                    return False
            except KafkaException:
                return False
        return True

    eventually(described_everywhere, "the bootstrap ACL reaches every broker")


def bootstrap(c: LocalCluster, broker: int | None = None) -> str:
    brokers = c.status()["brokers"]
    return ",".join(f"{b['host']}:{b['port']}" for b in brokers if broker is None or b["id"] == broker)


def admin(c: LocalCluster, broker: int | None = None) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(c, broker), "log_level": 0})


def grant(c: LocalCluster, rtype, name, ops, *, pattern=ResourcePatternType.LITERAL, permission=AclPermissionType.ALLOW) -> None:
    bindings = [AclBinding(rtype, name, pattern, ANON, "*", op, permission) for op in ops]
    a = admin(c)
    for f in a.create_acls(bindings, request_timeout=20).values():
        assert f.result(timeout=30) is None


def revoke(c: LocalCluster, rtype, name, op, *, pattern=ResourcePatternType.LITERAL) -> list:
    flt = AclBindingFilter(rtype, name, pattern, ANON, None, op, AclPermissionType.ANY)
    a = admin(c)
    return [b for f in a.delete_acls([flt], request_timeout=20).values() for b in f.result(timeout=30)]


def eventually(check, what: str, timeout_s: float = PROPAGATION_S):
    deadline = time.monotonic() + timeout_s
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.1)


def visible_on(c: LocalCluster, broker: int, topic: str) -> bool | None:
    """Whether the broker's Metadata lists the topic; None when it did not answer in time
    (a busy machine): the callers ask again."""
    try:
        return topic in admin(c, broker).list_topics(timeout=10).topics
    except KafkaException:
        return None


def produce(c: LocalCluster, topic: str, n: int) -> list:
    producer = Producer({"bootstrap.servers": bootstrap(c), "acks": "all", "message.timeout.ms": 10000, "log_level": 0})
    errors = []
    for i in range(n):
        producer.produce(topic, value=f"m{i}".encode(), on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    return errors


def test_create_topic_needs_create_and_a_prefixed_acl_grants_it(secured):
    a = admin(secured)
    futures = a.create_topics([NewTopic("app-denied", num_partitions=1, replication_factor=3)])
    with pytest.raises(KafkaException) as refused:
        futures["app-denied"].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    grant(secured, ResourceType.TOPIC, "app-", [AclOperation.CREATE, AclOperation.DESCRIBE], pattern=ResourcePatternType.PREFIXED)

    def created() -> bool:
        a = admin(secured)
        f = a.create_topics([NewTopic("app-orders", num_partitions=2, replication_factor=3)])["app-orders"]
        try:
            f.result(timeout=30)
            return True
        except KafkaException as e:
            if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return True
            assert e.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, e
            return False

    eventually(created, "Create on the prefix app- reaches the broker that handles CreateTopics")
    # the prefix covers app-*, not other names
    with pytest.raises(KafkaException) as other:
        a.create_topics([NewTopic("web-orders", num_partitions=1, replication_factor=3)])["web-orders"].result(timeout=30)
    assert other.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_read_allowed_write_denied_then_granted_and_revoked_without_restart(secured):
    topic = "app-orders"
    eventually(lambda: all(visible_on(secured, b, topic) for b in (1, 2, 3)), "app-orders is visible everywhere")
    # only Create and Describe so far: produce is refused per partition
    errors = produce(secured, topic, 3)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3, errors

    grant(secured, ResourceType.TOPIC, topic, [AclOperation.WRITE])
    eventually(lambda: produce(secured, topic, 1) == [None], "Write on app-orders applies")
    assert produce(secured, topic, 9) == [None] * 9

    # consume: Read on the topic and on the group are both needed
    grant(secured, ResourceType.TOPIC, topic, [AclOperation.READ])
    group = f"app-consumers-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": bootstrap(secured), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        refusal = None
        deadline = time.monotonic() + 20
        while refusal is None and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is not None:
                refusal = msg.error()
        assert refusal is not None and refusal.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, refusal
    finally:
        consumer.close()

    grant(secured, ResourceType.GROUP, group, [AclOperation.READ])
    consumer = Consumer({"bootstrap.servers": bootstrap(secured), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    got = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == sorted([b"m0"] + [f"m{i}".encode() for i in range(9)])

    # revoking Write applies on every broker without a restart
    removed = revoke(secured, ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert [(b.name, b.operation) for b in removed] == [(topic, AclOperation.WRITE)]
    eventually(lambda: [e and e.code() for e in produce(secured, topic, 1)] == [KafkaError.TOPIC_AUTHORIZATION_FAILED],
               "the revoked Write applies")


def test_kafka_python_idempotent_producer_needs_write_somewhere_then_consumes(secured):
    """kafka-python 3 is idempotent by default: its InitProducerId needs IdempotentWrite on
    the cluster or, since KIP-679, Write on some topic; Write on app-orders was revoked."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError as KafkaPythonError

    boot = bootstrap(secured)
    producer = KafkaProducer(bootstrap_servers=boot, acks="all", max_block_ms=10000, request_timeout_ms=10000)
    try:
        with pytest.raises(KafkaPythonError, match="Error 31.*ClusterAuthorizationFailed"):
            producer.send("app-orders", b"refused").get(timeout=20)
    finally:
        producer.close(timeout=5)
    grant(secured, ResourceType.TOPIC, "app-orders", [AclOperation.WRITE])

    def sent() -> bool:
        p = KafkaProducer(bootstrap_servers=boot, acks="all", max_block_ms=10000, request_timeout_ms=10000)
        try:
            p.send("app-orders", b"kp", partition=0).get(timeout=20)
            return True
        except KafkaPythonError:
            return False
        finally:
            p.close(timeout=5)

    eventually(sent, "kafka-python produces once Write is granted", timeout_s=30)
    consumer = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        tp = TopicPartition("app-orders", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen = next((m.offset for m in consumer if m.value == b"kp"), None)  # (stops after 10 s without records)
    finally:
        consumer.close()
    assert seen is not None
    revoke(secured, ResourceType.TOPIC, "app-orders", AclOperation.WRITE)


def test_metadata_hides_topics_without_describe_on_every_broker(secured):
    topic = "zz-hidden"
    grant(secured, ResourceType.TOPIC, topic, [AclOperation.CREATE])  # Create implies nothing else
    eventually(lambda: _create(secured, topic), "Create on zz-hidden applies")
    for b in (1, 2, 3):
        assert topic not in admin(secured, b).list_topics(timeout=10).topics
    grant(secured, ResourceType.TOPIC, topic, [AclOperation.DESCRIBE])
    for b in (1, 2, 3):
        eventually(lambda b=b: visible_on(secured, b, topic), f"Describe on {topic} reaches broker {b}")
    # Deny beats Allow: a Deny of Describe for every principal hides it again everywhere
    grant(secured, ResourceType.TOPIC, topic, [AclOperation.DESCRIBE], permission=AclPermissionType.DENY)
    for b in (1, 2, 3):
        eventually(lambda b=b: visible_on(secured, b, topic) is False, f"the Deny reaches broker {b}")


def _create(c: LocalCluster, topic: str) -> bool:
    try:
        a = admin(c)
        a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(timeout=30)
        return True
    except KafkaException as e:
        return e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_describe_acls_filters_match_and_prefixed(secured):
    a = admin(secured)
    match = AclBindingFilter(ResourceType.TOPIC, "app-orders", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    found = a.describe_acls(match, request_timeout=20).result(timeout=30)
    patterns = {(b.name, b.resource_pattern_type) for b in found}
    assert patterns == {("app-orders", ResourcePatternType.LITERAL), ("app-", ResourcePatternType.PREFIXED)}
    prefixed = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.PREFIXED, None, None, AclOperation.ANY, AclPermissionType.ANY)
    assert {(b.name, b.operation) for b in a.describe_acls(prefixed, request_timeout=20).result(timeout=30)} == {
        ("app-", AclOperation.CREATE), ("app-", AclOperation.DESCRIBE)}
    # an ACL that cannot be stored is refused with a reason
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, ANON, "*", AclOperation.ALTER,
                     AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        list(a.create_acls([bad], request_timeout=20).values())[0].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_acls_cli_add_list_remove(secured):
    boot = bootstrap(secured)
    out = ok("acls", "add", "--allow", "--principal", "User:alice", "--operation", "Read", "--operation", "describe",
             "--group", "cli-", "--prefixed", boot=boot)
    assert out.count("added: Allow User:alice") == 2
    ok("acls", "add", "--deny", "--principal", "User:alice", "--host", "10.0.0.9", "--operation", "Write", "--topic", "cli-t", boot=boot)
    listed = json.loads(ok("acls", "list", "--principal", "User:alice", "--json", boot=boot))["acls"]
    assert {(a["resource_type"], a["pattern_type"], a["name"], a["operation"], a["permission"], a["host"]) for a in listed} == {
        ("Group", "PREFIXED", "cli-", "Read", "Allow", "*"), ("Group", "PREFIXED", "cli-", "Describe", "Allow", "*"),
        ("Topic", "LITERAL", "cli-t", "Write", "Deny", "10.0.0.9")}
    table = ok("acls", "list", "--group", "cli-x", "--match", boot=boot)
    assert "2 ACLs" in table and "cli-" in table and "User:alice" in table
    failed_with("--all-resources", "acls", "remove", "--principal", "User:alice", boot=boot, code=2)
    removed = ok("acls", "remove", "--group", "cli-", "--prefixed", "--operation", "Read", boot=boot)
    assert "removed 1 ACL" in removed
    left = json.loads(ok("acls", "list", "--principal", "User:alice", "--json", boot=boot))["acls"]
    assert sorted(a["operation"] for a in left) == ["Describe", "Write"]
    failed_with("INVALID_REQUEST", "acls", "add", "--allow", "--principal", "User:alice", "--operation", "Read",
                "--topic", "a/b", boot=boot)


def test_forged_inter_broker_frames_are_refused_and_the_broker_keeps_serving(secured):
    """The cluster launcher gave the brokers a secret: a LeaderAndIsr without the handshake,
    or with a wrong secret, never reaches the handler; the right secret is served."""
    b = secured.status()["brokers"][1]
    secret = secured.inter_broker_secret()
    assert secret is not None and len(secret) >= 16

    def broker_log() -> str:
        with open(b["log"]) as f:
            return f.read()

    async def call(with_secret: bytes | None) -> dict:
        client = RpcClient(b["host"], b["inter_broker_port"], sender=999, secret=with_secret)
        try:
            header, _ = await client.call("LeaderAndIsr", {"controller_id": 999, "controller_epoch": 0, "broker_epoch": -1,
                                                           "partitions": [["app-orders", 0, 999, 10**6, [999], 10**6, [999]]]},
                                          timeout_ms=5000)
            return dict(header)
        finally:
            await client.close()

    with pytest.raises(RpcError):
        asyncio.run(call(None))
    with pytest.raises(RpcError, match="authentication"):
        asyncio.run(call(b"not-the-cluster-secret-at-all"))
    eventually(lambda: broker_log().count("authentication failed") >= 2, "the broker logs both refusals")
    # with the cluster's secret the same frame is handled, and refused on its merits (a
    # controller epoch older than the broker has seen: harmless by construction)
    assert asyncio.run(call(secret))["error"] == 11  # STALE_CONTROLLER_EPOCH
    # nothing changed: the partition still has its leader and clients are served
    md = admin(secured).list_topics("app-orders", timeout=10).topics["app-orders"]
    assert all(p.leader in (1, 2, 3) for p in md.partitions.values())
    assert b["id"] in {x.id for x in admin(secured, b["id"]).list_topics(timeout=10).brokers.values()}


def test_an_unauthenticated_zookeeper_client_reads_but_cannot_write_the_cluster(secured):
    connect = secured.status()["zookeeper"]["connect"]
    anon = KazooClient(hosts=connect, timeout=5)
    anon.start(timeout=10)
    try:
        assert sorted(json.loads(anon.get("/brokers/topics/app-orders")[0])["partitions"]) == ["0", "1"]  # readable
        assert anon.get_children("/brokers/ids") == ["1", "2", "3"]
        state = "/brokers/topics/app-orders/partitions/0/state"
        data, stat = anon.get(state)
        for attempt in (
            lambda: anon.set(state, b'{"leader": 99}', version=stat.version),
            lambda: anon.delete(state),
            lambda: anon.create("/admin/delete_topics/app-orders", b"{}", makepath=True),
            lambda: anon.create("/kafka-acl/Topic/app-evil", b'{"version":1,"acls":[]}'),
            lambda: anon.set("/kafka-acl/Cluster/kafka-cluster", b'{"version":1,"acls":[]}'),
            lambda: anon.create("/brokers/ids/7", b"{}", ephemeral=True),
            lambda: anon.delete("/controller"),
        ):
            with pytest.raises(NoAuthError):
                attempt()
        assert anon.get(state)[0] == data
    finally:
        anon.stop()
        anon.close()
    # the cluster's own identity (what brokers and admin tools use) may write
    owner = make_client(connect, 5, secured.zk_security())
    owner.start(timeout=10)
    try:
        owner.create("/cluster/probe", b"x")
        owner.delete("/cluster/probe")
    finally:
        owner.stop()
        owner.close()
    # and the brokers still work: a produce that needs every replica (acks=all, RF 3)
    grant(secured, ResourceType.TOPIC, "app-orders", [AclOperation.WRITE])
    eventually(lambda: produce(secured, "app-orders", 1) == [None], "produce to app-orders")


def test_without_cluster_alter_acl_apis_are_refused(secured):
    """The last test: it removes the bootstrap ACL's Alter on the cluster."""
    removed = revoke(secured, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    assert len(removed) == 1

    def refused() -> bool:
        try:
            grant(secured, ResourceType.TOPIC, "x", [AclOperation.READ])
            return False
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, e
            return True

    eventually(refused, "CreateAcls refused without Alter on the cluster")
