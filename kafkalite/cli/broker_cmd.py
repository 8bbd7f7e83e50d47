"""`kafkalite broker --config FILE [--override k=v ...]`: run one broker in this process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from kafkalite.config import ConfigError, load_config


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("broker", help="run a broker process")
    p.add_argument("--config", required=True, help="TOML or .properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.set_defaults(func=run_broker)


def run_broker(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config, args.override)
    except ConfigError as e:
        print(f"kafkalite broker: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=cfg["log.level"].upper(),
        format=f"%(asctime)s %(levelname)s [broker {cfg.broker_id}] %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works
        pass
    from kafkalite.broker.server import run
    from kafkalite.log.errors import LogDirError
    from kafkalite.zk.errors import BrokerIdInUseError

    try:
        return asyncio.run(run(cfg))
    except (BrokerIdInUseError, ConfigError) as e:  # ConfigError: a replica selector plug-in that cannot be set up
        print(f"kafkalite broker: {e}", file=sys.stderr)
        return 2
    except LogDirError as e:
        print(f"kafkalite broker: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kafkalite broker: cannot start: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
