"""Virtual clock, the one event heap, and the in-memory network.

Everything that happens in a simulated run is an event popped from one heap ordered by
(virtual time ms, sequence number); the sequence number makes ties deterministic. All
randomness comes from the one `random.Random` the runner owns.
"""

from __future__ import annotations

import heapq
import random
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CLIENT = 0  # node id of the producer/consumer clients
ZK = 1000  # node id of ZooKeeper (only used for partitions: broker <-> ZK)


@dataclass(frozen=True)
class Message:
    src: int
    dst: int
    kind: str
    body: dict[str, Any]
    rpc_id: int = 0  # > 0: a request expecting a response with the same id
    response: bool = False


class Scheduler:
    def __init__(self) -> None:
        self.now_ms = 0
        self._heap: list[tuple[int, int, str, Callable[[], None]]] = []
        self._sequence = 0

    def at(self, when_ms: int, label: str, fn: Callable[[], None]) -> None:
        assert when_ms >= self.now_ms
        self._sequence += 1
        heapq.heappush(self._heap, (when_ms, self._sequence, label, fn))

    def after(self, delay_ms: int, label: str, fn: Callable[[], None]) -> None:
        assert delay_ms >= 0
        self.at(self.now_ms + delay_ms, label, fn)

    def pop(self) -> tuple[str, Callable[[], None]] | None:
        if not self._heap:
            return None
        when_ms, _, label, fn = heapq.heappop(self._heap)
        assert when_ms >= self.now_ms
        self.now_ms = when_ms
        return label, fn

    def __len__(self) -> int:
        return len(self._heap)


class Network:
    """Per-(src, dst) FIFO links with random delay and drops; duplicates only for
    messages the sender marks idempotent; symmetric partitions between node pairs."""

    def __init__(self, sim: Any, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.cut: set[frozenset[int]] = set()
        self._link_free_ms: dict[tuple[int, int], int] = {}
        self.sent = 0
        self.dropped = 0
        # Targeted scenarios drop chosen messages (e.g. every LeaderAndIsr to one broker).
        self.drop_if: Callable[[Message], bool] | None = None
        self.lossless = False  # set once every fault is healed: no drops, no duplicates

    def partitioned(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self.cut

    def cut_link(self, a: int, b: int) -> None:
        self.cut.add(frozenset((a, b)))

    def heal_link(self, a: int, b: int) -> None:
        self.cut.discard(frozenset((a, b)))

    def send(self, msg: Message, *, idempotent: bool = False) -> None:
        cfg = self.sim.cfg
        self.sent += 1
        if self.partitioned(msg.src, msg.dst) or (not self.lossless and self.rng.random() < cfg.net_drop_probability):
            self.dropped += 1
            return
        if self.drop_if is not None and self.drop_if(msg):
            self.dropped += 1
            return
        now = self.sim.sched.now_ms
        link = (msg.src, msg.dst)
        when = max(now + self.rng.randint(1, cfg.net_delay_ms_max), self._link_free_ms.get(link, 0))
        self._link_free_ms[link] = when
        dst_incarnation = self.sim.incarnation_of(msg.dst)
        label = f"deliver {msg.kind}{' resp' if msg.response else ''} {msg.src}->{msg.dst}"
        self.sim.sched.at(when, label, lambda: self._deliver(msg, dst_incarnation))
        if idempotent and not self.lossless and self.rng.random() < cfg.net_duplicate_probability:
            later = when + self.rng.randint(1, 4 * cfg.net_delay_ms_max)
            # The link stays FIFO, duplicates included (a retransmission on the same ordered
            # connection): what is sent later cannot overtake the copy. Otherwise a copy of a
            # LeaderAndIsr could arrive after the StopReplica(delete) sent after it and bring
            # the deleted replica back, which no ordered transport does.
            self._link_free_ms[link] = later
            self.sim.sched.at(later, label + " (dup)", lambda: self._deliver(msg, dst_incarnation))

    def _deliver(self, msg: Message, dst_incarnation: int) -> None:
        if self.partitioned(msg.src, msg.dst):
            self.dropped += 1
            return
        self.sim.deliver(msg, dst_incarnation)


class Trace:
    """The last events of a run (for failure reports) and a running digest of all of
    them (for the determinism test)."""

    def __init__(self, keep: int = 30) -> None:
        self.recent: deque[str] = deque(maxlen=keep)
        self.count = 0
        self._digest = 0

    def add(self, now_ms: int, text: str) -> None:
        line = f"t={now_ms} {text}"
        self.recent.append(line)
        self.count += 1
        self._digest = zlib.crc32(line.encode(), self._digest)

    @property
    def digest(self) -> int:
        return self._digest
