"""In-memory ZooKeeper model: versioned znodes, sessions with a timeout, ephemerals.

Operations are instantaneous and atomic (a broker that can reach ZooKeeper gets its answer
in the same step); watches are modelled by the brokers and the controller polling on their
ticks. What matters for the replication protocol is kept: conditional writes on the znode
version, controller-epoch fencing of the controller's writes, ephemerals that vanish when
their session expires, and a fresh czxid (the broker epoch) on every registration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"


class ZkError(Exception):
    pass


class NodeExistsError(ZkError):
    pass


class BadVersionError(ZkError):
    pass


class ControllerMovedError(ZkError):
    pass


class SessionExpiredError(ZkError):
    pass


@dataclass
class Znode:
    data: Any
    version: int
    czxid: int
    owner: int | None  # session id for ephemerals
    mzxid: int = 0  # zxid of the last write


@dataclass
class Session:
    sid: int
    broker: int
    last_heard_ms: int
    alive: bool = True


def broker_path(broker: int) -> str:
    return f"/brokers/ids/{broker}"


def state_path(tp: tuple[str, int]) -> str:
    return f"/brokers/topics/{tp[0]}/partitions/{tp[1]}/state"


class ZkModel:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.nodes: dict[str, Znode] = {}
        self.sessions: dict[int, Session] = {}
        self._zxid = 0
        self._next_sid = 1
        self.create(CONTROLLER_EPOCH, {"epoch": 0})

    # ----------------------------------------------------------------- sessions

    def open_session(self, broker: int, now_ms: int) -> int:
        sid = self._next_sid
        self._next_sid += 1
        self.sessions[sid] = Session(sid, broker, now_ms)
        return sid

    def touch(self, sid: int, now_ms: int) -> bool:
        session = self.sessions.get(sid)
        if session is None or not session.alive:
            return False
        session.last_heard_ms = now_ms
        return True

    def session_alive(self, sid: int) -> bool:
        session = self.sessions.get(sid)
        return session is not None and session.alive

    def expire_due(self, now_ms: int) -> list[Session]:
        expired = [
            s for s in self.sessions.values()
            if s.alive and now_ms - s.last_heard_ms > self.session_timeout_ms
        ]
        for session in expired:
            self.expire(session.sid)
        return expired

    def expire(self, sid: int) -> None:
        session = self.sessions[sid]
        session.alive = False
        for path in sorted(p for p, n in self.nodes.items() if n.owner == sid):
            del self.nodes[path]
        del self.sessions[sid]

    def close_session(self, sid: int) -> None:
        if sid in self.sessions:
            self.expire(sid)

    def _require(self, sid: int | None) -> None:
        if sid is not None and not self.session_alive(sid):
            raise SessionExpiredError(f"session {sid} expired")

    # ------------------------------------------------------------------- znodes

    def create(self, path: str, data: Any, ephemeral_sid: int | None = None) -> Znode:
        self._require(ephemeral_sid)
        if path in self.nodes:
            raise NodeExistsError(path)
        self._zxid += 1
        node = Znode(data, 0, self._zxid, ephemeral_sid, self._zxid)
        self.nodes[path] = node
        return node

    def get(self, path: str) -> Znode | None:
        return self.nodes.get(path)

    def set(self, path: str, data: Any, version: int) -> int:
        node = self.nodes.get(path)
        if node is None or node.version != version:
            raise BadVersionError(f"{path}: expected version {version}")
        self._zxid += 1
        node.data = data
        node.version += 1
        node.mzxid = self._zxid
        return node.version

    def delete(self, path: str) -> None:
        self.nodes.pop(path, None)

    # ------------------------------------------------------- kafkalite helpers

    def live_brokers(self) -> dict[int, int]:
        """broker id -> broker epoch (czxid of its registration)."""
        prefix = "/brokers/ids/"
        return {
            int(path[len(prefix):]): node.czxid
            for path, node in sorted(self.nodes.items())
            if path.startswith(prefix)
        }

    def try_become_controller(self, broker: int, sid: int) -> tuple[int, int] | None:
        """Create /controller; on success bump /controller_epoch (cond) and return
        (controller epoch, its znode version) for fencing later writes."""
        self._require(sid)
        if CONTROLLER in self.nodes:
            return None
        self.create(CONTROLLER, {"brokerid": broker}, ephemeral_sid=sid)
        epoch_node = self.nodes[CONTROLLER_EPOCH]
        epoch = epoch_node.data["epoch"] + 1
        version = self.set(CONTROLLER_EPOCH, {"epoch": epoch}, epoch_node.version)
        return epoch, version

    def controller_id(self) -> int:
        node = self.nodes.get(CONTROLLER)
        return -1 if node is None else node.data["brokerid"]

    def write_state(
        self, tp: tuple[str, int], data: dict[str, Any], expected_version: int,
        controller_epoch_version: int,
    ) -> int:
        """The controller's conditional write, fenced on the controller epoch (a multi
        of check(/controller_epoch, v) + set(state, expected_version))."""
        if self.nodes[CONTROLLER_EPOCH].version != controller_epoch_version:
            raise ControllerMovedError("controller epoch moved")
        return self.set(state_path(tp), dict(data), expected_version)
