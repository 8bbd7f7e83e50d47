"""The broker's view of the cluster, fed only by the controller's UpdateMetadata.

Every broker answers Metadata requests from this cache (DESIGN.md section 4b); it is never
read from ZooKeeper on the request path.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    inter_broker_port: int
    admin_port: int
    rack: str | None
    epoch: int

    def to_wire(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> BrokerInfo:
        return cls(
            id=int(d["id"]), host=str(d["host"]), port=int(d["port"]),
            inter_broker_port=int(d["inter_broker_port"]), admin_port=int(d["admin_port"]),
            rack=d.get("rack") or None, epoch=int(d["epoch"]),
        )


@dataclasses.dataclass(frozen=True)
class PartitionMeta:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]

    def to_wire(self) -> list[Any]:
        return [self.leader, self.leader_epoch, list(self.isr), list(self.replicas), list(self.offline_replicas)]

    @classmethod
    def from_wire(cls, w: list[Any]) -> PartitionMeta:
        leader, epoch, isr, replicas, offline = w
        return cls(int(leader), int(epoch), tuple(isr), tuple(replicas), tuple(offline))


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id: int = -1
        self.controller_epoch: int = 0
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[int, PartitionMeta]] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.version = 0

    def apply_update(self, body: dict[str, Any]) -> None:
        """Apply an UpdateMetadata body: full snapshot or a delta of changed partitions."""
        self.controller_id = int(body["controller_id"])
        self.controller_epoch = int(body["controller_epoch"])
        self.brokers = {b.id: b for b in (BrokerInfo.from_wire(x) for x in body["brokers"])}
        if body.get("full"):
            self.topics = {}
            self.topic_configs = {}
        for topic, parts in body.get("partitions", {}).items():
            tmap = self.topics.setdefault(topic, {})
            for p, wire in parts.items():
                tmap[int(p)] = PartitionMeta.from_wire(wire)
        for topic, cfg in body.get("topic_configs", {}).items():
            self.topic_configs[topic] = dict(cfg)
        for topic in body.get("deleted_topics", []):
            self.topics.pop(topic, None)
            self.topic_configs.pop(topic, None)
        self.version += 1

    def partition(self, topic: str, partition: int) -> PartitionMeta | None:
        return self.topics.get(topic, {}).get(partition)

    def alive(self, broker_id: int) -> bool:
        return broker_id in self.brokers

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
