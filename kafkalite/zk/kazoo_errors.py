"""kazoo exceptions -> kafkalite.zk typed errors, in one place (STYLE.md habit 7)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from kafkalite.zk.errors import (
    StaleZnodeVersionError,
    ZkConnectionLossError,
    ZkError,
    ZkSessionExpiredError,
    ZnodeExistsError,
    ZnodeNotEmptyError,
    ZnodeNotFoundError,
)


def translate(error: BaseException, path: str, expected_version: int = -1) -> ZkError:
    """The typed error for a kazoo exception raised by an operation on `path`."""
    if isinstance(error, BadVersionError):
        return StaleZnodeVersionError(path, expected_version)
    if isinstance(error, NoNodeError):
        return ZnodeNotFoundError(path)
    if isinstance(error, NodeExistsError):
        return ZnodeExistsError(path)
    if isinstance(error, NotEmptyError):
        return ZnodeNotEmptyError(path)
    if isinstance(error, NoAuthError):
        return ZkError(f"ZooKeeper refused the operation on {path}: not authorized (the cluster's znodes carry ACLs; "
                       "use its credentials: zookeeper.digest.* for brokers, KAFKALITE_ZK_DIGEST_FILE for admin tools)")
    if isinstance(error, SessionExpiredError):
        return ZkSessionExpiredError(f"ZooKeeper session expired during an operation on {path}")
    if isinstance(error, (ConnectionLoss, ConnectionClosedError, OperationTimeoutError, KazooTimeoutError)):
        return ZkConnectionLossError(f"lost ZooKeeper during an operation on {path}: {error!r}")
    return ZkError(f"ZooKeeper error on {path}: {error!r}")


@contextlib.contextmanager
def calls(path: str, expected_version: int = -1) -> Iterator[None]:
    """Run kazoo calls about `path`, re-raising their exceptions as typed errors."""
    try:
        yield
    except (KazooException, KazooTimeoutError) as error:
        raise translate(error, path, expected_version) from error
