"""ACLs in ZooKeeper, laid out as Kafka's AclAuthorizer lays them out (so Kafka's tools
and kafkalite read each other's ACLs):

- LITERAL patterns: /kafka-acl/<ResourceType>/<name>
- PREFIXED patterns: /kafka-acl-extended/prefixed/<ResourceType>/<name>
- value: {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}, ...]}
- after each change, a sequential change notification: /kafka-acl-changes/acl_changes_N
  (LITERAL; value "Topic:name") or /kafka-acl-extended-changes/acl_changes_N (PREFIXED;
  value {"version":1,"resourceType":"Topic","name":"x","patternType":"Prefixed"}); every
  broker watches both and re-reads the named pattern.

Updates are read-modify-write conditional on the znode version (retried when another
writer won), so two brokers adding ACLs to one resource at once lose neither.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable

from kafkalite.core.acl import (
    OPERATION_BY_NAME,
    OPERATION_NAMES,
    PERMISSION_BY_NAME,
    PERMISSION_NAMES,
    RESOURCE_TYPE_BY_NAME,
    RESOURCE_TYPE_NAMES,
    AccessControlEntry,
    PatternType,
    ResourcePattern,
)
from kafkalite.zk.errors import StaleZnodeVersionError, ZkContentionError, ZnodeDecodeError, ZnodeExistsError, ZnodeNotFoundError
from kafkalite.zk.kazoo_errors import calls

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
ACL_PATHS = (LITERAL_ROOT, PREFIXED_ROOT, LITERAL_CHANGES, EXTENDED_CHANGES)
CHANGE_RETENTION_MS = 15 * 60 * 1000  # Kafka's acl change notification expiry
RETRIES_MAX = 100


def _root(pattern_type: PatternType) -> str:
    return LITERAL_ROOT if pattern_type == PatternType.LITERAL else PREFIXED_ROOT


def acl_path(p: ResourcePattern) -> str:
    assert p.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
    assert "/" not in p.name
    return f"{_root(p.pattern_type)}/{RESOURCE_TYPE_NAMES[p.resource_type]}/{p.name}"


def encode_entries(entries: Iterable[AccessControlEntry]) -> bytes:
    acls = [{"principal": e.principal, "permissionType": PERMISSION_NAMES[e.permission],
             "operation": OPERATION_NAMES[e.operation], "host": e.host} for e in sorted(entries)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(data: bytes, path: str) -> frozenset[AccessControlEntry]:
    """The entries of the ACL znode at `path`. ZnodeDecodeError when it is not Kafka's
    document ({"version":1,"acls":[...]}, e.g. `[]` or a truncated `{`); a malformed entry
    inside one is skipped with a log line, the others kept."""
    if not data:
        return frozenset()
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: "[[[[..." nested past the limit
        raise ZnodeDecodeError(path, f"not JSON ({type(e).__name__})") from None
    acls = doc.get("acls") if isinstance(doc, dict) else None
    if not isinstance(acls, list):
        raise ZnodeDecodeError(path, f'expected {{"version":1,"acls":[...]}}, got {doc!r:.200}')
    out = set()
    for a in acls:
        try:
            if not isinstance(a["principal"], str) or not isinstance(a["host"], str):
                raise TypeError("principal and host must be strings")
            out.add(AccessControlEntry(principal=a["principal"], host=a["host"], operation=OPERATION_BY_NAME[a["operation"]],
                                       permission=PERMISSION_BY_NAME[a["permissionType"]]))
        except (KeyError, TypeError):
            log.warning("skipping a malformed ACL entry %r in %s", a, path)
    return frozenset(out)


def encode_change(p: ResourcePattern) -> tuple[str, bytes]:
    """(the change notification's parent, its value) for a change of pattern p."""
    if p.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{RESOURCE_TYPE_NAMES[p.resource_type]}:{p.name}".encode()
    doc = {"version": 1, "resourceType": RESOURCE_TYPE_NAMES[p.resource_type], "name": p.name, "patternType": "Prefixed"}
    return EXTENDED_CHANGES, json.dumps(doc, separators=(",", ":")).encode()


def decode_change(parent: str, data: bytes) -> ResourcePattern | None:
    try:
        if parent == LITERAL_CHANGES:
            kind, _, name = data.decode().partition(":")
            return ResourcePattern(RESOURCE_TYPE_BY_NAME[kind], name, PatternType.LITERAL)
        doc = json.loads(data.decode())
        pattern_type = PatternType.PREFIXED if doc["patternType"].upper() == "PREFIXED" else PatternType.LITERAL
        return ResourcePattern(RESOURCE_TYPE_BY_NAME[doc["resourceType"]], doc["name"], pattern_type)
    except (KeyError, ValueError, AttributeError):
        return None


class AclStore:
    """ACL reads and writes over a ZkAdapter (blocking: call it from an executor)."""

    def __init__(self, zk) -> None:  # zk: kafkalite.zk.ZkAdapter
        self.zk = zk

    def ensure_paths(self) -> None:
        for path in ACL_PATHS:
            self.zk.ensure_path(path)
        for root in (LITERAL_ROOT, PREFIXED_ROOT):
            for name in RESOURCE_TYPE_NAMES.values():
                self.zk.ensure_path(f"{root}/{name}")

    def read(self, p: ResourcePattern) -> frozenset[AccessControlEntry]:
        """p's entries; ZnodeDecodeError if its znode is unreadable."""
        path = acl_path(p)
        got = self.zk.get(path)
        return decode_entries(got[0], path) if got else frozenset()

    def read_all(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every pattern's entries. An unreadable znode is logged and left out: its pattern
        has no ACLs (it grants nothing) until it is fixed, and the others are all read."""
        out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for kind, name in RESOURCE_TYPE_NAMES.items():
                parent = f"{_root(pattern_type)}/{name}"
                children = self.zk.get_children(parent) or []
                found = self.zk.get_many([f"{parent}/{c}" for c in children])
                for c in children:
                    got = found.get(f"{parent}/{c}")
                    if got is not None:
                        try:
                            entries = decode_entries(got[0], f"{parent}/{c}")
                        except ZnodeDecodeError as e:
                            log.error("%s; enforcing no ACLs of that pattern until it is fixed", e)
                            continue
                        if entries:
                            out[ResourcePattern(kind, c, pattern_type)] = entries
        return out

    def update(self, p: ResourcePattern, change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]) -> frozenset[AccessControlEntry]:
        """Apply `change` to p's entries (conditional write, retried when another writer
        won), then notify every broker; the entries now stored. An emptied pattern's znode
        is deleted."""
        path = acl_path(p)
        for _ in range(RETRIES_MAX):
            got = self.zk.get(path)
            old = decode_entries(got[0], path) if got else frozenset()
            new = frozenset(change(old))
            if new == old:
                return new
            try:
                if got is None:
                    self.zk.create(path, encode_entries(new), makepath=True)
                elif new:
                    self.zk.conditional_set(path, encode_entries(new), got[1].version)
                else:
                    with calls(path, got[1].version):
                        self.zk.client.delete(path, version=got[1].version)
            except (StaleZnodeVersionError, ZnodeExistsError, ZnodeNotFoundError):
                continue
            self.notify(p)
            return new
        raise ZkContentionError(f"{path}: {RETRIES_MAX} conditional writes lost to other writers")

    def notify(self, p: ResourcePattern) -> None:
        parent, data = encode_change(p)
        with calls(parent):
            self.zk.client.create(f"{parent}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)

    def purge_changes(self, now_ms: int) -> int:
        """Delete change notifications older than CHANGE_RETENTION_MS (every broker
        reloads on start, so only brokers running now need them); how many went."""
        gone = 0
        for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
            for c in self.zk.get_children(parent) or []:
                got = self.zk.get(f"{parent}/{c}")
                if got is not None and now_ms - got[1].ctime > CHANGE_RETENTION_MS:
                    self.zk.delete_if_exists(f"{parent}/{c}")
                    gone += 1
        return gone
