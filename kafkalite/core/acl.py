"""ACLs and the authorizer's decision: pure, synchronous, no I/O (issue 15).

Kafka's model (AclAuthorizer, KIP-290 prefixed patterns): an ACL binds a resource pattern
(type, name, LITERAL or PREFIXED; the LITERAL name "*" is every resource of the type) to
an entry (principal, host, operation, Allow or Deny). A request by `principal` from
`host` to do `operation` on a resource is decided like this:

1. a super user may do anything;
2. the ACLs that match the resource are those of its exact name, of "*", and of every
   prefix of its name; if there are none at all, the answer is
   `allow.everyone.if.no.acl.found`;
3. a matching Deny (same principal or User:*, same host or *, same operation or All)
   refuses, whatever Allows there are;
4. otherwise a matching Allow permits; Allow of Read, Write, Delete or Alter also permits
   Describe, and Allow of AlterConfigs also permits DescribeConfigs (Kafka's implied
   operations; Deny implies nothing).

The numbers are Kafka's wire enums (AclOperation, AclPermissionType, ResourceType,
PatternType); the names are those Kafka writes in ZooKeeper.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name, as in Kafka
WILDCARD = "*"  # a LITERAL name matching every resource of its type; a host matching every host
WILDCARD_PRINCIPAL = "User:*"

# ZooKeeper's (and the CLI's) spelling of each enum, as Kafka writes them.
RESOURCE_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                       ResourceType.TRANSACTIONAL_ID: "TransactionalId"}
OPERATION_NAMES = {Operation.ALL: "All", Operation.READ: "Read", Operation.WRITE: "Write", Operation.CREATE: "Create",
                   Operation.DELETE: "Delete", Operation.ALTER: "Alter", Operation.DESCRIBE: "Describe",
                   Operation.CLUSTER_ACTION: "ClusterAction", Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
                   Operation.ALTER_CONFIGS: "AlterConfigs", Operation.IDEMPOTENT_WRITE: "IdempotentWrite"}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}
RESOURCE_TYPE_BY_NAME = {v: k for k, v in RESOURCE_TYPE_NAMES.items()}
OPERATION_BY_NAME = {v: k for k, v in OPERATION_NAMES.items()}
PERMISSION_BY_NAME = {v: k for k, v in PERMISSION_NAMES.items()}

# Allowing any of these also allows the key (Kafka's AclAuthorizer, "implied" operations).
IMPLIED_BY: Mapping[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


class InvalidAclError(ValueError):
    """An ACL or filter a client sent that cannot be stored or applied; the message says why."""


@dataclasses.dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this stored pattern covers the concrete resource (type, name)."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        assert self.pattern_type == PatternType.PREFIXED
        return name.startswith(self.name)


@dataclasses.dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission


@dataclasses.dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def validate_principal(principal: str) -> None:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidAclError(f"principal {principal!r} is not of the form Type:name (e.g. User:alice)")


def validate_binding(binding: AclBinding) -> None:
    """What Kafka refuses to store (InvalidRequestException): unknown or ANY enums, a
    pattern type other than LITERAL/PREFIXED, a Cluster resource not named kafka-cluster,
    an empty name, a malformed principal, an empty host."""
    p, e = binding.pattern, binding.entry
    if p.resource_type not in RESOURCE_TYPE_NAMES:
        raise InvalidAclError(f"resource type {p.resource_type.name} cannot be stored: use Topic, Group, Cluster or TransactionalId")
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"pattern type {p.pattern_type.name} cannot be stored: use LITERAL or PREFIXED")
    if not p.name:
        raise InvalidAclError("resource name is empty")
    if p.pattern_type == PatternType.PREFIXED and p.name == WILDCARD:
        raise InvalidAclError("a PREFIXED pattern cannot be '*': use the LITERAL name '*' for every resource")
    if p.resource_type == ResourceType.CLUSTER and (p.name != CLUSTER_NAME or p.pattern_type != PatternType.LITERAL):
        raise InvalidAclError(f"the Cluster resource is the LITERAL name {CLUSTER_NAME!r}")
    if "/" in p.name:
        raise InvalidAclError(f"resource name {p.name!r} contains '/'")
    if e.operation not in OPERATION_NAMES:
        raise InvalidAclError(f"operation {e.operation.name} cannot be stored")
    if e.permission not in PERMISSION_NAMES:
        raise InvalidAclError(f"permission {e.permission.name} cannot be stored: use ALLOW or DENY")
    validate_principal(e.principal)
    if not e.host:
        raise InvalidAclError("host is empty (use '*' for every host)")


@dataclasses.dataclass(frozen=True)
class AclFilter:
    """DescribeAcls / DeleteAcls: None (or ANY) fields match everything. Pattern type MATCH
    selects every pattern that would apply to the named resource (its literal name, "*",
    and prefixes of it); ANY selects LITERAL and PREFIXED patterns of exactly that name."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        for value, enum in ((self.resource_type, ResourceType), (self.pattern_type, PatternType),
                            (self.operation, Operation), (self.permission, Permission)):
            if value == enum.UNKNOWN:
                raise InvalidAclError(f"filter has an UNKNOWN {enum.__name__}")

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            return p.matches(p.resource_type, self.name)
        if self.pattern_type not in (PatternType.ANY, p.pattern_type):
            return False
        return self.name is None or self.name == p.name

    def matches_entry(self, e: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and self.operation in (Operation.ANY, e.operation)
                and self.permission in (Permission.ANY, e.permission))

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (Kafka's syntax)."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


DECISIONS_MAX = 100_000  # remembered decisions; all forgotten when full or when an ACL changes


class AclCache:
    """Every stored ACL by resource pattern; what the authorizer decides from. The broker
    shell replaces a pattern's entries when ZooKeeper says that pattern changed."""

    def __init__(self, decisions_max: int = DECISIONS_MAX) -> None:
        assert decisions_max > 0
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        # authorize()'s answers since the last change: a produce of one partition asks the
        # same question every time, and a decision walks every prefix of the name.
        self.decisions: dict[tuple, bool] = {}
        self.decisions_max = decisions_max

    def set(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        self.decisions = {}
        entries = frozenset(entries)
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)

    def replace_all(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        self._acls = {}
        self.decisions = {}
        for pattern, entries in acls.items():
            self.set(pattern, entries)

    def get(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def bindings(self) -> list[AclBinding]:
        return sorted(AclBinding(p, e) for p, es in self._acls.items() for e in es)

    def patterns(self) -> list[ResourcePattern]:
        return sorted(self._acls)

    def matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The entries of every pattern that covers (type, name): its literal name, the
        literal "*", and each of its prefixes (len(name) + 2 dictionary lookups)."""
        found: list[AccessControlEntry] = []
        found.extend(self._acls.get(ResourcePattern(resource_type, name, PatternType.LITERAL), ()))
        if name != WILDCARD:
            found.extend(self._acls.get(ResourcePattern(resource_type, WILDCARD, PatternType.LITERAL), ()))
        for i in range(1, len(name) + 1):
            found.extend(self._acls.get(ResourcePattern(resource_type, name[:i], PatternType.PREFIXED), ()))
        return found

    def __len__(self) -> int:
        return sum(len(es) for es in self._acls.values())


def _entry_applies(e: AccessControlEntry, principal: str, host: str, permission: Permission,
                   operations: frozenset[Operation]) -> bool:
    return (e.permission == permission
            and e.principal in (principal, WILDCARD_PRINCIPAL)
            and e.host in (host, WILDCARD)
            and (e.operation == Operation.ALL or e.operation in operations))


@dataclasses.dataclass(frozen=True)
class AuthorizerConfig:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def authorize(cache: AclCache, config: AuthorizerConfig, principal: str, host: str, operation: Operation,
              resource_type: ResourceType, name: str) -> bool:
    """Kafka's AclAuthorizer.authorize for one action (see the module docstring)."""
    assert operation not in (Operation.ANY, Operation.ALL, Operation.UNKNOWN)
    assert resource_type in RESOURCE_TYPE_NAMES
    key = (config, principal, host, operation, resource_type, name)
    known = cache.decisions.get(key)
    if known is None:
        known = _decide(cache, config, principal, host, operation, resource_type, name)
        if len(cache.decisions) >= cache.decisions_max:
            cache.decisions = {}
        cache.decisions[key] = known
    return known


def _decide(cache: AclCache, config: AuthorizerConfig, principal: str, host: str, operation: Operation,
            resource_type: ResourceType, name: str) -> bool:
    if principal in config.super_users:
        return True
    acls = cache.matching(resource_type, name)
    if not acls:
        return config.allow_everyone_if_no_acl_found
    if any(_entry_applies(e, principal, host, Permission.DENY, frozenset({operation})) for e in acls):
        return False
    allowed_by = IMPLIED_BY.get(operation, frozenset({operation}))
    return any(_entry_applies(e, principal, host, Permission.ALLOW, allowed_by) for e in acls)


def authorize_any_topic_write(cache: AclCache, config: AuthorizerConfig, principal: str, host: str) -> bool:
    """KIP-679 (Kafka 2.8+/3.0): an idempotent producer without IdempotentWrite on the cluster is
    still allowed if it may Write to some topic."""
    return authorize_by_resource_type(cache, config, principal, host, Operation.WRITE, ResourceType.TOPIC)


def authorize_by_resource_type(cache: AclCache, config: AuthorizerConfig, principal: str, host: str, operation: Operation,
                               resource_type: ResourceType) -> bool:
    """Whether `operation` is allowed on at least one resource of `resource_type`: Kafka's
    AclAuthorizer.authorizeByResourceType (the ZooKeeper authorizer kafkalite stands in for).
    Only the ACLs of the principal (or User:*), the host (or *) and the operation (or All)
    count, Allow and Deny each by pattern type:

    1. a super user may;
    2. a Deny of the LITERAL "*" refuses;
    3. with allow.everyone.if.no.acl.found, anyone else may (whatever other ACLs exist);
    4. with no Deny at all, any Allow permits;
    5. else an Allow permits unless a Deny covers every name it could: a PREFIXED Deny whose
       name is a prefix of the Allow's name (LITERAL or PREFIXED), or, for a LITERAL Allow,
       a LITERAL Deny of that name. An Allow of the LITERAL "*" always permits.

    The interface's default (Authorizer.authorizeByResourceType, for authorizers that do
    not override it) differs only in step 3: it asks whether the operation on a resource
    named "hardcode" is allowed, which honours allow.everyone.if.no.acl.found only when no
    ACL of anyone covers that name."""
    if principal in config.super_users:
        return True
    names: dict[tuple[Permission, PatternType], set[str]] = {
        (permission, pattern_type): set() for permission in (Permission.ALLOW, Permission.DENY)
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)}
    for pattern in cache.patterns():
        if pattern.resource_type != resource_type:
            continue
        for e in cache.get(pattern):
            if e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD) and e.operation in (operation, Operation.ALL):
                names[(e.permission, pattern.pattern_type)].add(pattern.name)
    deny_literals, deny_prefixes = names[(Permission.DENY, PatternType.LITERAL)], names[(Permission.DENY, PatternType.PREFIXED)]
    allow_literals, allow_prefixes = names[(Permission.ALLOW, PatternType.LITERAL)], names[(Permission.ALLOW, PatternType.PREFIXED)]
    if WILDCARD in deny_literals:
        return False
    if config.allow_everyone_if_no_acl_found:
        return True
    if not deny_literals and not deny_prefixes:
        return bool(allow_literals or allow_prefixes)

    def denied_by_prefix(name: str) -> bool:
        return any(name[:i] in deny_prefixes for i in range(len(name) + 1))

    return (any(not denied_by_prefix(name) for name in allow_prefixes)
            or any(name == WILDCARD or (name not in deny_literals and not denied_by_prefix(name)) for name in allow_literals))
