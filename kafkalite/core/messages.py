"""Controller <-> broker messages (DESIGN.md sections 4 and 10): frozen dataclasses, each
with one `to_wire` (a msgpack-able dict, the RPC header) and one `from_wire`.

The controller core builds these; the broker's RPC shell encodes them on the way out and
decodes them on the way in; the simulator passes them as they are. `from_wire(to_wire(m))
== m` for every message (tests/unit/core/test_core_messages.py checks it by property).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

TP = tuple[str, int]


def _configs(raw: Mapping[str, Mapping[str, str]] | None) -> dict[str, dict[str, str]]:
    return {str(t): {str(k): str(v) for k, v in cfg.items()} for t, cfg in (raw or {}).items()}


# ------------------------------------------------------------------ LeaderAndIsr


class PartitionLeadership(NamedTuple):
    """One partition of a LeaderAndIsr: its state znode plus the assigned replicas.
    `partition_epoch` is the state znode's version (KIP-497). A NamedTuple, not a frozen
    dataclass: a controller builds and every broker decodes one per partition (10,000 for
    a new topic), and a frozen dataclass costs several times as much to make; its wire
    form is the tuple itself."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()  # replicas a reassignment is adding (KIP-455)
    removing: tuple[int, ...] = ()

    @property
    def topic_partition(self) -> TP:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class LeaderAndIsr:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[PartitionLeadership, ...]
    init: bool = False
    live_leaders: Mapping[int, tuple[str, int]] = field(default_factory=dict)  # id -> (host, inter-broker port)
    topic_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # bytes/s for replicas being added (leader/follower.replication.throttled.rate); empty: none
    throttle: Mapping[str, int] = field(default_factory=dict)
    # KIP-516: topic -> its id, for the topics of `partitions` that have one (a topic created
    # before topic ids has none; a request from a controller before them carries none).
    # A broker replaces a local log whose id differs (kafkalite.core.replica_manager).
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        out = {
            "controller_id": self.controller_id, "controller_epoch": self.controller_epoch,
            "broker_epoch": self.broker_epoch, "init": self.init,
            "live_leaders": {b: [h, p] for b, (h, p) in self.live_leaders.items()},
            "topic_configs": _configs(self.topic_configs),
            "throttle": dict(self.throttle),
            "partitions": self.partitions,  # msgpack packs tuples (and these NamedTuples) as arrays
        }
        if self.topic_ids:  # absent otherwise: the layout of a request without ids is unchanged
            out["topic_ids"] = dict(self.topic_ids)
        return out

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> LeaderAndIsr:
        return cls(
            controller_id=int(h["controller_id"]), controller_epoch=int(h["controller_epoch"]),
            broker_epoch=int(h.get("broker_epoch", -1)), init=bool(h.get("init", False)),
            live_leaders={int(b): (str(a[0]), int(a[1])) for b, a in (h.get("live_leaders") or {}).items()},
            topic_configs=_configs(h.get("topic_configs")),
            throttle={str(k): int(v) for k, v in (h.get("throttle") or {}).items()},
            partitions=tuple(_leadership(*w) for w in h["partitions"]),
            topic_ids=_topic_ids(h.get("topic_ids")),
        )


def _topic_ids(raw: Any) -> dict[str, str]:
    ids = dict(raw or {})
    for topic, topic_id in ids.items():
        if type(topic) is not str or type(topic_id) is not str:
            raise TypeError(f"topic id {topic!r}: {topic_id!r} is not a string pair")
    return ids


def _ids(raw: Any) -> tuple[int, ...]:
    """Broker ids off the wire: a list of ints (checked) becomes a tuple."""
    ids = tuple(raw)
    for b in ids:
        if type(b) is not int:
            raise TypeError(f"broker id {b!r} is not an int")
    return ids


def _leadership(topic: Any, partition: Any, leader: Any, leader_epoch: Any, isr: Any, partition_epoch: Any,
                replicas: Any, adding: Any = (), removing: Any = ()) -> PartitionLeadership:
    if type(topic) is not str:
        raise TypeError(f"topic {topic!r} is not a string")
    return PartitionLeadership(topic, int(partition), int(leader), int(leader_epoch), _ids(isr), int(partition_epoch),
                               _ids(replicas), _ids(adding), _ids(removing))


# ------------------------------------------------------------------ UpdateMetadata


@dataclass(frozen=True)
class BrokerEndpoint:
    id: int
    host: str
    port: int
    inter_broker_port: int
    admin_port: int
    rack: str | None
    epoch: int
    # (listener name, host, port) of each named client listener, when the broker has more
    # than one; `host`/`port` are the first one's. Sent only when non-empty.
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def to_wire(self) -> dict[str, Any]:
        out = {"id": self.id, "host": self.host, "port": self.port, "inter_broker_port": self.inter_broker_port,
               "admin_port": self.admin_port, "rack": self.rack, "epoch": self.epoch}
        if self.endpoints:
            out["endpoints"] = [list(e) for e in self.endpoints]
        return out

    @classmethod
    def from_wire(cls, b: Mapping[str, Any]) -> BrokerEndpoint:
        return cls(int(b["id"]), str(b["host"]), int(b["port"]), int(b["inter_broker_port"]), int(b["admin_port"]),
                   None if b.get("rack") is None else str(b["rack"]), int(b["epoch"]),
                   tuple((str(n), str(h), int(p)) for n, h, p in b.get("endpoints") or ()))

    def address_for(self, listener: str | None) -> tuple[str, int]:
        """The address a client connected on `listener` must use (the first listener's when
        this broker has no listener of that name)."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


class PartitionMetadata(NamedTuple):
    """One partition of an UpdateMetadata (a NamedTuple for the reason PartitionLeadership
    is one: a full update after a controller failover lists every partition)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass(frozen=True)
class UpdateMetadata:
    """`full` replaces the receiver's cache; otherwise the partitions listed are updated
    and `deleted_topics` dropped. The broker list is always complete."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    brokers: tuple[BrokerEndpoint, ...]
    partitions: tuple[PartitionMetadata, ...] = ()
    full: bool = False
    deleted_topics: tuple[str, ...] = ()
    topic_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    deleted_partitions: tuple[TP, ...] = ()  # removed partitions of topics that stay

    def to_wire(self) -> dict[str, Any]:
        parts = _encoded_partitions(self.partitions)
        return {
            "controller_id": self.controller_id, "controller_epoch": self.controller_epoch,
            "broker_epoch": self.broker_epoch, "full": self.full,
            "brokers": [b.to_wire() for b in self.brokers],
            "partitions": parts, "topic_configs": _configs(self.topic_configs),
            "deleted_topics": list(self.deleted_topics),
            "deleted_partitions": [[t, p] for t, p in self.deleted_partitions],
        }

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> UpdateMetadata:
        return cls(
            controller_id=int(h["controller_id"]), controller_epoch=int(h["controller_epoch"]),
            broker_epoch=int(h.get("broker_epoch", -1)), full=bool(h.get("full", False)),
            brokers=tuple(BrokerEndpoint.from_wire(b) for b in h["brokers"]),
            partitions=tuple(PartitionMetadata(str(t), int(p), int(w[0]), int(w[1]), _ids(w[2]), _ids(w[3]), _ids(w[4]))
                             for t, ps in (h.get("partitions") or {}).items() for p, w in ps.items()),
            deleted_topics=tuple(str(t) for t in h.get("deleted_topics") or ()),
            topic_configs=_configs(h.get("topic_configs")),
            deleted_partitions=tuple((str(t), int(p)) for t, p in h.get("deleted_partitions") or ()),
        )


# The wire form of the last partition list encoded: a controller sends one UpdateMetadata
# with the same partitions to every broker (all 100,000 after a failover), so it is encoded
# once. Kept with the tuple itself, so identity means the same (immutable) list; the wire
# form is only read (packed by msgpack), never changed.
_last_encoded: tuple[tuple[PartitionMetadata, ...], dict[str, dict[int, list[Any]]]] | None = None


def _encoded_partitions(partitions: tuple[PartitionMetadata, ...]) -> dict[str, dict[int, list[Any]]]:
    global _last_encoded
    if _last_encoded is not None and _last_encoded[0] is partitions:
        return _last_encoded[1]
    parts: dict[str, dict[int, list[Any]]] = {}
    for m in partitions:
        parts.setdefault(m.topic, {})[m.partition] = [m.leader, m.leader_epoch, list(m.isr), list(m.replicas), list(m.offline)]
    if len(partitions) > 1:
        _last_encoded = (partitions, parts)
    return parts


# ------------------------------------------------------------------ StopReplica


@dataclass(frozen=True)
class StopReplica:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[TP, ...]
    delete: bool

    def to_wire(self) -> dict[str, Any]:
        return {"controller_id": self.controller_id, "controller_epoch": self.controller_epoch,
                "broker_epoch": self.broker_epoch, "delete": self.delete,
                "partitions": [[t, p] for t, p in self.partitions]}

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> StopReplica:
        return cls(int(h["controller_id"]), int(h["controller_epoch"]), int(h.get("broker_epoch", -1)),
                   tuple((str(t), int(p)) for t, p in h["partitions"]), bool(h.get("delete", False)))


ControllerRequest = LeaderAndIsr | UpdateMetadata | StopReplica


# ------------------------------------------------------------------ broker -> controller


@dataclass(frozen=True)
class AlterIsrProposal:
    """One partition of an AlterIsr (KIP-497)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int
    new_isr_epochs: tuple[int, ...] = ()  # AlterIsrItem.new_isr_epochs (KIP-903); () from an older broker


@dataclass(frozen=True)
class AlterIsrRequest:
    broker_id: int
    broker_epoch: int
    partitions: tuple[AlterIsrProposal, ...]

    # Each proposal's member epochs travel under their own key, parallel to "partitions",
    # not as a seventh field of a partition's row: a controller from before KIP-903 unpacks
    # a row into exactly six names (a seventh made its decoding raise, which ends a
    # controller), while it ignores a key it does not know. A row's seventh field is still
    # read, as the brokers of 5f11616-8d5ec81 sent it.
    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "broker_id": self.broker_id, "broker_epoch": self.broker_epoch,
            "partitions": [[a.topic, a.partition, a.leader, a.leader_epoch, list(a.new_isr), a.partition_epoch]
                           for a in self.partitions]}
        if any(a.new_isr_epochs for a in self.partitions):
            wire["isr_epochs"] = [list(a.new_isr_epochs) for a in self.partitions]
        return wire

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> AlterIsrRequest:
        rows = h["partitions"]
        epochs = h.get("isr_epochs") or [()] * len(rows)
        if len(epochs) != len(rows):
            raise ValueError(f"AlterIsr: {len(epochs)} isr_epochs for {len(rows)} partitions")
        return cls(int(h["broker_id"]), int(h.get("broker_epoch", -1)),
                   tuple(AlterIsrProposal(str(t), int(p), int(leader), int(epoch), tuple(int(b) for b in isr), int(version),
                                          tuple(int(e) for e in (rest[0] if rest else row_epochs)))
                         for (t, p, leader, epoch, isr, version, *rest), row_epochs in zip(rows, epochs)))


@dataclass(frozen=True)
class AlterIsrPartitionResult:
    """The controller's answer for one partition: an error code and the partition's state
    as the controller has it (the leader adopts it on NONE)."""

    topic: str
    partition: int
    error: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True)
class AlterIsrResponse:
    error: int
    partitions: tuple[AlterIsrPartitionResult, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {"error": self.error,
                "partitions": [[r.topic, r.partition, r.error, r.leader, r.leader_epoch, list(r.isr), r.partition_epoch]
                               for r in self.partitions]}

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> AlterIsrResponse:
        return cls(int(h.get("error", 0)),
                   tuple(AlterIsrPartitionResult(str(t), int(p), int(code), int(leader), int(epoch),
                                                 tuple(int(b) for b in isr), int(version))
                         for t, p, code, leader, epoch, isr, version in h.get("partitions") or ()))


@dataclass(frozen=True)
class ControlledShutdownRequest:
    broker_id: int
    broker_epoch: int

    def to_wire(self) -> dict[str, Any]:
        return {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch}

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> ControlledShutdownRequest:
        return cls(int(h["broker_id"]), int(h.get("broker_epoch", -1)))


@dataclass(frozen=True)
class ControlledShutdownResponse:
    """`remaining`: partitions the broker still leads (no other live ISR member)."""

    error: int
    remaining: tuple[TP, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {"error": self.error, "remaining_partitions": [[t, p] for t, p in self.remaining]}

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> ControlledShutdownResponse:
        return cls(int(h.get("error", 0)), tuple((str(t), int(p)) for t, p in h.get("remaining_partitions") or ()))


@dataclass(frozen=True)
class PreferredElectionRequest:
    """`partitions` None: every partition (auto rebalance style)."""

    partitions: tuple[TP, ...] | None

    def to_wire(self) -> dict[str, Any]:
        return {"partitions": None if self.partitions is None else [[t, p] for t, p in self.partitions]}

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> PreferredElectionRequest:
        parts = h.get("partitions")
        return cls(None if parts is None else tuple((str(t), int(p)) for t, p in parts))


@dataclass(frozen=True)
class PreferredElectionResponse:
    error: int
    elected: tuple[TP, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {"error": self.error, "elected": [[t, p] for t, p in self.elected]}

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> PreferredElectionResponse:
        return cls(int(h.get("error", 0)), tuple((str(t), int(p)) for t, p in h.get("elected") or ()))


ControllerResponse = AlterIsrResponse | ControlledShutdownResponse | PreferredElectionResponse
