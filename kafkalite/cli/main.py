"""The `kafkalite` command: one sub-command per module in kafkalite.cli.

Each module exposes ``add_parser(subparsers)`` and sets ``func`` on its parsers; ``func``
returns the exit code (0 ok, 1 the operation failed, 2 usage error; argparse also exits 2).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

# Imported when a parser is built, not at import: `kafkalite broker` (each broker process of
# a cluster, and every restart in a test or a chaos run) needs only its own module, and the
# client commands' imports (confluent-kafka, rich, ...) cost it a quarter of a second.
_MODULE_NAMES = ["broker_cmd", "topics_cmd", "configs_cmd", "client_cmds", "groups_cmd", "acls_cmd", "cluster_cmd", "reassign_cmd",
                 "pipeline_cmd", "records_cmd", "users_cmd", "dev_ca"]


def _modules(names: list[str]) -> list[ModuleType]:
    return [importlib.import_module(f"kafkalite.cli.{name}") for name in names]


def build_parser(names: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkalite", description="kafkalite: a Kafka-style replicated commit log")
    sub = parser.add_subparsers(dest="command", required=True)
    for mod in _modules(names or _MODULE_NAMES):
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    broker = argv[:1] == ["broker"]  # a broker process: only its own command's module
    parser = build_parser(["broker_cmd"] if broker else None)
    args = parser.parse_args(argv)
    if not broker:  # (client security is for the client commands; a broker has its own settings)
        from kafkalite.cli import client_security

        try:
            client_security.configure(getattr(args, "command_config", None))
        except client_security.ClientConfigError as e:
            print(f"kafkalite {args.command}: {e}", file=sys.stderr)
            return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kafkalite consume ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
