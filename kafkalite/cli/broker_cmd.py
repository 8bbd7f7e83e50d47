"""`kafkalite broker [--config FILE] [--override k=v ...]`: run one broker in this process.

Settings come from the file, then from KAFKALITE_CFG_<KEY> environment variables
(KAFKALITE_CFG_BROKER_ID=1 is broker.id=1: upper case, "_" for "."), then from
--override: the last word wins (what a container image needs: one file baked in, each
broker's id and addresses from its environment). SIGTERM and SIGINT are a controlled
shutdown (leaderships moved away first). KAFKALITE_PROFILE=PREFIX profiles the process
(cProfile statistics in PREFIX.<broker id> when it stops)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from kafkalite.config import ConfigError, load_config

# KAFKALITE_PROFILE=/path/prefix: run the broker under cProfile and write its statistics to
# /path/prefix.<broker id> when it stops (read them with python -m pstats).
PROFILE_ENV = "KAFKALITE_PROFILE"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("broker", help="run a broker process")
    p.add_argument("--config", help="TOML or .properties file (optional when KAFKALITE_CFG_* variables or --override say enough)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.set_defaults(func=run_broker)


def run_broker(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config, args.override, os.environ)
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

    profile_to = os.environ.get(PROFILE_ENV)
    profiler = None
    if profile_to:  # a development aid (bench/README.md): the whole process under cProfile
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
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
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{profile_to}.{cfg.broker_id}")
