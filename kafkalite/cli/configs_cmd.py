"""`kafkalite configs describe|alter`: topic and broker configs, live (issue 16).

    kafkalite configs describe (--topic T | --broker N | --broker-defaults) [--all] [--json]
    kafkalite configs alter (--topic T | --broker N | --broker-defaults) [--set k=v ...] [--delete k ...]

`describe` shows the values the resource itself holds (a topic's overrides, a broker's own
dynamic configs, the dynamic defaults), as Kafka's kafka-configs does; --all shows every
config, each with its value and where it comes from: DYNAMIC_TOPIC_CONFIG,
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG or
DEFAULT_CONFIG. With --json: {"resource": {"type", "name"}, "configs": [{"name", "value",
"source", "read_only", "sensitive"}]}. `alter` goes through the Kafka protocol
(IncrementalAlterConfigs: SET and DELETE); the brokers apply it without a restart.
`--delete` of a config the resource does not set is refused before anything is altered
("Invalid config(s): NAME,...", exit 1), as kafka-configs refuses it.
Exit codes: 0 ok, 1 the operation failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json

from kafkalite.cli.admin_client import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    AdminClient,
    AdminError,
    add_bootstrap_argument,
    console_for_tables,
    fail,
    int32_arg,
    resolve_bootstrap,
)
from kafkalite.cli.topics_cmd import parse_configs

SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}
# The source of the values a resource itself holds: what describe shows without --all.
_OWN_SOURCE = {(RESOURCE_TOPIC, False): 1, (RESOURCE_BROKER, False): 2, (RESOURCE_BROKER, True): 3}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("configs", help="describe and alter topic and broker configs (applied live)")
    csub = p.add_subparsers(dest="configs_command", required=True)
    describe = csub.add_parser("describe", help="a topic's or a broker's configs, with their sources")
    _add_resource(describe)
    describe.add_argument("--all", action="store_true", help="every config, defaults included")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    describe.set_defaults(func=run_describe)
    alter = csub.add_parser("alter", help="set or delete configs of a topic or a broker")
    _add_resource(alter)
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY",
                       help="remove an override: back to the broker's (or the default) value (repeatable)")
    alter.set_defaults(func=run_alter)


def _add_resource(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="TOPIC")
    which.add_argument("--broker", type=int32_arg, metavar="ID")
    which.add_argument("--broker-defaults", action="store_true", help="the cluster-wide dynamic broker defaults")
    add_bootstrap_argument(p)


def _resource(args: argparse.Namespace) -> tuple[int, str, str]:
    """(resource type, resource name, label)."""
    if args.topic is not None:
        return RESOURCE_TOPIC, args.topic, f"topic {args.topic}"
    if args.broker is not None:
        return RESOURCE_BROKER, str(args.broker), f"broker {args.broker}"
    return RESOURCE_BROKER, "", "broker defaults"


def run_describe(args: argparse.Namespace) -> int:
    rtype, name, label = _resource(args)
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            configs = admin.describe_configs(rtype, name)
    except AdminError as e:
        return fail("configs describe", str(e))
    if not args.all:  # as Kafka's kafka-configs: the entity's own dynamic values only
        configs = [c for c in configs if c["source"] == _OWN_SOURCE[(rtype, name == "")]]
    for c in configs:
        c["source"] = SOURCES.get(c["source"], str(c["source"]))
    if args.json:
        print(json.dumps({"resource": {"type": "topic" if rtype == RESOURCE_TOPIC else "broker", "name": name},
                          "configs": configs}, indent=2))
        return 0
    from rich.table import Table
    from rich.text import Text

    console = console_for_tables()
    if not configs:
        console.print(f"{label}: no dynamic configs set (--all shows every config and its source)")
        return 0
    table = Table("config", "value", "source", "read-only", title=label)
    for c in configs:
        value = Text("(sensitive)", style="dim") if c["sensitive"] else (c["value"] if c["value"] is not None else "-")
        table.add_row(c["name"], value, c["source"], "yes" if c["read_only"] else "no")
    console.print(table)
    return 0


def run_alter(args: argparse.Namespace) -> int:
    rtype, name, label = _resource(args)
    try:
        sets = parse_configs(args.set)
    except ValueError as e:
        return fail("configs alter", str(e).replace("--config", "--set"), 2)
    if not sets and not args.delete:
        return fail("configs alter", "nothing to do: give --set KEY=VALUE and/or --delete KEY", 2)
    both = sorted(set(sets) & set(args.delete))
    if both:
        return fail("configs alter", f"{', '.join(both)}: both --set and --delete", 2)
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            if args.delete:  # as kafka-configs: deleting a config the entity does not set is an error
                own = {c["name"] for c in admin.describe_configs(rtype, name) if c["source"] == _OWN_SOURCE[(rtype, name == "")]}
                unset = [k for k in args.delete if k not in own]
                if unset:
                    return fail("configs alter", f"Invalid config(s): {','.join(unset)} (not set on {label}; nothing altered)")
            admin.incremental_alter_configs(rtype, name, sets, list(args.delete))
    except AdminError as e:
        return fail("configs alter", str(e))
    done = [f"{k}={v}" for k, v in sets.items()] + [f"-{k}" for k in args.delete]
    print(f"altered {label}: {' '.join(done)}")
    return 0
