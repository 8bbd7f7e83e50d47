"""A LocalCluster for the duration of one benchmark: ZooKeeper and `brokers` brokers on free
loopback ports in a temporary directory, stopped at the end, also on SIGTERM (which unwinds
through `finally`). Shared by the consumer-group benchmarks."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafkalite.testing.cluster import LocalCluster
from kafkalite.testing.ports import free_ports

# Every benchmark cluster gets these: quiet logs, and no leadership moves in the middle of a run.
BASE_OVERRIDES: dict[str, Any] = {"log.level": "WARNING", "auto.leader.rebalance.enable": False}


@contextlib.contextmanager
def local_cluster(brokers: int, overrides: dict[str, Any], prefix: str) -> Iterator[LocalCluster]:
    ports = free_ports(3 * brokers + 1)
    triples = [(ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(brokers)]
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        cluster = LocalCluster(tmp, brokers=brokers, zk_port=ports[-1], ports=triples,
                               overrides={**BASE_OVERRIDES, **overrides})
        previous = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            status = cluster.up()
            print(f"# local cluster: {brokers} brokers at {status['bootstrap']} in {tmp}", file=sys.stderr)
            yield cluster
        finally:
            cluster.down()
            signal.signal(signal.SIGTERM, previous)


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def settings_line(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
