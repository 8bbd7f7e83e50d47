"""The `kafkalite` command: one sub-command per module in kafkalite.cli.

Each module exposes ``add_parser(subparsers)`` and sets ``func`` on its parsers; ``func``
returns the exit code (0 ok, 1 the operation failed, 2 usage error; argparse also exits 2).
"""

from __future__ import annotations

import argparse
import os
import sys

from kafkalite.cli import (
    acls_cmd,
    broker_cmd,
    client_cmds,
    client_security,
    cluster_cmd,
    configs_cmd,
    dev_ca,
    groups_cmd,
    pipeline_cmd,
    reassign_cmd,
    records_cmd,
    topics_cmd,
    users_cmd,
)

_MODULES = [broker_cmd, topics_cmd, configs_cmd, client_cmds, groups_cmd, acls_cmd, cluster_cmd, reassign_cmd, pipeline_cmd, records_cmd,
            users_cmd, dev_ca]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkalite", description="kafkalite: a Kafka-style replicated commit log")
    sub = parser.add_subparsers(dest="command", required=True)
    for mod in _MODULES:
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
