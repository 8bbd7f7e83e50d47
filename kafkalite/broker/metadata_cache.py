"""The broker's view of the cluster, fed only by the controller's UpdateMetadata.

Every broker answers Metadata requests from this cache (DESIGN.md section 4b); it is never
read from ZooKeeper on the request path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from kafkalite.core.messages import BrokerEndpoint, UpdateMetadata

BrokerInfo = BrokerEndpoint  # a registered broker as UpdateMetadata lists it


@dataclasses.dataclass(frozen=True)
class PartitionMeta:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id: int = -1
        self.controller_epoch: int = 0
        self.brokers: dict[int, BrokerInfo] = {}
        # Brokers an update listed once and a later one no longer did (dead or stopped), as
        # they were last seen: the status page shows them down, with their rack.
        self.departed: dict[int, BrokerInfo] = {}
        self.departed_at: dict[int, float] = {}  # when each departed (monotonic s): see listed_brokers
        # Issue 13: registrations (broker -> epoch) this broker found gone itself (its process
        # watch: connection closed, reconnect refused) before the controller's update came.
        # Metadata answers treat them as departed, so a client asking in between is told
        # "leader not available" and asks again soon, instead of waiting on a dead leader.
        self.gone: dict[int, int] = {}
        self.topics: dict[str, dict[int, PartitionMeta]] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.version = 0
        self._racks: dict[int, str | None] = {}
        self._racks_version = -1

    def apply_update(self, update: UpdateMetadata) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata: full snapshot or a delta of changed partitions.
        Returns the partitions it deleted (of deleted topics, or removed partitions)."""
        deleted = [(t, p) for t in update.deleted_topics for p in self.topics.get(t, {})]
        deleted += [(t, p) for t, p in update.deleted_partitions if p in self.topics.get(t, {})]
        self.controller_id = update.controller_id
        self.controller_epoch = update.controller_epoch
        listed = {b.id: b for b in update.brokers}
        self.gone = {b: e for b, e in self.gone.items() if b in listed and listed[b].epoch == e}
        listed = {b: info for b, info in listed.items() if self.gone.get(b) != info.epoch}
        now = time.monotonic()
        for b, info in self.brokers.items():
            if b not in listed:
                self.departed[b] = info
                self.departed_at[b] = now
        for b in listed:
            self.departed.pop(b, None)
            self.departed_at.pop(b, None)
        self.brokers = listed
        if update.full:
            self.topics = {}
            self.topic_configs = {}
        for topic in update.deleted_topics:  # deletions first: a merged update may list them again
            self.topics.pop(topic, None)
            self.topic_configs.pop(topic, None)
        for topic, p in update.deleted_partitions:
            self.topics.get(topic, {}).pop(p, None)
        for m in update.partitions:
            self.topics.setdefault(m.topic, {})[m.partition] = PartitionMeta(m.leader, m.leader_epoch, m.isr, m.replicas, m.offline)
        for topic, cfg in update.topic_configs.items():
            self.topic_configs[topic] = dict(cfg)
        self.version += 1
        return [tp for tp in dict.fromkeys(deleted) if self.partition(*tp) is None]

    def mark_gone(self, broker_id: int, epoch: int) -> bool:
        """This broker's own evidence that registration (broker_id, epoch) is gone: it counts
        as departed until the controller's updates say otherwise. Whether anything changed."""
        info = self.brokers.get(broker_id)
        if info is None or info.epoch != epoch:
            return False
        self.gone[broker_id] = epoch
        self.departed[broker_id] = self.brokers.pop(broker_id)
        self.departed_at[broker_id] = time.monotonic()
        self.version += 1
        return True

    def mark_back(self, broker_id: int, epoch: int) -> bool:
        """The process of a registration marked gone answers again: it counts again."""
        info = self.departed.get(broker_id)
        if self.gone.get(broker_id) != epoch or info is None or info.epoch != epoch:
            return False
        del self.gone[broker_id]
        self.brokers[broker_id] = self.departed.pop(broker_id)
        self.departed_at.pop(broker_id, None)
        self.version += 1
        return True

    def listed_brokers(self, grace_s: float, now: float | None = None) -> list[BrokerInfo]:
        """The brokers a Metadata answer lists: the live ones, and those departed less than
        `grace_s` ago (no partition names one as its leader: those answer leader -1).

        Issue 13: librdkafka (2.x) handles a Metadata answer that both moves a partition
        away from a broker and drops that broker by first moving the partition and then,
        in the dropped broker's own thread, sending the partition back to "no leader"; it
        then waits for its next refresh, a second later. After a leader's kill -9 that was
        most failovers: 1.0-2.0 s to the next acknowledgement instead of 0.1 s. Listed a
        little longer, the dead broker is dropped by a later answer, once nothing is on it."""
        now = time.monotonic() if now is None else now
        recent = [info for b, info in self.departed.items() if now - self.departed_at.get(b, float("-inf")) < grace_s]
        return sorted([*self.brokers.values(), *recent], key=lambda b: b.id)

    def partition(self, topic: str, partition: int) -> PartitionMeta | None:
        return self.topics.get(topic, {}).get(partition)

    def alive(self, broker_id: int) -> bool:
        return broker_id in self.brokers

    def racks(self) -> dict[int, str | None]:
        """Live brokers and their racks (rebuilt once per update, read on every consumer
        fetch by the KIP-392 decision)."""
        if self._racks_version != self.version:
            self._racks = {b.id: b.rack for b in self.brokers.values()}
            self._racks_version = self.version
        return self._racks

    def snapshot(self) -> dict[str, Any]:
        return {
            "controller_id": self.controller_id,
            "controller_epoch": self.controller_epoch,
            "brokers": [b.to_wire() for b in sorted(self.brokers.values(), key=lambda b: b.id)],
            "topics": {
                t: {str(p): dataclasses.asdict(m) for p, m in sorted(parts.items())}
                for t, parts in sorted(self.topics.items())
            },
            "topic_configs": self.topic_configs,
        }


class MetadataUpdates:
    """Wakes the coroutines that wait for the cache to satisfy a condition (a created topic
    has leaders, this broker is listed, ...) each time an UpdateMetadata was applied."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Whether `condition()` held within `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition():
            left_s = deadline - loop.time()
            if left_s <= 0:
                return False
            changed = self._changed
            try:
                async with asyncio.timeout(left_s):
                    await changed.wait()
            except TimeoutError:
                return condition()
        return True
