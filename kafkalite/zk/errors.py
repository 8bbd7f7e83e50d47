"""Typed operating errors of the ZooKeeper adapter (STYLE.md habit 7).

kazoo's exceptions never leave kafkalite.zk: callers catch these. The broker maps the few
that reach a client (TopicAlreadyExistsError, UnknownTopicError) to wire codes in the
protocol error table; the rest drive controller and broker decisions (re-read and
re-decide, resign, re-register).
"""

from __future__ import annotations


class ZkError(Exception):
    """Base class of every operating error raised by kafkalite.zk."""


class ZkConnectionLossError(ZkError):
    """The connection dropped while a request was in flight: its outcome is unknown.
    Re-read before deciding again."""


class ZkSessionExpiredError(ZkError):
    """The session is gone, and with it every ephemeral znode it owned (broker
    registration, /controller). The broker must re-register; a controller must resign."""


class ZnodeDecodeError(ZkError):
    """A znode holds bytes that are not the JSON this path must hold."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot decode znode {path}: {reason}")
        self.path = path
        self.reason = reason


class StaleZnodeVersionError(ZkError):
    """A conditional write found another version: someone else changed the znode.
    Re-read and re-decide; never overwrite blindly (DESIGN.md section 2)."""

    def __init__(self, path: str, expected_version: int) -> None:
        super().__init__(f"znode {path} is no longer at version {expected_version}")
        self.path = path
        self.expected_version = expected_version


class ZnodeNotFoundError(ZkError):
    def __init__(self, path: str) -> None:
        super().__init__(f"znode {path} does not exist")
        self.path = path


class ZnodeNotEmptyError(ZkError):
    """A delete found children under the znode (created since they were listed)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"znode {path} has children")
        self.path = path


class ZnodeExistsError(ZkError):
    def __init__(self, path: str, message: str | None = None) -> None:
        super().__init__(message or f"znode {path} already exists")
        self.path = path


class BrokerIdInUseError(ZnodeExistsError):
    """Another live session holds /brokers/ids/<id>: two brokers were given one broker.id."""


class TopicAlreadyExistsError(ZnodeExistsError):
    """Wire code: TOPIC_ALREADY_EXISTS (36)."""


class ReassignmentInProgressError(ZnodeExistsError):
    """/admin/reassign_partitions exists: one reassignment at a time (as in Kafka 2.x)."""


class UnknownTopicError(ZkError):
    """Wire code: UNKNOWN_TOPIC_OR_PARTITION (3)."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist")
        self.topic = topic


class ControllerMovedError(ZkError):
    """/controller_epoch is no longer at the version this controller wrote when it was
    elected: another broker is controller now. Every write of a deposed controller is
    fenced this way; it must resign (Kafka's ControllerMovedException)."""

    def __init__(self, expected_epoch_zk_version: int) -> None:
        super().__init__(
            f"/controller_epoch moved past zk version {expected_epoch_zk_version}: "
            "this broker is no longer the controller"
        )
        self.expected_epoch_zk_version = expected_epoch_zk_version


class ZkContentionError(ZkError):
    """A read-modify-write loop lost the race more times than its bound allows."""


class ZnodeTooLargeError(ZkError):
    """A write bigger than ZooKeeper accepts (jute.maxbuffer). Refused before it is sent:
    the server would answer an oversized packet by closing the session's connection."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(f"writing {size} bytes to znode {path} is over ZooKeeper's limit of {limit} bytes")
        self.path = path
        self.size = size
        self.limit = limit
