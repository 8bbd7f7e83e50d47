"""ACLs in a real ZooKeeper (kafkalite.zk.acl_store): Kafka's znodes, concurrent writers
losing nothing, change notifications and their expiry."""

from __future__ import annotations

import json
import threading

from kafkalite.core.acl import AccessControlEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType
from kafkalite.zk import ZkAdapter
from kafkalite.zk.acl_store import CHANGE_RETENTION_MS, EXTENDED_CHANGES, LITERAL_CHANGES, AclStore, decode_change


def entry(principal: str, op: Operation = Operation.READ) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", op, Permission.ALLOW)


def test_concurrent_adds_lose_nothing_and_each_change_is_notified(zk_client_factory):
    stores = [AclStore(ZkAdapter(zk_client_factory())) for _ in range(4)]
    stores[0].ensure_paths()
    pattern = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)

    def add(store: AclStore, i: int) -> None:
        for j in range(10):
            new = entry(f"User:u{i}-{j}")
            store.update(pattern, lambda old, e=new: old | {e})

    threads = [threading.Thread(target=add, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stores[0].read(pattern) == {entry(f"User:u{i}-{j}") for i in range(4) for j in range(10)}
    raw = json.loads(stores[0].zk.get("/kafka-acl/Topic/orders")[0])
    assert raw["version"] == 1 and len(raw["acls"]) == 40
    notes = stores[0].zk.get_children(LITERAL_CHANGES)
    assert len(notes) == 40 and all(n.startswith("acl_changes_") for n in notes)
    assert {decode_change(LITERAL_CHANGES, stores[0].zk.get(f"{LITERAL_CHANGES}/{n}")[0]) for n in notes} == {pattern}


def test_prefixed_acls_removal_and_notification_expiry(zk_client):
    store = AclStore(ZkAdapter(zk_client))
    store.ensure_paths()
    pre = ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED)
    store.update(pre, lambda old: old | {entry("User:a"), entry("User:b", Operation.DESCRIBE)})
    assert store.zk.get("/kafka-acl-extended/prefixed/Group/app-") is not None
    assert store.read_all() == {pre: {entry("User:a"), entry("User:b", Operation.DESCRIBE)}}
    store.update(pre, lambda old: frozenset())  # emptied: the znode goes
    assert store.zk.get("/kafka-acl-extended/prefixed/Group/app-") is None
    assert store.read_all() == {}
    assert len(store.zk.get_children(EXTENDED_CHANGES)) == 2
    newest_ctime = max(store.zk.get(f"{EXTENDED_CHANGES}/{n}")[1].ctime for n in store.zk.get_children(EXTENDED_CHANGES))
    assert store.purge_changes(newest_ctime + 1000) == 0  # young ones stay
    assert store.purge_changes(newest_ctime + CHANGE_RETENTION_MS + 1) == 2
    assert store.zk.get_children(EXTENDED_CHANGES) == []
