"""ZooKeeper for the CLI commands that need it (`kafkalite reassign`): `--zookeeper`, else
$KAFKALITE_ZOOKEEPER, else 127.0.0.1:2181 (bin/cluster's default ZooKeeper port). In a
cluster with ZooKeeper ACLs, $KAFKALITE_ZK_DIGEST_FILE names the credentials file (one
line user:password; `bin/cluster up --zk-acl` writes one), and what the command creates
gets the cluster's ACLs (kafkalite.zk.security).

A short-lived kazoo session wrapped in the ZkAdapter. Every way it can fail that a user
meets (a malformed connect string, nobody listening, the connection lost half-way) is an
AdminError or a ZkError whose message is one line; kazoo's own log lines are silenced so
they do not add a traceback-looking paragraph to stderr.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from kafkalite.cli.admin_client import AdminError, parse_bootstrap
from kafkalite.zk import ZkAdapter

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"
ZOOKEEPER_ENV = "KAFKALITE_ZOOKEEPER"
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 10.0


def add_zookeeper_argument(parser: Any) -> None:
    parser.add_argument("--zookeeper", metavar="HOST:PORT[,...][/chroot]", default=None,
                        help=f"ZooKeeper to use (default ${ZOOKEEPER_ENV}, else {DEFAULT_ZOOKEEPER})")


def resolve_zookeeper(value: str | None) -> str:
    """--zookeeper, else $KAFKALITE_ZOOKEEPER, else 127.0.0.1:2181."""
    return value or os.environ.get(ZOOKEEPER_ENV) or DEFAULT_ZOOKEEPER


def check_connect_string(connect: str) -> None:
    """'h1:p1,h2:p2[/chroot]'; AdminError naming what is wrong."""
    hosts, slash, chroot = connect.partition("/")
    try:
        parse_bootstrap(hosts)
    except ValueError as e:
        raise AdminError(f"bad --zookeeper {connect!r}: {str(e).replace('bootstrap server', 'ZooKeeper server')}") from None
    if slash and (not chroot or chroot.endswith("/") or "//" in slash + chroot):
        raise AdminError(f"bad --zookeeper {connect!r}: bad chroot /{chroot}")


@contextlib.contextmanager
def zookeeper(connect: str) -> Iterator[ZkAdapter]:
    """A connected ZkAdapter, closed on exit. AdminError when ZooKeeper cannot be reached."""
    from kazoo.handlers.threading import KazooTimeoutError

    from kafkalite.zk.security import make_client, security_from_env

    check_connect_string(connect)
    quiet = logging.getLogger("kazoo")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    try:
        security = security_from_env()  # $KAFKALITE_ZK_DIGEST_FILE: the secured cluster's credentials
    except ValueError as e:
        raise AdminError(str(e)) from None
    client = make_client(connect, REQUEST_TIMEOUT_S, security)
    try:
        try:
            client.start(timeout=CONNECT_TIMEOUT_S)
        except KazooTimeoutError:
            raise AdminError(f"cannot reach ZooKeeper at {connect} (no connection within {CONNECT_TIMEOUT_S:g} s)") from None
        yield ZkAdapter(client, request_timeout_s=REQUEST_TIMEOUT_S, security=security)
    finally:
        with contextlib.suppress(Exception):
            client.stop()
        client.close()
