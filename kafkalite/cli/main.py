"""The `kafkalite` command: one sub-command per module in kafkalite.cli."""

from __future__ import annotations

import argparse
import sys

from kafkalite.cli import broker_cmd

_MODULES = [broker_cmd]


def _load_optional() -> None:
    import importlib

    for name in ("topics_cmd", "client_cmds", "cluster_cmd"):
        try:
            _MODULES.append(importlib.import_module(f"kafkalite.cli.{name}"))
        except ModuleNotFoundError as e:
            if e.name != f"kafkalite.cli.{name}":
                raise


def build_parser() -> argparse.ArgumentParser:
    _load_optional()
    parser = argparse.ArgumentParser(prog="kafkalite", description="kafkalite: a Kafka-style replicated commit log")
    sub = parser.add_subparsers(dest="command", required=True)
    for mod in _MODULES:
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
