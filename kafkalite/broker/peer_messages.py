"""Broker <-> broker requests of the inter-broker RPC that are not the controller's (those are
kafkalite.core.messages): a follower's ReplicaFetch and OffsetsForLeaderEpoch, and the
EndOffsets a group coordinator asks for its lag figures. Each has one `to_wire` (the sender's
RPC header, less the `sender` the transport adds to every call) and one `from_wire` (the
receiver's, kafkalite.broker.inter_broker), so the layout is written down once. `from_wire`
raises KeyError, TypeError, ValueError or IndexError for a header it cannot read: the
receiver answers that INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from kafkalite.core.fetch_session import SessionPartition

TP = tuple[str, int]


class ReplicaFetchRequest(NamedTuple):
    """A follower's fetch in its session with the leader (kafkalite.core.fetch_session): the
    partitions whose fetch state changed since its last request, and those it no longer
    fetches. `session_id` 0 opens a session (a full request). `replica_id` is the header's
    `sender`, which the RPC transport sets."""

    replica_id: int
    broker_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partition_max_bytes: int
    session_id: int
    session_epoch: int
    changed: dict[TP, SessionPartition]
    forgotten: list[TP]

    def to_wire(self) -> dict[str, Any]:
        return {
            "broker_epoch": self.broker_epoch, "max_wait_ms": self.max_wait_ms, "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes, "partition_max_bytes": self.partition_max_bytes,
            "partitions": [[t, p, *sp] for (t, p), sp in self.changed.items()],  # (SessionPartition's fields in order)
            "session": [self.session_id, self.session_epoch],
            "forgotten": [[t, p] for t, p in self.forgotten],
        }

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> ReplicaFetchRequest:
        session_id, session_epoch = (int(x) for x in h["session"])
        # A sixth field, the follower's log start (DeleteRecords' low watermark), is absent
        # from a broker that predates it.
        changed = {(str(t), int(p)): SessionPartition(int(off), int(epoch), int(last_epoch), int(rest[0]) if rest else -1)
                   for t, p, off, epoch, last_epoch, *rest in h["partitions"]}
        return cls(int(h["sender"]), int(h.get("broker_epoch", -1)), int(h.get("max_wait_ms", 0)), int(h.get("min_bytes", 1)),
                   int(h.get("max_bytes", 10 << 20)), int(h.get("partition_max_bytes", 1 << 20)), session_id, session_epoch,
                   changed, [(str(t), int(p)) for t, p in h.get("forgotten") or ()])


class EndOffsetsRequest(NamedTuple):
    partitions: list[TP]

    def to_wire(self) -> dict[str, Any]:
        return {"partitions": [[t, p] for t, p in self.partitions]}

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> EndOffsetsRequest:
        return cls([(str(t), int(p)) for t, p in h["partitions"]])


class OffsetsForLeaderEpochRequest(NamedTuple):
    """(topic, partition, the follower's current leader epoch, the epoch whose end it asks)."""

    partitions: list[tuple[str, int, int, int]]

    def to_wire(self) -> dict[str, Any]:
        return {"partitions": [list(row) for row in self.partitions]}

    @classmethod
    def from_wire(cls, h: Mapping[str, Any]) -> OffsetsForLeaderEpochRequest:
        return cls([(str(t), int(p), int(current), int(requested)) for t, p, current, requested in h["partitions"]])
