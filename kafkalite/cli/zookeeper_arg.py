"""How the admin CLI reaches ZooKeeper, for what has no Kafka API (partition removal,
reassignment): `--zookeeper`, else $KAFKALITE_ZOOKEEPER, else 127.0.0.1:2181 (bin/cluster's
default ZooKeeper port). Failures are AdminError: one line for the user."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from kafkalite.cli.admin_client import AdminError

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"
ZOOKEEPER_ENV = "KAFKALITE_ZOOKEEPER"
CONNECT_TIMEOUT_S = 5.0


def resolve_zookeeper(value: str | None) -> str:
    return value or os.environ.get(ZOOKEEPER_ENV) or DEFAULT_ZOOKEEPER


@contextlib.contextmanager
def zookeeper(connect: str) -> Iterator:
    """A connected ZkAdapter for the duration of the block."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    from kafkalite.zk.client import ZkAdapter

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries are not the user's business
    client = KazooClient(hosts=connect, timeout=10.0)
    try:
        client.start(timeout=CONNECT_TIMEOUT_S)
    except (KazooTimeoutError, ValueError) as e:
        client.close()
        raise AdminError(f"cannot reach ZooKeeper at {connect} ({e or 'timed out'}); set --zookeeper or ${ZOOKEEPER_ENV}") from None
    try:
        yield ZkAdapter(client)
    finally:
        client.stop()
        client.close()
