"""Consumer-group requests for the `kafkalite groups` commands, on the CLI's synchronous
admin client (kafkalite.cli.admin_client): FindCoordinator, ListGroups, DescribeGroups,
OffsetFetch, OffsetCommit, DeleteGroups, and ListOffsets for log start and end offsets.

Routing is Kafka's admin client's: ListGroups goes to every broker (each lists the groups it
coordinates); the other group requests go to the group's coordinator, found again when it
answers NOT_COORDINATOR or is unreachable; ListOffsets goes to each partition's leader.
Retriable answers (COORDINATOR_NOT_AVAILABLE while the offsets topic is created,
COORDINATOR_LOAD_IN_PROGRESS while a coordinator loads, a leader that moved) are retried for
up to ``RETRY_WAIT_MS_MAX``; what is left is an AdminError with one line for the user.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from kafkalite.cli.admin_client import AdminClient, AdminError, ClusterMetadata, error_name
from kafkalite.core.consumer_protocol import decode_assignment
from kafkalite.protocol.errors import ErrorCode, KafkaliteError
from kafkalite.protocol.schema import ApiKey

FIND_COORDINATOR_VERSION = 2
LIST_GROUPS_VERSION = 2
DESCRIBE_GROUPS_VERSION = 4
OFFSET_FETCH_VERSION = 5
OFFSET_COMMIT_VERSION = 5
DELETE_GROUPS_VERSION = 1
LIST_OFFSETS_VERSION = 5

RETRY_WAIT_MS_MAX = 20000
RETRY_BACKOFF_MS = 200

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1  # ListOffsets: the high watermark, the end of what consumers can read
NO_OFFSET = -1

# The states of a group in which nobody consumes (Kafka's ConsumerGroupCommand resets
# offsets only then). Dead is also what DescribeGroups answers for a group that does not exist.
INACTIVE_STATES = ("Empty", "Dead")
DEAD = "Dead"

_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_COORDINATOR_RETRIABLE = _COORDINATOR_MOVED | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
_LEADER_RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                               ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
                               ErrorCode.UNKNOWN_LEADER_EPOCH})

TP = tuple[str, int]
T = TypeVar("T")


class _Retry(Exception):
    """A retriable answer; ``moved`` when the coordinator must be looked up again."""

    def __init__(self, reason: str, moved: bool = False):
        super().__init__(reason)
        self.moved = moved


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TP, ...] | None  # None: not the consumer protocol's assignment

    def to_json(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "host": self.host,
                "assignment": None if self.assignment is None else [{"topic": t, "partition": p} for t, p in self.assignment]}


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor, for the consumer protocol; known only while Stable
    members: tuple[GroupMember, ...]
    coordinator: int

    @property
    def exists(self) -> bool:
        return self.state != DEAD

    @property
    def inactive(self) -> bool:
        return self.state in INACTIVE_STATES

    def assigned_to(self) -> dict[TP, str]:
        return {tp: m.member_id for m in self.members for tp in (m.assignment or ())}


class GroupAdminClient(AdminClient):
    def __init__(self, bootstrap: str, **kwargs: Any):
        super().__init__(bootstrap, **kwargs)
        self._coordinators: dict[str, tuple[int, tuple[str, int]]] = {}

    # -- retries ------------------------------------------------------------------------
    def _retrying(self, what: str, attempt: Callable[[], T]) -> T:
        """attempt() until it returns; a _Retry or an unreachable broker waits a backoff and
        tries again, up to RETRY_WAIT_MS_MAX."""
        deadline = time.monotonic() + RETRY_WAIT_MS_MAX / 1000
        while True:
            try:
                return attempt()
            except _Retry as e:
                reason = str(e)
            except (OSError, KafkaliteError) as e:
                reason = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            if time.monotonic() >= deadline:
                raise AdminError(f"{what}: still failing after {RETRY_WAIT_MS_MAX // 1000} s ({reason})")
            time.sleep(RETRY_BACKOFF_MS / 1000)

    # -- coordinator ----------------------------------------------------------------------
    def _coordinator(self, group_id: str) -> tuple[int, tuple[str, int]]:
        known = self._coordinators.get(group_id)
        if known is not None:
            return known
        response = self._request_any(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, {"key": group_id, "key_type": 0})
        code = response["error_code"]
        if code in _COORDINATOR_RETRIABLE:
            raise _Retry(f"finding the coordinator: {error_name(code)}")
        if code == ErrorCode.INVALID_GROUP_ID:
            raise AdminError(f"invalid group id {group_id!r}")
        if code != 0:
            raise AdminError(f"finding the coordinator of group {group_id!r}: {response['error_message'] or error_name(code)}")
        found = (response["node_id"], (response["host"], response["port"]))
        self._coordinators[group_id] = found
        return found

    def _to_coordinator(self, group_id: str, api: ApiKey, version: int, body: dict,
                        error_of: Callable[[dict], int]) -> tuple[int, dict]:
        """(coordinator id, response) of a request about one group; error_of(response) is
        its group-level error code, retried while retriable."""

        def attempt() -> tuple[int, dict]:
            node, address = self._coordinator(group_id)
            try:
                response = self._request_to(address, api, version, body)
            except (OSError, KafkaliteError):
                self._coordinators.pop(group_id, None)
                raise
            code = error_of(response)
            if code in _COORDINATOR_RETRIABLE:
                if code in _COORDINATOR_MOVED:
                    self._coordinators.pop(group_id, None)
                raise _Retry(f"coordinator {node}: {error_name(code)}")
            return node, response

        return self._retrying(f"group {group_id!r}", attempt)

    # -- ListGroups / DescribeGroups ----------------------------------------------------
    def list_groups(self) -> list[GroupDescription]:
        """Every group of the cluster, described, sorted by id: ListGroups to each broker
        (a group is listed by its coordinator only), then DescribeGroups for the states."""
        meta = self.metadata([])
        ids: set[str] = set()
        for broker in meta.brokers:
            address = (broker.host, broker.port)

            def attempt(address: tuple[str, int] = address, broker_id: int = broker.id) -> list[dict]:
                response = self._request_to(address, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION, {})
                code = response["error_code"]
                if code in _COORDINATOR_RETRIABLE:
                    raise _Retry(f"broker {broker_id}: {error_name(code)}")
                if code != 0:
                    raise AdminError(f"listing the groups of broker {broker_id}: {error_name(code)}")
                return response["groups"]

            ids.update(g["group_id"] for g in self._retrying(f"listing the groups of broker {broker.id} at {broker.host}:{broker.port}", attempt))
        described = (self.describe_group(g) for g in sorted(ids))
        return [d for d in described if d.exists]  # deleted between the two requests

    def describe_group(self, group_id: str) -> GroupDescription:
        """The group as its coordinator sees it; state Dead when it does not exist."""
        body = {"groups": [group_id], "include_authorized_operations": False}
        node, response = self._to_coordinator(group_id, ApiKey.DESCRIBE_GROUPS, DESCRIBE_GROUPS_VERSION, body,
                                               lambda r: r["groups"][0]["error_code"])
        g = response["groups"][0]
        code = g["error_code"]
        if code == ErrorCode.INVALID_GROUP_ID:
            raise AdminError(f"invalid group id {group_id!r}")
        if code != 0:
            raise AdminError(f"describing group {group_id!r}: {error_name(code)}")
        consumer = g["protocol_type"] == "consumer"
        members = tuple(sorted((GroupMember(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                                            decode_assignment(m["member_assignment"]) if consumer else None)
                                for m in g["members"]), key=lambda m: (m.client_id, m.member_id)))
        return GroupDescription(group_id, g["group_state"], g["protocol_type"], g["protocol_data"], members, node)

    # -- OffsetFetch / OffsetCommit -----------------------------------------------------
    def committed_offsets(self, group_id: str) -> dict[TP, int]:
        """Every offset the group has committed (OffsetFetch with null topics)."""
        _, response = self._to_coordinator(group_id, ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION,
                                           {"group_id": group_id, "topics": None}, lambda r: r["error_code"])
        if response["error_code"] != 0:
            raise AdminError(f"fetching the offsets of group {group_id!r}: {error_name(response['error_code'])}")
        out = {}
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["error_code"] != 0:
                    raise AdminError(f"fetching the offset of group {group_id!r} for {t['name']}-{p['partition_index']}: "
                                     f"{error_name(p['error_code'])}")
                if p["committed_offset"] >= 0:
                    out[(t["name"], p["partition_index"])] = p["committed_offset"]
        return dict(sorted(out.items()))

    def commit_offsets(self, group_id: str, offsets: dict[TP, int]) -> None:
        """Commit as a client outside the group (generation -1, no member id), as Kafka's
        admin client does; the coordinator accepts that only while the group is Empty (or
        does not exist, which creates it)."""
        body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                                                      for (t2, p), o in offsets.items() if t2 == t]}
                           for t in dict.fromkeys(t for t, _ in offsets)]}

        def error_of(response: dict) -> int:
            codes = {p["error_code"] for t in response["topics"] for p in t["partitions"]}
            return next((c for c in codes if c in _COORDINATOR_RETRIABLE), 0)

        _, response = self._to_coordinator(group_id, ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_VERSION, body, error_of)
        failed = sorted((p["error_code"], t["name"], p["partition_index"])
                        for t in response["topics"] for p in t["partitions"] if p["error_code"] != 0)
        if not failed:
            return
        code, topic, partition = failed[0]
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS):
            raise AdminError(f"consumer group {group_id!r} has active members ({error_name(code)}): "
                             "offsets can be reset only while the group is inactive")
        raise AdminError(f"committing offsets of group {group_id!r} failed for {len(failed)} partitions, "
                         f"first {topic}-{partition}: {error_name(code)}")

    # -- DeleteGroups -------------------------------------------------------------------
    def delete_group(self, group_id: str) -> None:
        _, response = self._to_coordinator(group_id, ApiKey.DELETE_GROUPS, DELETE_GROUPS_VERSION,
                                           {"groups_names": [group_id]}, lambda r: r["results"][0]["error_code"])
        code = response["results"][0]["error_code"]
        if code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise AdminError(f"consumer group {group_id!r} does not exist")
        if code == ErrorCode.NON_EMPTY_GROUP:
            raise AdminError(f"consumer group {group_id!r} is not empty (NON_EMPTY_GROUP): "
                             "it has active members; stop them first")
        if code == ErrorCode.INVALID_GROUP_ID:
            raise AdminError(f"invalid group id {group_id!r}")
        if code != 0:
            raise AdminError(f"deleting group {group_id!r}: {error_name(code)}")

    # -- ListOffsets --------------------------------------------------------------------
    def list_offsets(self, partitions: Iterable[TP], timestamp: int) -> dict[TP, int]:
        """Per partition, the offset for `timestamp` (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
        or ms since the epoch: the first offset whose record timestamp is at or after it,
        NO_OFFSET when there is none), asking each partition's leader."""
        wanted = sorted(set(partitions))
        out: dict[TP, int] = {}

        def attempt() -> dict[TP, int]:
            left = [tp for tp in wanted if tp not in out]
            meta = self.metadata(sorted({t for t, _ in left}))
            for leader, tps in _by_leader(meta, left).items():
                broker = meta.broker(leader)
                if broker is None:
                    raise _Retry(f"{len(tps)} partitions have no leader")
                out.update(self._list_offsets_at((broker.host, broker.port), tps, timestamp))
            missing = [tp for tp in wanted if tp not in out]
            if missing:
                raise _Retry(f"{len(missing)} partitions not answered by their leader, first {missing[0][0]}-{missing[0][1]}")
            return out

        return dict(sorted(self._retrying("listing offsets", attempt).items()))

    def _list_offsets_at(self, address: tuple[str, int], tps: list[TP], timestamp: int) -> dict[TP, int]:
        """The answers of one leader; partitions with a retriable error are left out."""
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                                                      for t2, p in tps if t2 == t]}
                           for t in dict.fromkeys(t for t, _ in tps)]}
        response = self._request_to(address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        out = {}
        for t in response["topics"]:
            for p in t["partitions"]:
                code = p["error_code"]
                if code in _LEADER_RETRIABLE:
                    continue
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise AdminError(f"unknown topic or partition {t['name']}-{p['partition_index']}")
                if code != 0:
                    raise AdminError(f"listing offsets of {t['name']}-{p['partition_index']}: {error_name(code)}")
                out[(t["name"], p["partition_index"])] = p["offset"]
        return out


def _by_leader(meta: ClusterMetadata, tps: list[TP]) -> dict[int, list[TP]]:
    out: dict[int, list[TP]] = {}
    for topic, partition in tps:
        info = meta.topics.get(topic)
        part = next((p for p in info.partitions if p.partition == partition), None) if info else None
        if part is None:
            raise AdminError(f"unknown topic or partition {topic}-{partition}")
        out.setdefault(part.leader, []).append((topic, partition))
    return out
