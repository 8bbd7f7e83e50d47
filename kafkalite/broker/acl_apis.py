"""CreateAcls, DescribeAcls and DeleteAcls (v0-1, issue 15): wire bodies <-> the core's
ACL types, and the ZooKeeper writes through kafkalite.zk.acl_store.

Without an authorizer the three answer SECURITY_DISABLED, as Kafka does. Who may call them
(Alter or Describe on the cluster) is checked before, by kafkalite.broker.authorization.
DescribeAcls answers from this broker's cache (ZooKeeper's notifications keep it current);
CreateAcls and DeleteAcls write ZooKeeper, then update this broker's cache at once, so a
DescribeAcls on the same broker right after sees the change.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kafkalite.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    validate_binding,
)
from kafkalite.protocol.codec import RequestHeader
from kafkalite.protocol.errors import ErrorCode
from kafkalite.zk.errors import ZkError

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)

_DISABLED = "no authorizer is configured on this broker (authorizer.class.name)"


def _enum(enum: Any, value: int) -> Any:
    try:
        return enum(value)
    except ValueError:
        return enum.UNKNOWN


def binding_from_creation(c: dict[str, Any]) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, c["resource_type"]), c["resource_name"], _enum(PatternType, c.get("resource_pattern_type", 3))),
        AccessControlEntry(c["principal"], c["host"], _enum(Operation, c["operation"]), _enum(Permission, c["permission_type"])))


def filter_from_wire(f: dict[str, Any]) -> AclFilter:
    return AclFilter(resource_type=_enum(ResourceType, f["resource_type_filter"]), name=f["resource_name_filter"],
                     pattern_type=_enum(PatternType, f.get("pattern_type_filter", 3)), principal=f["principal_filter"],
                     host=f["host_filter"], operation=_enum(Operation, f["operation"]),
                     permission=_enum(Permission, f["permission_type"]))


def _v0_check(header: RequestHeader, pattern_type: PatternType) -> None:
    """v0 knows only LITERAL patterns (the field is absent and defaults to LITERAL)."""
    if header.api_version == 0 and pattern_type not in (PatternType.LITERAL, PatternType.ANY):
        raise InvalidAclError("version 0 supports only LITERAL patterns")


async def create_acls(broker: Broker, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    authz = broker.authorizer
    results = []
    for c in body["creations"]:
        if authz is None or authz.store is None:
            results.append({"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": _DISABLED})
            continue
        try:
            binding = binding_from_creation(c)
            validate_binding(binding)
        except InvalidAclError as e:
            results.append({"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": str(e)})
            continue
        store = authz.store
        try:
            entries = await asyncio.get_running_loop().run_in_executor(
                None, store.update, binding.pattern, lambda old, e=binding.entry: old | {e})
        except ZkError as e:
            results.append({"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR), "error_message": f"ZooKeeper: {e}"})
            continue
        authz.cache.set(binding.pattern, entries)
        log.info("ACL added: %s %s", binding.pattern, binding.entry)
        results.append({"error_code": 0, "error_message": None})
    return {"throttle_time_ms": 0, "results": results}


async def describe_acls(broker: Broker, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    authz = broker.authorizer

    def error(code: ErrorCode, message: str) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message, "resources": []}

    if authz is None:
        return error(ErrorCode.SECURITY_DISABLED, _DISABLED)
    try:
        flt = filter_from_wire(body)
        flt.validate()
        _v0_check(header, flt.pattern_type)
    except InvalidAclError as e:
        return error(ErrorCode.INVALID_REQUEST, str(e))
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in authz.cache.bindings():
        if flt.matches(b) and (header.api_version > 0 or b.pattern.pattern_type == PatternType.LITERAL):
            by_pattern.setdefault(b.pattern, []).append(b.entry)
    resources = [{"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
                  "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation), "permission_type": int(e.permission)}
                           for e in entries]}
                 for p, entries in sorted(by_pattern.items())]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": resources}


async def delete_acls(broker: Broker, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    """Each filter deletes every stored ACL it matches, read from ZooKeeper (not the cache)
    so that an ACL another broker added a moment ago is not missed."""
    authz = broker.authorizer
    loop = asyncio.get_running_loop()
    out = []
    for f in body["filters"]:
        if authz is None or authz.store is None:
            out.append({"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": _DISABLED, "matching_acls": []})
            continue
        try:
            flt = filter_from_wire(f)
            flt.validate()
            _v0_check(header, flt.pattern_type)
        except InvalidAclError as e:
            out.append({"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": str(e), "matching_acls": []})
            continue
        store = authz.store
        try:
            stored = await loop.run_in_executor(None, store.read_all)
            matched: list[AclBinding] = []
            for pattern in sorted(p for p in stored if flt.matches_pattern(p)):
                if header.api_version == 0 and pattern.pattern_type != PatternType.LITERAL:
                    continue
                removed: list[AccessControlEntry] = []

                def change(old: frozenset[AccessControlEntry], removed: list = removed, flt: AclFilter = flt) -> frozenset[AccessControlEntry]:
                    removed[:] = sorted(e for e in old if flt.matches_entry(e))
                    return frozenset(e for e in old if not flt.matches_entry(e))

                entries = await loop.run_in_executor(None, store.update, pattern, change)
                authz.cache.set(pattern, entries)
                matched += [AclBinding(pattern, e) for e in removed]
        except ZkError as e:
            out.append({"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR), "error_message": f"ZooKeeper: {e}", "matching_acls": []})
            continue
        for b in matched:
            log.info("ACL removed: %s %s", b.pattern, b.entry)
        out.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
             "pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal, "host": b.entry.host,
             "operation": int(b.entry.operation), "permission_type": int(b.entry.permission)} for b in matched]})
    return {"throttle_time_ms": 0, "filter_results": out}
