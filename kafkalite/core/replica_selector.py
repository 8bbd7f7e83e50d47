"""Which replica a consumer should fetch from (KIP-392, seed 003): the selector interface
and the two built-in selectors.

The leader of a partition answers a consumer's Fetch (v11+, which carries the client's
`rack_id`) by asking the configured `replica.selector.class` to choose among a view of the
partition: the leader and the followers that could serve the fetch offset now. When the
choice is another broker, the leader returns no records and names it as the
`preferred_read_replica` (kafkalite.core.consumer_fetch builds the view and applies the
choice).

A selector is any object with `select(topic_partition, client_metadata, partition_view)`
returning one of the view's replicas, or None for "no preference" (the leader serves).
`configure(configs)` (called once at start-up with the broker's settings) and `close()`
(called at shutdown) are optional, as Kafka's default methods are. A Python class given by
its import path (`module.path.ClassName`) is loaded by kafkalite.config.

Pure: the types are frozen values and the built-in selectors decide from them alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ClientMetadata:
    """What the leader knows of the fetching client (Kafka's ClientMetadata)."""

    rack_id: str  # Fetch v11 `rack_id` (librdkafka's `client.rack`); "" when not set
    client_id: str  # the request header's client id; "" when absent
    client_address: str  # the client's IP address as the broker sees it


@dataclass(frozen=True)
class ReplicaView:
    """One replica as a selector sees it (Kafka's ReplicaView): its broker and rack, its
    log end offset as the leader knows it, and how long since it was last caught up with
    the leader (0 for the leader itself)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int

    def __post_init__(self) -> None:
        assert self.broker_id >= 0
        assert self.time_since_last_caught_up_ms >= 0


@dataclass(frozen=True)
class PartitionView:
    """The replicas that could serve a fetch now (the leader included), in broker id order,
    and the leader (Kafka's PartitionView)."""

    replicas: tuple[ReplicaView, ...]
    leader: ReplicaView | None

    def __post_init__(self) -> None:
        ids = [r.broker_id for r in self.replicas]
        assert ids == sorted(set(ids))
        if self.leader is not None:
            assert self.leader in self.replicas


@runtime_checkable
class ReplicaSelector(Protocol):
    """The plug-in interface of `replica.selector.class`. Implementations may also define
    `configure(configs: Mapping[str, Any]) -> None` and `close() -> None`."""

    def select(self, topic_partition: TopicPartition, client_metadata: ClientMetadata,
               partition_view: PartitionView) -> ReplicaView | None: ...


class LeaderSelector:
    """The default: every consumer reads from the leader (no preferred read replica)."""

    def configure(self, configs: Mapping[str, Any]) -> None:
        del configs

    def select(self, topic_partition: TopicPartition, client_metadata: ClientMetadata,
               partition_view: PartitionView) -> ReplicaView | None:
        return partition_view.leader

    def close(self) -> None:
        pass


def most_caught_up(replicas: list[ReplicaView] | tuple[ReplicaView, ...]) -> ReplicaView:
    """Kafka's ReplicaView.comparator: the highest log end offset, then the most recently
    caught up; a remaining tie goes to the lowest broker id, so the choice is stable."""
    assert replicas
    return max(replicas, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms, -r.broker_id))


class RackAwareReplicaSelector:
    """KIP-392's rack-aware selector, as Kafka implements it: with a client rack id, the
    leader if it is in that rack, else the most caught-up replica of the view in that rack;
    without a rack id, or with no replica in the client's rack, the leader."""

    def configure(self, configs: Mapping[str, Any]) -> None:
        del configs

    def select(self, topic_partition: TopicPartition, client_metadata: ClientMetadata,
               partition_view: PartitionView) -> ReplicaView | None:
        rack = client_metadata.rack_id
        if not rack:
            return partition_view.leader
        same_rack = [r for r in partition_view.replicas if r.rack == rack]
        if not same_rack:
            return partition_view.leader
        if partition_view.leader is not None and partition_view.leader in same_rack:
            return partition_view.leader
        return most_caught_up(same_rack)

    def close(self) -> None:
        pass


# The names `replica.selector.class` accepts for the built-ins: the short names and Kafka's
# Java class names (so a Kafka broker config carries over unchanged).
BUILTIN_SELECTORS: Mapping[str, type] = {
    "LeaderSelector": LeaderSelector,
    "RackAwareReplicaSelector": RackAwareReplicaSelector,
    "org.apache.kafka.common.replica.LeaderSelector": LeaderSelector,
    "org.apache.kafka.common.replica.RackAwareReplicaSelector": RackAwareReplicaSelector,
}
