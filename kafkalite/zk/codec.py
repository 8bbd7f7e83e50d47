"""Znode values (DESIGN.md section 2): frozen dataclasses and their UTF-8 JSON encoding.

Decoders are strict about the fields they need (types included: `true` is not a broker
id) and ignore fields they do not know, so a newer broker may add fields. Anything else
raises ZnodeDecodeError naming the path: a znode we cannot read is reported, never guessed.

Versions of the znodes themselves (the partition epoch of a state znode, ...) are not part
of these values; the adapter returns them alongside.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from kafkalite.zk.errors import ZnodeDecodeError
from kafkalite.zk.paths import last_component

NO_LEADER = -1
PRODUCER_ID_BLOCK_VERSION = 1


@dataclasses.dataclass(frozen=True)
class BrokerRegistration:
    """/brokers/ids/<id>; the id is the znode name, not part of the value."""

    id: int
    host: str
    port: int
    inter_broker_port: int
    admin_port: int
    rack: str | None = None


@dataclasses.dataclass(frozen=True)
class TopicAssignment:
    """/brokers/topics/<topic>: partition -> assigned replicas (AR; first is preferred)."""

    partitions: dict[int, list[int]]
    config: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PartitionState:
    """/brokers/topics/<t>/partitions/<p>/state, written by the controller only (KIP-497).
    The znode version (the partition epoch) travels next to it, not inside."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int


@dataclasses.dataclass(frozen=True)
class ControllerInfo:
    """/controller (ephemeral)."""

    broker_id: int
    timestamp: int  # ms since the epoch, informational only


@dataclasses.dataclass(frozen=True)
class ControllerEpoch:
    """/controller_epoch."""

    epoch: int


@dataclasses.dataclass(frozen=True)
class ProducerIdBlock:
    """/latest_producer_id_block, Kafka's layout; block_end is inclusive."""

    broker_id: int
    block_start: int
    block_end: int


@dataclasses.dataclass(frozen=True)
class ReplicaList:
    """/admin/partitions_reassigned/<t>/<p> and /admin/partitions_add/<t>/<p>."""

    replicas: list[int]


@dataclasses.dataclass(frozen=True)
class PreferredReplicaElection:
    """/admin/preferred_replica_election."""

    partitions: list[tuple[str, int]]


# --------------------------------------------------------------------------- encoding


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_broker_registration(reg: BrokerRegistration) -> bytes:
    return _dumps(
        {
            "host": reg.host,
            "port": reg.port,
            "inter_broker_port": reg.inter_broker_port,
            "admin_port": reg.admin_port,
            "rack": reg.rack,
        }
    )


def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    partitions = {str(p): list(replicas) for p, replicas in sorted(assignment.partitions.items())}
    return _dumps({"partitions": partitions, "config": dict(assignment.config)})


def encode_partition_state(state: PartitionState) -> bytes:
    return _dumps(
        {
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
            "controller_epoch": state.controller_epoch,
        }
    )


def encode_controller_info(info: ControllerInfo) -> bytes:
    return _dumps({"brokerid": info.broker_id, "timestamp": info.timestamp})


def encode_controller_epoch(epoch: ControllerEpoch) -> bytes:
    return _dumps({"epoch": epoch.epoch})


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _dumps(
        {
            "version": PRODUCER_ID_BLOCK_VERSION,
            "broker": block.broker_id,
            "block_start": block.block_start,
            "block_end": block.block_end,
        }
    )


def encode_replica_list(value: ReplicaList) -> bytes:
    return _dumps({"replicas": list(value.replicas)})


def encode_preferred_replica_election(value: PreferredReplicaElection) -> bytes:
    return _dumps({"partitions": [[t, p] for t, p in value.partitions]})


def encode_empty() -> bytes:
    """`{}`: the value of /admin/delete_topics/<t> and /admin/partitions_remove/<t>/<p>."""
    return b"{}"


# --------------------------------------------------------------------------- decoding


class _Reader:
    """Typed field access on one decoded JSON object; every failure names the path."""

    def __init__(self, data: bytes | None, path: str) -> None:
        self.path = path
        if data is None:
            self.fail("no data")
        try:
            value = json.loads(bytes(data).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            self.fail(f"not UTF-8 JSON ({e})")
        if not isinstance(value, dict):
            self.fail(f"expected a JSON object, got {type(value).__name__}")
        self.obj: dict[str, Any] = value

    def fail(self, reason: str):
        raise ZnodeDecodeError(self.path, reason)

    def field(self, key: str) -> Any:
        if key not in self.obj:
            self.fail(f"missing field {key!r}")
        return self.obj[key]

    def int(self, key: str, minimum: int | None = None) -> int:
        return self.check_int(self.field(key), key, minimum)

    def check_int(self, value: Any, what: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{what} must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            self.fail(f"{what} must be >= {minimum}, got {value}")
        return value

    def str(self, key: str) -> str:
        value = self.field(key)
        if not isinstance(value, str):
            self.fail(f"{key} must be a string, got {value!r}")
        return value

    def broker_ids(self, value: Any, what: str) -> list[int]:
        if not isinstance(value, list):
            self.fail(f"{what} must be a list, got {value!r}")
        ids = [self.check_int(v, f"{what} entry", 0) for v in value]
        if len(set(ids)) != len(ids):
            self.fail(f"{what} has duplicate broker ids: {ids}")
        return ids


def decode_broker_registration(data: bytes | None, path: str) -> BrokerRegistration:
    r = _Reader(data, path)
    name = last_component(path)
    if not name.isdigit():
        r.fail(f"znode name {name!r} is not a broker id")
    rack = r.obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        r.fail(f"rack must be a string or null, got {rack!r}")
    return BrokerRegistration(
        id=int(name),
        host=r.str("host"),
        port=r.int("port", 0),
        inter_broker_port=r.int("inter_broker_port", 0),
        admin_port=r.int("admin_port", 0),
        rack=rack,
    )


def decode_topic_assignment(data: bytes | None, path: str) -> TopicAssignment:
    r = _Reader(data, path)
    raw_partitions = r.field("partitions")
    if not isinstance(raw_partitions, dict):
        r.fail(f"partitions must be an object, got {raw_partitions!r}")
    partitions: dict[int, list[int]] = {}
    for key, replicas in raw_partitions.items():
        if not key.isdigit():
            r.fail(f"partition key {key!r} is not a partition number")
        partitions[int(key)] = r.broker_ids(replicas, f"replicas of partition {key}")
    raw_config = r.obj.get("config", {})
    if not isinstance(raw_config, dict) or not all(isinstance(v, str) for v in raw_config.values()):
        r.fail(f"config must be an object of strings, got {raw_config!r}")
    return TopicAssignment(partitions=dict(sorted(partitions.items())), config=dict(raw_config))


def decode_partition_state(data: bytes | None, path: str) -> PartitionState:
    r = _Reader(data, path)
    return PartitionState(
        leader=r.int("leader", NO_LEADER),
        leader_epoch=r.int("leader_epoch", 0),
        isr=r.broker_ids(r.field("isr"), "isr"),
        controller_epoch=r.int("controller_epoch", 0),
    )


def decode_controller_info(data: bytes | None, path: str) -> ControllerInfo:
    r = _Reader(data, path)
    return ControllerInfo(broker_id=r.int("brokerid", 0), timestamp=r.int("timestamp"))


def decode_controller_epoch(data: bytes | None, path: str) -> ControllerEpoch:
    r = _Reader(data, path)
    return ControllerEpoch(epoch=r.int("epoch", 0))


def decode_producer_id_block(data: bytes | None, path: str) -> ProducerIdBlock:
    r = _Reader(data, path)
    version = r.int("version")
    if version != PRODUCER_ID_BLOCK_VERSION:
        r.fail(f"unsupported producer id block version {version}")
    block = ProducerIdBlock(
        broker_id=r.int("broker", 0),
        block_start=r.int("block_start", 0),
        block_end=r.int("block_end", 0),
    )
    if block.block_end < block.block_start:
        r.fail(f"block_end {block.block_end} < block_start {block.block_start}")
    return block


def decode_replica_list(data: bytes | None, path: str) -> ReplicaList:
    r = _Reader(data, path)
    return ReplicaList(replicas=r.broker_ids(r.field("replicas"), "replicas"))


def decode_preferred_replica_election(data: bytes | None, path: str) -> PreferredReplicaElection:
    r = _Reader(data, path)
    raw = r.field("partitions")
    if not isinstance(raw, list):
        r.fail(f"partitions must be a list, got {raw!r}")
    partitions: list[tuple[str, int]] = []
    for entry in raw:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            r.fail(f"partition entry must be [topic, partition], got {entry!r}")
        partitions.append((entry[0], r.check_int(entry[1], "partition", 0)))
    return PreferredReplicaElection(partitions=partitions)
