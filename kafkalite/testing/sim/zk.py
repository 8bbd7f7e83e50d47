"""In-memory ZooKeeper model: versioned znodes, sessions with a timeout, ephemerals.

Operations are instantaneous and atomic (a broker that can reach ZooKeeper gets its answer
in the same step); watches are modelled by the brokers and the controller polling on their
ticks. What matters for the replication protocol is kept: conditional writes on the znode
version, controller-epoch fencing of the controller's writes, ephemerals that vanish when
their session expires, and a fresh czxid (the broker epoch) on every registration.

Topic admin paths (issue 9) as kafkalite.zk lays them out, with Python values for data:
- /brokers/topics/<t>: {"partitions": {p: [replicas]}, "adding": {p: [...]}, "removing": {p: [...]}}
  (KIP-455; a partition absent from adding/removing is not moving);
- /admin/reassign_partitions: {"partitions": {(t, p): [target replicas]}} (one at a time:
  an admin cannot create it while it exists);
- /admin/partitions_remove/<t>/<p> ({}) and /admin/partitions_add/<t>/<p> ({"replicas": [...]}).
The controller's writes to them are fenced on the controller epoch, as its state writes.
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


def topic_path(topic: str) -> str:
    return f"/brokers/topics/{topic}"


REASSIGN = "/admin/reassign_partitions"
ADMIN_KINDS = ("add", "remove")
WATCHED = (REASSIGN, "/admin/partitions_add/", "/admin/partitions_remove/")


def partition_admin_prefix(kind: str) -> str:
    assert kind in ADMIN_KINDS
    return f"/admin/partitions_{kind}/"


def partition_admin_path(kind: str, tp: tuple[str, int]) -> str:
    return f"{partition_admin_prefix(kind)}{tp[0]}/{tp[1]}"


class ZkModel:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.nodes: dict[str, Znode] = {}
        self.sessions: dict[int, Session] = {}
        self._zxid = 0
        self.writes = 0  # creates, sets and deletes so far (readers cache what they derive)
        # Changes under each watched admin path, as a watch would see them (a delete and a
        # create between two polls is still a change): path prefix -> count.
        self.admin_changes: dict[str, int] = {prefix: 0 for prefix in WATCHED}
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
            self.writes += 1
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
        self._changed(path)
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
        self._changed(path)
        node.data = data
        node.version += 1
        node.mzxid = self._zxid
        return node.version

    def delete(self, path: str) -> None:
        if self.nodes.pop(path, None) is not None:
            self._changed(path)

    def _changed(self, path: str) -> None:
        self.writes += 1
        for prefix in WATCHED:
            if path.startswith(prefix):
                self.admin_changes[prefix] += 1

    # ------------------------------------------------------- kafkalite helpers

    def live_brokers(self) -> dict[int, int]:
        """broker id -> broker epoch (czxid of its registration)."""
        prefix = "/brokers/ids/"
        return {
            int(path[len(prefix):]): node.czxid
            for path, node in sorted(self.nodes.items())
            if path.startswith(prefix)
        }

    def unclean_starts(self) -> set[int]:
        """Brokers whose registration says their process came back from a crash."""
        prefix = "/brokers/ids/"
        return {int(path[len(prefix):]) for path, node in self.nodes.items()
                if path.startswith(prefix) and isinstance(node.data, dict) and node.data.get("unclean_start")}

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
        self._fence(controller_epoch_version)
        return self.set(state_path(tp), dict(data), expected_version)

    def _fence(self, controller_epoch_version: int) -> None:
        if self.nodes[CONTROLLER_EPOCH].version != controller_epoch_version:
            raise ControllerMovedError("controller epoch moved")

    # ------------------------------------------------------- topic admin paths

    def topics(self) -> list[str]:
        prefix = "/brokers/topics/"
        return sorted(p[len(prefix):] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix):])

    def assignment(self, topic: str) -> dict[int, tuple[int, ...]]:
        """partition -> replicas (AR+RAR while moving) of the topic znode; {} if none."""
        node = self.nodes.get(topic_path(topic))
        return {} if node is None else {p: tuple(r) for p, r in sorted(node.data["partitions"].items())}

    def topic_id(self, topic: str) -> str | None:
        """The topic's id (KIP-516) as its znode holds it; None if it has none."""
        node = self.nodes.get(topic_path(topic))
        return None if node is None else node.data.get("topic_id")

    def moving(self, topic: str) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        """partition -> (adding, removing) for the partitions being moved."""
        node = self.nodes.get(topic_path(topic))
        if node is None:
            return {}
        adding, removing = node.data["adding"], node.data["removing"]
        return {p: (tuple(adding.get(p, ())), tuple(removing.get(p, ()))) for p in sorted(set(adding) | set(removing))}

    def write_topic(self, topic: str, data: dict[str, Any], controller_epoch_version: int) -> int:
        """The controller's set of /brokers/topics/<t> (any version), fenced on the controller
        epoch (kafkalite.zk.client write_topic_assignment)."""
        self._fence(controller_epoch_version)
        path = topic_path(topic)
        node = self.nodes.get(path)
        if node is None:
            return self.create(path, data).version
        return self.set(path, data, node.version)

    def reassignment(self) -> dict[tuple[str, int], tuple[int, ...]] | None:
        node = self.nodes.get(REASSIGN)
        return None if node is None else {tp: tuple(r) for tp, r in sorted(node.data["partitions"].items())}

    def remove_reassignment_entries(self, tps: tuple[tuple[str, int], ...], controller_epoch_version: int) -> None:
        """The controller takes finished (or refused) entries out; the znode goes with the
        last one; nothing to do when it is gone (cancelled)."""
        self._fence(controller_epoch_version)
        node = self.nodes.get(REASSIGN)
        if node is None:
            return
        left = {tp: r for tp, r in node.data["partitions"].items() if tp not in tps}
        if len(left) == len(node.data["partitions"]):
            return
        if left:
            self.set(REASSIGN, {"partitions": left}, node.version)
        else:
            self.delete(REASSIGN)

    def delete_partitions(self, tps: tuple[tuple[str, int], ...], controller_epoch_version: int) -> None:
        self._fence(controller_epoch_version)
        for tp in tps:
            self.delete(state_path(tp))

    def partition_admin_requests(self, kind: str) -> dict[tuple[str, int], tuple[int, ...]]:
        """/admin/partitions_<kind>/<t>/<p> -> replicas (empty for removals)."""
        prefix = partition_admin_prefix(kind)
        out = {}
        for path, node in sorted(self.nodes.items()):
            if path.startswith(prefix):
                t, p = path[len(prefix):].rsplit("/", 1)
                out[(t, int(p))] = tuple(node.data.get("replicas", ()))
        return out

    def delete_partition_admin_requests(self, kind: str, tps: tuple[tuple[str, int], ...], controller_epoch_version: int) -> None:
        """Fenced like the controller's writes (kafkalite.zk.client delete_partition_admin_requests)."""
        self._fence(controller_epoch_version)
        for tp in tps:
            self.delete(partition_admin_path(kind, tp))
