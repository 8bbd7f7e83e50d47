"""kafkalite.broker.authorization.RequestAuthorizer with a recording handler: what reaches
the handler, what is answered with which error, per API (the REQUIRED table)."""

from __future__ import annotations

import pytest

from kafkalite.broker.authorization import REQUIRED, AclAuthorizer, RequestAuthorizer
from kafkalite.broker.client_listener import ConnectionState, current_connection
from kafkalite.core.acl import CLUSTER_NAME, AccessControlEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType
from kafkalite.protocol.codec import RequestHeader, encode_response
from kafkalite.protocol.errors import ErrorCode, KafkaliteError
from kafkalite.protocol.schema import SUPPORTED_VERSIONS, ApiKey

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALICE = "User:alice"


def make(*grants: tuple[ResourceType, str, Operation], principal: str = ALICE, existing: tuple[str, ...] = (),
         auto_create: bool = True) -> RequestAuthorizer:
    authz = AclAuthorizer({"super.users": "User:admin", "allow.everyone.if.no.acl.found": False})
    by: dict = {}
    for rt, name, op in grants:
        pattern_type = PatternType.PREFIXED if name.endswith("-") else PatternType.LITERAL
        by.setdefault(ResourcePattern(rt, name, pattern_type), set()).add(AccessControlEntry(principal, "*", op, Permission.ALLOW))
    authz.cache.replace_all(by)
    current_connection.set(ConnectionState("PLAINTEXT", "127.0.0.1", ALICE))
    return RequestAuthorizer(authz, topic_exists=lambda name: name in existing, auto_create_enabled=lambda: auto_create)


class Recorder:
    def __init__(self, response):
        self.response = response
        self.bodies: list[dict] = []

    async def __call__(self, header, body):
        self.bodies.append(body)
        return self.response(body)


def header(api: ApiKey, version: int | None = None) -> RequestHeader:
    return RequestHeader(int(api), SUPPORTED_VERSIONS[api][1] if version is None else version, 1, "test")


def test_every_api_has_an_entry_in_the_table():
    assert set(REQUIRED) == set(SUPPORTED_VERSIONS)


async def test_produce_keeps_allowed_topics_and_answers_the_rest_topic_authorization_failed():
    ra = make((T, "orders", Operation.WRITE))
    h = header(ApiKey.PRODUCE)
    rec = Recorder(lambda b: {"responses": [{"name": t["name"], "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time_ms": -1, "log_start_offset": 0}]} for t in b["topic_data"]],
        "throttle_time_ms": 0})
    body = {"acks": -1, "timeout_ms": 1000, "transactional_id": None, "topic_data": [
        {"name": "orders", "partition_data": [{"index": 0, "records": b""}]},
        {"name": "secret", "partition_data": [{"index": 0, "records": b""}, {"index": 1, "records": b""}]}]}
    resp = await ra.handle(h, body, rec)
    assert [t["name"] for t in rec.bodies[0]["topic_data"]] == ["orders"]
    codes = {(t["name"], p["index"]): p["error_code"] for t in resp["responses"] for p in t["partition_responses"]}
    assert codes == {("orders", 0): 0, ("secret", 0): 29, ("secret", 1): 29}
    encode_response(h, resp)  # a well-formed response


async def test_group_apis_need_the_group_and_describe_configs_splits_topic_and_broker():
    ra = make((G, "app-", Operation.READ), (T, "t1", Operation.DESCRIBE_CONFIGS))
    rec = Recorder(lambda b: {"error_code": 0})
    await ra.handle(header(ApiKey.HEARTBEAT), {"group_id": "app-1", "generation_id": 1, "member_id": "m"}, rec)
    with pytest.raises(KafkaliteError) as refused:
        await ra.handle(header(ApiKey.HEARTBEAT), {"group_id": "other", "generation_id": 1, "member_id": "m"}, rec)
    assert refused.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    dc = Recorder(lambda b: {"throttle_time_ms": 0, "results": [
        {"error_code": 0, "error_message": None, "resource_type": r["resource_type"], "resource_name": r["resource_name"], "configs": []}
        for r in b["resources"]]})
    resp = await ra.handle(header(ApiKey.DESCRIBE_CONFIGS), {"resources": [
        {"resource_type": 2, "resource_name": "t1", "configuration_keys": None},
        {"resource_type": 2, "resource_name": "t2", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "1", "configuration_keys": None}]}, dc)
    assert {(r["resource_name"], r["error_code"]) for r in resp["results"]} == {("t1", 0), ("t2", 29), ("1", 31)}


async def test_cluster_apis_and_idempotent_producers():
    rec = Recorder(lambda b: {"throttle_time_ms": 0, "error_code": 0, "producer_id": 1, "producer_epoch": 0})
    with pytest.raises(KafkaliteError) as refused:
        await make().handle(header(ApiKey.INIT_PRODUCER_ID), {"transactional_id": None, "transaction_timeout_ms": 1}, rec)
    assert refused.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # KIP-679: Write on some topic is enough; so is IdempotentWrite on the cluster
    for grant in ((T, "orders", Operation.WRITE), (C, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE)):
        resp = await make(grant).handle(header(ApiKey.INIT_PRODUCER_ID), {"transactional_id": None, "transaction_timeout_ms": 1}, rec)
        assert resp["producer_id"] == 1
    with pytest.raises(KafkaliteError) as refused:
        await make((T, "orders", Operation.ALL)).handle(header(ApiKey.CREATE_ACLS), {"creations": []}, rec)
    assert refused.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_metadata_hides_all_topics_listing_and_refuses_named_ones():
    topics = ["pub-a", "priv-b"]
    ra = make((T, "pub-", Operation.DESCRIBE), existing=tuple(topics))

    def answer(b):
        names = topics if b.get("topics") is None else [t["name"] for t in b["topics"]]
        return {"throttle_time_ms": 0, "brokers": [], "cluster_id": "c", "controller_id": 1,
                "topics": [{"error_code": 0, "name": n, "is_internal": False, "partitions": []} for n in names]}

    rec = Recorder(answer)
    resp = await ra.handle(header(ApiKey.METADATA, 5), {"topics": None, "allow_auto_topic_creation": True}, rec)
    assert [t["name"] for t in resp["topics"]] == ["pub-a"]
    resp = await ra.handle(header(ApiKey.METADATA, 5), {"topics": [{"name": "pub-a"}, {"name": "priv-b"}],
                                                         "allow_auto_topic_creation": True}, rec)
    assert {(t["name"], t["error_code"]) for t in resp["topics"]} == {("pub-a", 0), ("priv-b", 29)}
    assert rec.bodies[-1]["topics"] == [{"name": "pub-a"}]


async def test_super_users_skip_every_check():
    ra = make()
    current_connection.set(ConnectionState("PLAINTEXT", "127.0.0.1", "User:admin"))
    rec = Recorder(lambda b: {"throttle_time_ms": 0, "responses": [{"name": n, "error_code": 0} for n in b["topic_names"]]})
    resp = await ra.handle(header(ApiKey.DELETE_TOPICS), {"topic_names": ["a", "b"], "timeout_ms": 1}, rec)
    assert [r["error_code"] for r in resp["responses"]] == [0, 0]


async def test_alter_configs_and_delete_records_are_checked_per_resource():
    ra = make((T, "t1", Operation.ALTER_CONFIGS), (T, "t1", Operation.DELETE))
    ac = Recorder(lambda b: {"throttle_time_ms": 0, "responses": [
        {"error_code": 0, "error_message": None, "resource_type": r["resource_type"], "resource_name": r["resource_name"]}
        for r in b["resources"]]})
    resp = await ra.handle(header(ApiKey.INCREMENTAL_ALTER_CONFIGS), {"validate_only": False, "resources": [
        {"resource_type": 2, "resource_name": "t1", "configs": []},
        {"resource_type": 2, "resource_name": "t2", "configs": []},
        {"resource_type": 4, "resource_name": "", "configs": []}]}, ac)
    assert {(r["resource_name"], r["error_code"]) for r in resp["responses"]} == {("t1", 0), ("t2", 29), ("", 31)}
    assert [r["resource_name"] for r in ac.bodies[0]["resources"]] == ["t1"]
    dr = Recorder(lambda b: {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "low_watermark": 3, "error_code": 0}
                                           for p in t["partitions"]]} for t in b["topics"]]})
    resp = await ra.handle(header(ApiKey.DELETE_RECORDS), {"timeout_ms": 1, "topics": [
        {"name": "t1", "partitions": [{"partition_index": 0, "offset": 3}]},
        {"name": "t2", "partitions": [{"partition_index": 0, "offset": 3}, {"partition_index": 1, "offset": 3}]}]}, dr)
    assert {(t["name"], p["partition_index"], p["error_code"]) for t in resp["topics"] for p in t["partitions"]} == {
        ("t1", 0, 0), ("t2", 0, 29), ("t2", 1, 29)}


async def test_offset_delete_needs_read_on_each_topic_and_answers_the_rest_per_partition():
    # Kafka's handleOffsetDeleteRequest: Delete on the group, then only the topics the
    # principal may Read; the others are answered TOPIC_AUTHORIZATION_FAILED per partition.
    ra = make((G, "g", Operation.DELETE), (T, "mine", Operation.READ))
    h = header(ApiKey.OFFSET_DELETE)
    rec = Recorder(lambda b: {"error_code": 0, "throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": 0} for p in t["partitions"]]}
        for t in b["topics"]]})
    body = {"group_id": "g", "topics": [
        {"name": "mine", "partitions": [{"partition_index": 0}]},
        {"name": "secret", "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]}
    resp = await ra.handle(h, body, rec)
    assert [t["name"] for t in rec.bodies[0]["topics"]] == ["mine"]
    assert resp["error_code"] == 0
    codes = {(t["name"], p["partition_index"]): p["error_code"] for t in resp["topics"] for p in t["partitions"]}
    assert codes == {("mine", 0): 0, ("secret", 0): 29, ("secret", 1): 29}
    encode_response(h, resp)
    with pytest.raises(KafkaliteError) as refused:  # Read on the topic is not enough without Delete on the group
        await make((T, "mine", Operation.READ)).handle(h, body, rec)
    assert refused.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def _metadata_answer(existing: tuple[str, ...]):
    """A handler that auto-creates missing topics when asked (auto.create.topics.enable on)."""
    def answer(b):
        created = b["allow_auto_topic_creation"]
        return {"throttle_time_ms": 0, "brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [
            {"error_code": 0 if t["name"] in existing or created else 3, "name": t["name"], "is_internal": False, "partitions": []}
            for t in b["topics"]]}
    return answer


async def test_metadata_decides_auto_creation_per_topic():
    # Create on 'a' only: 'a' is auto-created, 'b' (missing) is refused, 'old' (exists) is
    # served; one topic without Create no longer stops the others' creation.
    ra = make((T, "a", Operation.CREATE), (T, "a", Operation.DESCRIBE), (T, "b", Operation.DESCRIBE),
              (T, "old", Operation.DESCRIBE), existing=("old",))
    rec = Recorder(_metadata_answer(("old",)))
    resp = await ra.handle(header(ApiKey.METADATA, 9), {"topics": [{"name": "a"}, {"name": "b"}, {"name": "old"}],
                                                         "allow_auto_topic_creation": True}, rec)
    assert rec.bodies[0]["topics"] == [{"name": "a"}, {"name": "old"}]
    assert rec.bodies[0]["allow_auto_topic_creation"] is True
    assert {(t["name"], t["error_code"]) for t in resp["topics"]} == {("a", 0), ("b", 29), ("old", 0)}
    encode_response(header(ApiKey.METADATA, 9), resp)
    # Create on the cluster covers every topic
    ra = make((T, "b", Operation.DESCRIBE), (C, CLUSTER_NAME, Operation.CREATE))
    resp = await ra.handle(header(ApiKey.METADATA, 9), {"topics": [{"name": "b"}], "allow_auto_topic_creation": True},
                           Recorder(_metadata_answer(())))
    assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [("b", 0)]


@pytest.mark.parametrize("auto_create, asked", [(False, True), (True, False)])
async def test_metadata_without_auto_creation_answers_a_missing_topic_unknown_not_unauthorized(auto_create, asked):
    # Nothing would be created (auto.create.topics.enable off, or the client does not ask):
    # Kafka answers UNKNOWN_TOPIC_OR_PARTITION whatever the Create ACLs.
    ra = make((T, "b", Operation.DESCRIBE), auto_create=auto_create)
    rec = Recorder(lambda b: {"throttle_time_ms": 0, "brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [
        {"error_code": 3, "name": t["name"], "is_internal": False, "partitions": []} for t in b["topics"]]})
    resp = await ra.handle(header(ApiKey.METADATA, 9), {"topics": [{"name": "b"}], "allow_auto_topic_creation": asked}, rec)
    assert rec.bodies[0]["topics"] == [{"name": "b"}]
    assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [("b", 3)]
