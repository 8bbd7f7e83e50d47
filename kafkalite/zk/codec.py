"""Znode values (DESIGN.md section 2): frozen dataclasses and their UTF-8 JSON encoding.

Decoders are strict about the fields they need (types included: `true` is not a broker
id) and ignore fields they do not know, so a newer broker may add fields. Anything else
raises ZnodeDecodeError naming the path: a znode we cannot read is reported, never guessed.

Versions of the znodes themselves (the partition epoch of a state znode, ...) are not part
of these values; the adapter returns them alongside.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from kafkalite.zk.errors import ZnodeDecodeError
from kafkalite.zk.paths import last_component, topic_path

NO_LEADER = -1
PRODUCER_ID_BLOCK_VERSION = 1
REASSIGNMENT_VERSION = 1
# The throttle of /admin/reassign_partitions: both rates in bytes/s (Kafka's config names).
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
THROTTLE_KEYS = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE)


@dataclasses.dataclass(frozen=True)
class BrokerRegistration:
    """/brokers/ids/<id>; the id is the znode name, not part of the value."""

    id: int
    host: str
    port: int
    inter_broker_port: int
    admin_port: int
    rack: str | None = None
    # (listener name, advertised host, port) per client listener when there are several
    # (Kafka's named listeners); written only then, so a one-listener znode keeps its layout.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # The process registering recovered its logs after an unclean shutdown (a crash): what
    # it had not flushed may be gone. Written only when true; every registration of that
    # process says it (one after a session expiry too: a controller may not have seen the
    # first before it went).
    unclean_start: bool = False


@dataclasses.dataclass(frozen=True)
class TopicAssignment:
    """/brokers/topics/<topic>: partition -> assigned replicas (AR; first is preferred).

    While a partition moves (KIP-455), `adding_replicas[p]` and `removing_replicas[p]` name
    the replicas being added and removed, and `partitions[p]` is the original replicas (in
    their order) followed by the adding ones: original = replicas - adding, target =
    replicas - removing (its order is the admin entry's, kafkalite.core.reassignment). A partition at rest has no entry in either map; empty lists are dropped, and
    the maps are written only when non-empty (absent = empty), so the znode of a topic at
    rest keeps its layout.

    `topic_id` (KIP-516, Kafka's "topic_id"): given by CreateTopics when the znode is
    created (new_topic_id), kept by every later write; None for a topic created before
    kafkalite had ids (the field is absent then). It tells a topic from an earlier one of
    the same name (a broker's log of a deleted topic is not the new topic's replica).
    """

    partitions: dict[int, list[int]]
    config: dict[str, str] = dataclasses.field(default_factory=dict)
    adding_replicas: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    topic_id: str | None = None

    def is_moving(self, partition: int) -> bool:
        return bool(self.adding_replicas.get(partition) or self.removing_replicas.get(partition))

    def original_replicas(self, partition: int) -> list[int]:
        """The replicas before the move (all of them when the partition is at rest)."""
        adding = set(self.adding_replicas.get(partition, ()))
        return [r for r in self.partitions[partition] if r not in adding]

    def target_replicas(self, partition: int) -> list[int]:
        """The replicas after the move (all of them when the partition is at rest)."""
        removing = set(self.removing_replicas.get(partition, ()))
        return [r for r in self.partitions[partition] if r not in removing]


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


@dataclasses.dataclass(frozen=True)
class Reassignment:
    """/admin/reassign_partitions (Kafka 2.x): (topic, partition) -> target replicas (first
    = preferred leader), and the optional replication throttle in bytes/s keyed by
    THROTTLE_KEYS. The controller removes a partition's entry when its move is finished and
    deletes the znode when none remain; deleting it cancels what is still in progress. A
    plan file (`kafkalite reassign generate`) has the same layout without the throttle."""

    partitions: dict[tuple[str, int], tuple[int, ...]]
    throttle: dict[str, int] = dataclasses.field(default_factory=dict)


def reassignment_throttle(rate_bytes_per_s: int) -> dict[str, int]:
    """The throttle map for one rate: leader and follower both at `rate_bytes_per_s`."""
    assert rate_bytes_per_s > 0
    return {key: rate_bytes_per_s for key in THROTTLE_KEYS}


# --------------------------------------------------------------------------- encoding


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_broker_registration(reg: BrokerRegistration) -> bytes:
    value: dict[str, Any] = {
        "host": reg.host,
        "port": reg.port,
        "inter_broker_port": reg.inter_broker_port,
        "admin_port": reg.admin_port,
        "rack": reg.rack,
    }
    if reg.endpoints:
        value["endpoints"] = [list(e) for e in reg.endpoints]
    if reg.unclean_start:
        value["unclean_start"] = True
    return _dumps(value)


def _partition_map(value: dict[int, list[int]]) -> dict[str, list[int]]:
    return {str(p): list(replicas) for p, replicas in sorted(value.items())}


def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    out: dict[str, Any] = {"partitions": _partition_map(assignment.partitions), "config": dict(assignment.config)}
    adding = _partition_map({p: ids for p, ids in assignment.adding_replicas.items() if ids})
    removing = _partition_map({p: ids for p, ids in assignment.removing_replicas.items() if ids})
    if adding:
        out["adding_replicas"] = adding
    if removing:
        out["removing_replicas"] = removing
    if assignment.topic_id is not None:
        out["topic_id"] = assignment.topic_id
    return _dumps(out)


def new_topic_id() -> str:
    """A random topic id as Kafka writes one (Uuid.toString: 16 bytes, URL-safe base64
    without padding, 22 characters); like Kafka's Uuid.randomUuid, never one starting
    with "-" (it reads as a command-line option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def _is_topic_id(value: Any) -> bool:
    """Kafka's Uuid.fromString: URL-safe base64 of 16 bytes, 22 characters unpadded."""
    return isinstance(value, str) and len(value) == 22 and value.isascii() and all(c.isalnum() or c in "-_" for c in value)


class PartitionStateFields(Protocol):
    """What encode_partition_state reads: codec.PartitionState, or the controller core's
    own PartitionState (which carries the same fields), written without a copy."""

    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def isr(self) -> Sequence[int]: ...
    @property
    def controller_epoch(self) -> int: ...


def encode_partition_state(state: PartitionStateFields) -> bytes:
    """The same bytes as json.dumps of the map with compact separators, formatted directly:
    a new controller writes tens of thousands of these in its take-over (every field is
    an int, so the formatting is exact)."""
    leader, leader_epoch, isr, controller_epoch = state.leader, state.leader_epoch, state.isr, state.controller_epoch
    assert all(type(v) is int for v in (leader, leader_epoch, controller_epoch, *isr)), state
    return (f'{{"leader":{leader},"leader_epoch":{leader_epoch},"isr":[{",".join(map(str, isr))}],'
            f'"controller_epoch":{controller_epoch}}}').encode()


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


def encode_reassignment(value: Reassignment) -> bytes:
    out: dict[str, Any] = {
        "version": REASSIGNMENT_VERSION,
        "partitions": [
            {"topic": topic, "partition": partition, "replicas": list(replicas)}
            for (topic, partition), replicas in sorted(value.partitions.items())
        ],
    }
    if value.throttle:
        out["throttle"] = dict(value.throttle)
    return _dumps(out)


ENTITY_CONFIG_VERSION = 1
CONFIG_CHANGE_VERSION = 2


def encode_entity_config(config: dict[str, str]) -> bytes:
    """/config/topics/<t>, /config/brokers/<id|<default>>: Kafka 2.x's layout."""
    return _dumps({"version": ENTITY_CONFIG_VERSION, "config": dict(sorted(config.items()))})


def encode_config_change(entity_path: str) -> bytes:
    """/config/changes/config_change_N: which entity changed ("topics/foo", "brokers/1")."""
    return _dumps({"version": CONFIG_CHANGE_VERSION, "entity_path": entity_path})


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
    if not name.isascii() or not name.isdigit():
        r.fail(f"znode name {name!r} is not a broker id")
    rack = r.obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        r.fail(f"rack must be a string or null, got {rack!r}")
    raw_endpoints = r.obj.get("endpoints") or []
    if not isinstance(raw_endpoints, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and isinstance(e[1], str) and isinstance(e[2], int)
            for e in raw_endpoints):
        r.fail(f"endpoints must be a list of [listener, host, port], got {raw_endpoints!r}")
    unclean_start = r.obj.get("unclean_start", False)
    if not isinstance(unclean_start, bool):
        r.fail(f"unclean_start must be a boolean, got {unclean_start!r}")
    return BrokerRegistration(
        id=int(name),
        host=r.str("host"),
        port=r.int("port", 0),
        inter_broker_port=r.int("inter_broker_port", 0),
        admin_port=r.int("admin_port", 0),
        rack=rack,
        endpoints=tuple((n, h, p) for n, h, p in raw_endpoints),
        unclean_start=unclean_start,
    )


def _decode_partition_map(r: _Reader, raw: Any, what: str, entry: str) -> dict[int, list[int]]:
    """{"<partition>": [broker ids]} -> {partition: [broker ids]}, sorted by partition."""
    if not isinstance(raw, dict):
        r.fail(f"{what} must be an object, got {raw!r}")
    out: dict[int, list[int]] = {}
    for key, replicas in raw.items():
        if not key.isascii() or not key.isdigit():
            r.fail(f"{what}: key {key!r} is not a partition number")
        if (type(replicas) is list and all(type(b) is int and b >= 0 for b in replicas)
                and len(set(replicas)) == len(replicas)):
            out[int(key)] = replicas  # the common case, checked in one expression (10,000 per topic)
        else:
            out[int(key)] = r.broker_ids(replicas, f"{entry} of partition {key}")
    return dict(sorted(out.items()))


def _decode_moving_replicas(r: _Reader, key: str, partitions: dict[int, list[int]]) -> dict[int, list[int]]:
    """adding_replicas / removing_replicas (KIP-455): each a subset of its partition's
    replicas; absent means empty, and empty lists are dropped."""
    moving = {p: ids for p, ids in _decode_partition_map(r, r.obj.get(key, {}), key, key).items() if ids}
    for p, ids in moving.items():
        if p not in partitions:
            r.fail(f"{key} names partition {p}, which the topic does not have")
        if not set(ids) <= set(partitions[p]):
            r.fail(f"{key} of partition {p} ({ids}) are not all among its replicas {partitions[p]}")
    return moving


def decode_topic_assignment(data: bytes | None, path: str) -> TopicAssignment:
    r = _Reader(data, path)
    partitions = _decode_partition_map(r, r.field("partitions"), "partitions", "replicas")
    raw_config = r.obj.get("config", {})
    if not isinstance(raw_config, dict) or not all(isinstance(v, str) for v in raw_config.values()):
        r.fail(f"config must be an object of strings, got {raw_config!r}")
    adding = _decode_moving_replicas(r, "adding_replicas", partitions)
    removing = _decode_moving_replicas(r, "removing_replicas", partitions)
    for p in adding.keys() & removing.keys():
        if set(adding[p]) & set(removing[p]):
            r.fail(f"partition {p} both adds and removes {sorted(set(adding[p]) & set(removing[p]))}")
    for p, ids in removing.items():
        if set(ids) == set(partitions[p]):
            r.fail(f"removing_replicas of partition {p} would leave it no replica")
    topic_id = r.obj.get("topic_id")  # absent: a topic created before topic ids
    if topic_id is not None and not _is_topic_id(topic_id):
        r.fail(f"topic_id must be a 22-character URL-safe base64 UUID, got {topic_id!r}")
    return TopicAssignment(partitions=partitions, config=dict(raw_config), adding_replicas=adding, removing_replicas=removing,
                           topic_id=topic_id)


_decode_json = json.JSONDecoder().decode
# Exactly the bytes encode_partition_state writes, i.e. every state a kafkalite controller
# wrote: one match, about a quarter of the time json and the checks below take (a new
# controller decodes 100,000 of these in its take-over). Anything else, Kafka's own layout
# (with "version") included, goes the general way.
_NUM = rb"(?:0|[1-9][0-9]*)"  # a JSON non-negative integer (no leading zeros)
_OWN_STATE = re.compile(rb'\{"leader":(-1|' + _NUM + rb'),"leader_epoch":(' + _NUM + rb'),'
                        rb'"isr":\[(' + _NUM + rb"(?:," + _NUM + rb")*)?\],"
                        rb'"controller_epoch":(' + _NUM + rb")\}\Z")

PartitionStateTuple = tuple[int, int, tuple[int, ...], int]  # leader, leader_epoch, isr, controller_epoch


def decode_partition_state_tuple(data: bytes | None, path: str) -> PartitionStateTuple:
    """decode_partition_state's fields as a plain tuple, with no object built per partition
    for the common case (the controller's take-over builds its own)."""
    if data:
        m = _OWN_STATE.match(data)
        if m is not None:
            leader, epoch, isr, controller_epoch = m.groups()
            members = tuple(map(int, isr.split(b","))) if isr else ()
            if len(set(members)) == len(members):
                return int(leader), int(epoch), members, int(controller_epoch)
    st = decode_partition_state(data, path)
    return st.leader, st.leader_epoch, tuple(st.isr), st.controller_epoch


def decode_partition_state(data: bytes | None, path: str) -> PartitionState:
    """A well-formed state takes a fast path with the same checks in one expression;
    anything else goes through the _Reader, which names what is wrong."""
    try:
        obj = _decode_json(bytes(data).decode("utf-8")) if data else None
    except (UnicodeDecodeError, ValueError):
        obj = None
    if type(obj) is dict:
        leader, epoch, isr, controller_epoch = (obj.get("leader"), obj.get("leader_epoch"), obj.get("isr"),
                                                obj.get("controller_epoch"))
        if (type(leader) is int and leader >= NO_LEADER and type(epoch) is int and epoch >= 0
                and type(controller_epoch) is int and controller_epoch >= 0 and type(isr) is list
                and all(type(b) is int and b >= 0 for b in isr) and len(set(isr)) == len(isr)):
            return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=controller_epoch)
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


def decode_reassignment(data: bytes | None, path: str) -> Reassignment:
    """Strict: version 1, every entry a {topic, partition, replicas} with a non-empty list
    of distinct broker ids, no partition twice, throttle rates positive integers under
    THROTTLE_KEYS. Unknown fields (Kafka's "log_dirs") are ignored."""
    r = _Reader(data, path)
    version = r.int("version")
    if version != REASSIGNMENT_VERSION:
        r.fail(f"unsupported reassignment version {version}")
    raw = r.field("partitions")
    if not isinstance(raw, list):
        r.fail(f"partitions must be a list, got {raw!r}")
    partitions: dict[tuple[str, int], tuple[int, ...]] = {}
    for entry in raw:
        if not isinstance(entry, dict):
            r.fail(f"partition entry must be an object, got {entry!r}")
        for key in ("topic", "partition", "replicas"):
            if key not in entry:
                r.fail(f"partition entry {entry!r} has no {key!r}")
        topic = entry["topic"]
        if not isinstance(topic, str):
            r.fail(f"topic must be a string, got {topic!r}")
        try:
            topic_path(topic)
        except ValueError as e:
            r.fail(str(e))
        partition = r.check_int(entry["partition"], f"partition of topic {topic!r}", 0)
        replicas = r.broker_ids(entry["replicas"], f"replicas of {topic}-{partition}")
        if not replicas:
            r.fail(f"replicas of {topic}-{partition} must not be empty")
        if (topic, partition) in partitions:
            r.fail(f"{topic}-{partition} is listed twice")
        partitions[(topic, partition)] = tuple(replicas)
    raw_throttle = r.obj.get("throttle", {})
    if not isinstance(raw_throttle, dict):
        r.fail(f"throttle must be an object, got {raw_throttle!r}")
    throttle: dict[str, int] = {}
    for key, rate in raw_throttle.items():
        if key not in THROTTLE_KEYS:
            r.fail(f"unknown throttle {key!r}; expected {' or '.join(THROTTLE_KEYS)}")
        throttle[key] = r.check_int(rate, key, 1)
    return Reassignment(partitions=dict(sorted(partitions.items())), throttle=throttle)


def decode_entity_config(data: bytes | None, path: str) -> dict[str, str]:
    r = _Reader(data, path)
    raw = r.obj.get("config", {})
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        r.fail(f"config must be an object of strings, got {raw!r}")
    return dict(raw)


# The entity kinds of Kafka's /config tree that change notifications name.
CONFIG_ENTITY_KINDS = ("topics", "brokers", "users", "clients", "ips")


def decode_config_change(data: bytes | None, path: str) -> str:
    """The entity path of a change notification ("topics/foo", "brokers/<default>",
    "users/alice": every entity kind Kafka 2.x announces; readers pick the kinds they act on)."""
    r = _Reader(data, path)
    entity = r.str("entity_path")
    kind, sep, name = entity.partition("/")
    if not sep or not name or kind not in CONFIG_ENTITY_KINDS:
        r.fail(f"entity_path must be <{'|'.join(CONFIG_ENTITY_KINDS)}>/<name>, got {entity!r}")
    return entity
