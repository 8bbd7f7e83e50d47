"""ZooKeeper credentials and znode ACLs (kafkalite.zk.security) and the ACL store's znode
formats (kafkalite.zk.acl_store, Kafka's layout): pure parts, no ZooKeeper."""

from __future__ import annotations

import json

import pytest
from kazoo.security import Permissions

from kafkalite.core.acl import AccessControlEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType
from kafkalite.zk import acl_store
from kafkalite.zk.errors import ZnodeDecodeError
from kafkalite.zk.security import ZkSecurity, make_client, security_from


def test_credentials_from_keys_or_file(tmp_path):
    assert security_from(False, "", "", "") == ZkSecurity()
    assert security_from(True, "kafka", "pw", "") == ZkSecurity("kafka", "pw", True)
    f = tmp_path / "digest"
    f.write_text("kafka:s3cret\n")
    assert security_from(True, "", "", str(f)) == ZkSecurity("kafka", "s3cret", True)
    for args, why in (((True, "", "", ""), "needs credentials"), ((False, "kafka", "", ""), "go together"),
                      ((True, "kafka", "pw", str(f)), "not both"), ((True, "", "", str(tmp_path / "none")), "No such file")):
        with pytest.raises(ValueError, match=why):
            security_from(*args)
    f.write_text("no-colon\n")
    with pytest.raises(ValueError, match="user:password"):
        security_from(True, "", "", str(f))


def test_znode_acls_are_owner_all_and_world_read_except_sensitive_paths():
    assert ZkSecurity("kafka", "pw", set_acl=False).acl_for("/brokers") is None  # authenticate only
    acl = ZkSecurity("kafka", "pw", set_acl=True).acl_for("/brokers/topics/t")
    assert [(a.id.scheme, a.perms) for a in acl] == [("digest", Permissions.ALL), ("world", Permissions.READ)]
    assert acl[0].id.id.startswith("kafka:")
    assert "pw" not in acl[0].id.id  # the digest, never the password
    sensitive = ZkSecurity("kafka", "pw", set_acl=True).acl_for("/config/users/alice")
    assert [a.id.scheme for a in sensitive] == ["digest"]


def test_the_client_factory_carries_auth_and_default_acl():
    client = make_client("127.0.0.1:1", 1.0, ZkSecurity("kafka", "pw", True))
    assert client.auth_data == {("digest", "kafka:pw")}
    assert [a.id.scheme for a in client.default_acl] == ["digest", "world"]
    plain = make_client("127.0.0.1:1", 1.0, ZkSecurity())
    assert not plain.auth_data and plain.default_acl is None


def test_acl_znodes_in_kafkas_layout():
    lit = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    pre = ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED)
    assert acl_store.acl_path(lit) == "/kafka-acl/Topic/orders"
    assert acl_store.acl_path(pre) == "/kafka-acl-extended/prefixed/Group/app-"
    entries = {AccessControlEntry("User:alice", "*", Operation.READ, Permission.ALLOW),
               AccessControlEntry("User:bob", "10.0.0.1", Operation.IDEMPOTENT_WRITE, Permission.DENY)}
    data = acl_store.encode_entries(entries)
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "IdempotentWrite", "host": "10.0.0.1"}]}
    assert acl_store.decode_entries(data, "/kafka-acl/Topic/orders") == entries
    # a hand-written bad entry is skipped, the rest kept
    bad = b'{"version":1,"acls":[{"principal":"User:x","permissionType":"Maybe","operation":"Read","host":"*"},' \
          b'{"principal":"User:y","permissionType":"Allow","operation":"Write","host":"*"}]}'
    assert acl_store.decode_entries(bad, "/kafka-acl/Topic/orders") == {AccessControlEntry("User:y", "*", Operation.WRITE, Permission.ALLOW)}
    for pattern in (lit, pre):
        parent, note = acl_store.encode_change(pattern)
        assert acl_store.decode_change(parent, note) == pattern
    assert acl_store.encode_change(lit) == ("/kafka-acl-changes", b"Topic:orders")
    assert acl_store.decode_change("/kafka-acl-changes", b"Nonsense:x") is None


@pytest.mark.parametrize("data", [b"[]", b"{", b"\xff", b'"acls"', b'{"version":1,"acls":3}', b"[" * 100_000])
def test_an_acl_znode_that_is_not_kafkas_document_is_a_typed_decode_error(data):
    with pytest.raises(ZnodeDecodeError, match="/kafka-acl/Topic/orders"):
        acl_store.decode_entries(data, "/kafka-acl/Topic/orders")


def test_acl_entries_whose_principal_or_host_is_not_a_string_are_skipped():
    data = json.dumps({"version": 1, "acls": [
        {"principal": 7, "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:y", "permissionType": "Allow", "operation": "Read", "host": ["*"]},
        {"principal": "User:z", "permissionType": "Allow", "operation": "Read", "host": "*"}]}).encode()
    assert acl_store.decode_entries(data, "/kafka-acl/Topic/t") == {AccessControlEntry("User:z", "*", Operation.READ, Permission.ALLOW)}
