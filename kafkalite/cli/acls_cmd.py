"""`kafkalite acls add|list|remove`: ACL administration through the Kafka protocol
(CreateAcls, DescribeAcls, DeleteAcls with confluent-kafka's AdminClient), like Kafka's
kafka-acls.sh --bootstrap-server.

    kafkalite acls add (--allow|--deny) --principal User:alice [--host H] --operation Read [--operation ...]
                       (--topic T | --group G | --cluster | --transactional-id X) [--prefixed]
    kafkalite acls list [--principal P] [--operation O] [--topic T|--group G|--cluster|--transactional-id X]
                        [--prefixed | --match] [--json]
    kafkalite acls remove [same filters as list] [--allow|--deny]

`list --topic T` shows the ACLs of exactly that literal name (and `--prefixed` those of
that prefix); `--match` shows every ACL that applies to the resource T (its literal name,
"*", and every prefix of it). `remove` deletes whatever its filter matches; with no
resource option it needs `--all-resources`, so a forgotten option cannot wipe every ACL.
Exit codes: 0 ok, 1 the operation failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from kafkalite.cli import client_security
from kafkalite.cli.admin_client import add_bootstrap_argument, console_for_tables, counted, fail, resolve_bootstrap
from kafkalite.core.acl import (
    CLUSTER_NAME,
    OPERATION_BY_NAME,
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_TYPE_NAMES,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate_principal,
)

REQUEST_TIMEOUT_S = 30.0
_OPERATIONS_BY_LOWER = {name.lower(): op for name, op in OPERATION_BY_NAME.items()}


@dataclasses.dataclass(frozen=True)
class AclSpec:
    """What the command line says, in the core's enums (None: any)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operations: tuple[Operation, ...]
    permission: Permission


def parse_operation(text: str) -> Operation:
    """'Read', 'read', 'describe-configs', 'DescribeConfigs', 'idempotent_write' -> Operation."""
    key = text.replace("-", "").replace("_", "").lower()
    op = _OPERATIONS_BY_LOWER.get(key)
    if op is None:
        raise InvalidAclError(f"unknown operation {text!r}; one of {', '.join(OPERATION_NAMES.values())}")
    return op


def spec_from_args(args: argparse.Namespace, *, for_add: bool) -> AclSpec:
    """The ACL (for add) or filter (list, remove) the options describe; InvalidAclError
    naming what is wrong."""
    chosen = [(ResourceType.TOPIC, args.topic), (ResourceType.GROUP, args.group),
              (ResourceType.CLUSTER, CLUSTER_NAME if args.cluster else None),
              (ResourceType.TRANSACTIONAL_ID, args.transactional_id)]
    chosen = [(t, n) for t, n in chosen if n is not None]
    if len(chosen) > 1:
        raise InvalidAclError("give at most one of --topic, --group, --cluster, --transactional-id")
    match = getattr(args, "match", False)
    if args.prefixed and match:
        raise InvalidAclError("--prefixed and --match exclude each other")
    if args.prefixed and chosen and chosen[0][0] == ResourceType.CLUSTER:
        raise InvalidAclError("--cluster has no prefixed form")
    if for_add:
        if not chosen:
            raise InvalidAclError("name the resource: --topic T, --group G, --cluster or --transactional-id X")
        if args.allow == args.deny:
            raise InvalidAclError("give exactly one of --allow, --deny")
        if not args.principal:
            raise InvalidAclError("--principal is required (e.g. User:alice, or User:* for everyone)")
        if not args.operation:
            raise InvalidAclError("--operation is required (repeatable), e.g. --operation Read")
    if args.principal:
        validate_principal(args.principal)
    rtype, name = chosen[0] if chosen else (ResourceType.ANY, None)
    if for_add:
        pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    elif name is None:
        pattern = PatternType.PREFIXED if args.prefixed else PatternType.ANY
    else:
        pattern = PatternType.PREFIXED if args.prefixed else (PatternType.MATCH if match else PatternType.LITERAL)
    permission = Permission.ALLOW if args.allow else Permission.DENY if args.deny else Permission.ANY
    operations = tuple(dict.fromkeys(parse_operation(o) for o in args.operation or [])) or ((Operation.ANY,) if not for_add else ())
    host = args.host if args.host is not None else ("*" if for_add else None)
    return AclSpec(rtype, name, pattern, args.principal, host, operations, permission)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("acls", help="add, list and remove ACLs (needs authorizer.class.name on the brokers)")
    asub = p.add_subparsers(dest="acls_command", required=True)
    add = asub.add_parser("add", help="add ACLs: one per --operation")
    lst = asub.add_parser("list", help="list ACLs matching the filter options")
    remove = asub.add_parser("remove", help="remove every ACL the filter options match")
    for leaf in (add, lst, remove):
        leaf.add_argument("--principal", help="User:NAME (User:* is every principal)")
        leaf.add_argument("--host", help="client host the ACL applies to (add: default *, every host)")
        leaf.add_argument("--operation", action="append", metavar="OP",
                          help=f"repeatable: {', '.join(OPERATION_NAMES.values())}")
        leaf.add_argument("--topic")
        leaf.add_argument("--group")
        leaf.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
        leaf.add_argument("--transactional-id")
        leaf.add_argument("--prefixed", action="store_true", help="the name is a prefix (PREFIXED pattern)")
        leaf.add_argument("--allow", action="store_true")
        leaf.add_argument("--deny", action="store_true")
        add_bootstrap_argument(leaf)
    lst.add_argument("--match", action="store_true", help="every ACL that applies to the named resource (literal, * and prefixes)")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    remove.add_argument("--match", action="store_true", help="every ACL that applies to the named resource")
    remove.add_argument("--all-resources", action="store_true", help="needed when no resource option is given")
    add.set_defaults(func=run_add)
    lst.set_defaults(func=run_list)
    remove.set_defaults(func=run_remove)


# -- confluent-kafka glue ---------------------------------------------------------------------
REACH_TIMEOUT_S = 10.0


class Unreachable(Exception):
    pass


def _admin(args: argparse.Namespace) -> Any:
    """A confluent AdminClient that has reached a broker (Unreachable otherwise, one line;
    librdkafka's own log lines are silenced)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    bootstrap = resolve_bootstrap(args.bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **client_security.librdkafka_config()})
    try:
        admin.list_topics(timeout=REACH_TIMEOUT_S)
    except KafkaException:
        raise Unreachable(f"no broker reachable at {bootstrap} within {REACH_TIMEOUT_S:g} s") from None
    return admin


def _ck_filter(spec: AclSpec, op: Operation) -> Any:
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as CkResourceType

    return AclBindingFilter(CkResourceType(int(spec.resource_type)), spec.name, ResourcePatternType(int(spec.pattern_type)),
                            spec.principal, spec.host, AclOperation(int(op)), AclPermissionType(int(spec.permission)))


def _row(b: Any) -> dict[str, Any]:
    """A confluent AclBinding as the JSON/table row."""
    return {"resource_type": RESOURCE_TYPE_NAMES.get(ResourceType(b.restype.value), b.restype.name),
            "name": b.name, "pattern_type": PatternType(b.resource_pattern_type.value).name,
            "principal": b.principal, "host": b.host,
            "operation": OPERATION_NAMES.get(Operation(b.operation.value), b.operation.name),
            "permission": PERMISSION_NAMES.get(Permission(b.permission_type.value), b.permission_type.name)}


def _error_text(e: Exception) -> str:
    err = e.args[0] if e.args else None
    text = err.str() if hasattr(err, "str") else str(e)
    name = err.name() if hasattr(err, "name") else ""
    return f"{name}: {text}" if name and name not in text else text


def run_add(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as CkResourceType

    try:
        spec = spec_from_args(args, for_add=True)
    except InvalidAclError as e:
        return fail("acls add", str(e), 2)
    bindings = [AclBinding(CkResourceType(int(spec.resource_type)), spec.name, ResourcePatternType(int(spec.pattern_type)),
                           spec.principal, spec.host, AclOperation(int(op)), AclPermissionType(int(spec.permission)))
                for op in spec.operations]
    try:
        admin = _admin(args)
        for f in admin.create_acls(bindings, request_timeout=REQUEST_TIMEOUT_S).values():
            f.result(timeout=REQUEST_TIMEOUT_S + 5)
    except (KafkaException, Unreachable) as e:
        return fail("acls add", _error_text(e))
    for b in bindings:
        r = _row(b)
        print(f"added: {r['permission']} {r['principal']} {r['operation']} on {r['resource_type']} {r['pattern_type']} "
              f"{r['name']!r} from host {r['host']}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    try:
        spec = spec_from_args(args, for_add=False)
    except InvalidAclError as e:
        return fail("acls list", str(e), 2)
    rows = []
    try:
        admin = _admin(args)
        for op in spec.operations:
            rows += [_row(b) for b in admin.describe_acls(_ck_filter(spec, op), request_timeout=REQUEST_TIMEOUT_S).result(
                timeout=REQUEST_TIMEOUT_S + 5)]
    except (KafkaException, Unreachable) as e:
        return fail("acls list", _error_text(e))
    rows.sort(key=lambda r: (r["resource_type"], r["name"], r["pattern_type"], r["principal"], r["operation"], r["permission"]))
    if args.json:
        print(json.dumps({"acls": rows}, indent=2))
        return 0
    _print_table(rows, f"{counted(len(rows), 'ACL')}")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    try:
        spec = spec_from_args(args, for_add=False)
    except InvalidAclError as e:
        return fail("acls remove", str(e), 2)
    if spec.name is None and not args.all_resources:
        return fail("acls remove", "no resource option: add --topic/--group/--cluster/--transactional-id, "
                                   "or --all-resources to remove matching ACLs of every resource", 2)
    removed = []
    try:
        admin = _admin(args)
        for f in admin.delete_acls([_ck_filter(spec, op) for op in spec.operations], request_timeout=REQUEST_TIMEOUT_S).values():
            removed += [_row(b) for b in f.result(timeout=REQUEST_TIMEOUT_S + 5)]
    except (KafkaException, Unreachable) as e:
        return fail("acls remove", _error_text(e))
    _print_table(removed, f"removed {counted(len(removed), 'ACL')}")
    return 0


def _print_table(rows: list[dict[str, Any]], title: str) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for col in ("resource", "pattern", "name", "principal", "host", "operation", "permission"):
        table.add_column(col)
    for r in rows:
        # Text, never markup: names, principals and hosts are whatever CreateAcls stored
        cells = [Text(r[k]) for k in ("resource_type", "pattern_type", "name", "principal", "host", "operation")]
        table.add_row(*cells, Text(r["permission"], style="red" if r["permission"] == "Deny" else ""))
    console_for_tables().print(table)
