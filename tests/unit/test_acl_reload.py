"""The broker's ACL cache follows ZooKeeper's change notifications
(kafkalite.broker.authorization.AclAuthorizer): what one bad ACL znode does to a reload.
ZooKeeper is a dict standing in for the adapter."""

from __future__ import annotations

import asyncio

from kafkalite.broker.authorization import AclAuthorizer
from kafkalite.core.acl import AccessControlEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType
from kafkalite.zk import acl_store
from kafkalite.zk.acl_store import LITERAL_CHANGES, AclStore

ALLOW_READ = AccessControlEntry("User:alice", "*", Operation.READ, Permission.ALLOW)


class FakeZk:
    def __init__(self, data: dict[str, bytes]):
        self.data = data

    def get(self, path):
        return (self.data[path], None) if path in self.data else None

    def get_children(self, path):
        return sorted(p[len(path) + 1:] for p in self.data if p.startswith(path + "/") and "/" not in p[len(path) + 1:])

    def get_many(self, paths):
        return {p: self.get(p) for p in paths}


def topic(name: str) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL)


async def test_a_bad_acl_znode_grants_nothing_and_the_rest_of_the_batch_is_still_reloaded():
    # Alice's Read on 'a' and 'b' are revoked: 'a' by an ACL znode that is not JSON any more,
    # 'b' by deleting its znode. The reload died on 'a' (JSONDecodeError), so the revoked
    # Allow on 'b' (or on 'a') could stay in the cache.
    authz = AclAuthorizer({"super.users": "", "allow.everyone.if.no.acl.found": False})
    authz.cache.replace_all({topic("a"): {ALLOW_READ}, topic("b"): {ALLOW_READ}, topic("c"): {ALLOW_READ}})
    authz.store = AclStore(FakeZk({
        "/kafka-acl/Topic/a": b"[]",
        "/kafka-acl/Topic/c": acl_store.encode_entries({ALLOW_READ}),
        f"{LITERAL_CHANGES}/acl_changes_0000000001": b"Topic:a",
        f"{LITERAL_CHANGES}/acl_changes_0000000002": b"Topic:b",
    }))
    full_reloads = []
    authz.store.read_all = lambda: full_reloads.append(1) or {}  # type: ignore[method-assign]
    await asyncio.wait_for(authz._reload_until_done(LITERAL_CHANGES, ["acl_changes_0000000001", "acl_changes_0000000002"]), 5)
    assert not full_reloads  # the bad znode is not taken for a ZooKeeper failure (retried with every ACL)
    assert authz.cache.get(topic("a")) == frozenset()
    assert authz.cache.get(topic("b")) == frozenset()
    assert authz.cache.get(topic("c")) == {ALLOW_READ}
    assert authz.reloads == 1


def test_reading_every_acl_leaves_out_a_bad_znode_and_reads_the_others():
    store = AclStore(FakeZk({
        "/kafka-acl/Topic/a": b"{",
        "/kafka-acl/Topic/c": acl_store.encode_entries({ALLOW_READ}),
        "/kafka-acl-extended/prefixed/Group/g-": acl_store.encode_entries({ALLOW_READ}),
    }))
    assert store.read_all() == {topic("c"): {ALLOW_READ},
                                ResourcePattern(ResourceType.GROUP, "g-", PatternType.PREFIXED): {ALLOW_READ}}
