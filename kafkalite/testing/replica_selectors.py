"""A `replica.selector.class` plug-in for tests (KIP-392): brokers are separate processes,
so a test's selector must be importable by them; this one is, as
`kafkalite.testing.replica_selectors.PinnedReplicaSelector`.

It decides from the client's metadata, not its rack: a client whose client id ends with
`@<broker id>` is sent to that broker when the leader's view offers it (alive, in sync,
holding the fetch offset); every other client reads from the leader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafkalite.core.replica_selector import ClientMetadata, PartitionView, ReplicaView

PIN_SEPARATOR = "@"


class PinnedReplicaSelector:
    def __init__(self) -> None:
        self.configured_for: int | None = None

    def configure(self, configs: Mapping[str, Any]) -> None:
        """The broker passes its settings once, before the first select."""
        self.configured_for = int(configs["broker.id"])

    def select(self, topic_partition: tuple[str, int], client_metadata: ClientMetadata,
               partition_view: PartitionView) -> ReplicaView | None:
        assert self.configured_for is not None, "configure() was not called"
        _, sep, pinned = client_metadata.client_id.rpartition(PIN_SEPARATOR)
        if sep and pinned.isascii() and pinned.isdigit():
            for replica in partition_view.replicas:
                if replica.broker_id == int(pinned):
                    return replica
        return partition_view.leader

    def close(self) -> None:
        self.configured_for = None
