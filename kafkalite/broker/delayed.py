"""The asyncio side of the purgatories (DESIGN.md section 5, "Purgatory").

Which delayed operation is complete, expired or cancelled is decided by the pure
kafkalite.core.purgatory (Purgatory, DelayedProduce, DelayedFetch) and kafkalite.core.delete_records
(DelayedDeleteRecords); this module only parks a future per
operation, wakes the purgatory when a partition's HW, LEO or role moved (`wake`), and runs
one timer that polls it at its next deadline. Both purgatories are bounded: past
`size_max` a new produce is answered at once (REQUEST_TIMED_OUT for what is not done) and a
new fetch returns what it has.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Hashable
from typing import Any

from kafkalite.clock import monotonic_ms as now_ms
from kafkalite.core.codes import PurgatoryFullError
from kafkalite.core.delete_records import DelayedDeleteRecords, DeleteRecordsPartitionStatus
from kafkalite.core.purgatory import DelayedFetch, DelayedProduce, FetchProbe, ProducePartitionStatus, Purgatory

TP = tuple[str, int]


class DelayedOperations:
    def __init__(self, size_max: int, lookup: Callable[[TP], Any]):
        """`lookup(tp)` gives a local replica (kafkalite.core.purgatory.PartitionLookup), or None."""
        self.lookup = lookup
        self.produce = Purgatory[int](size_max)
        self.fetch = Purgatory[int](size_max)
        self.delete_records = Purgatory[int](size_max)
        self._ids = itertools.count(1)
        self._futures: dict[int, asyncio.Future] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms: int | None = None

    @property
    def produce_waiting(self) -> int:
        return self.produce.size

    @property
    def fetch_waiting(self) -> int:
        return self.fetch.size

    # -- waking -----------------------------------------------------------------------------
    def wake(self, key: TP, *, produce: bool = True) -> None:
        """The HW, LEO or role of `key` moved: complete whatever is now complete (once).
        `produce=False`: only the LEO moved (an append as leader that left the HW where it
        was), which completes no acks=all produce (each waits for the HW, a role or epoch
        change, or its replica gone), so the produce purgatory is not walked: Kafka's
        appendRecordsToLeader checks it only when the leader's HW increased. At a high
        rate of small acks=all requests hundreds wait per partition, and walking them all
        on every append made the leader's work grow with the square of the rate."""
        completed = self.produce.check_and_complete(key) if produce else []
        completed += self.delete_records.check_and_complete(key)  # rare: walked on every wake at no cost when empty
        for op_id in completed + self.fetch.check_and_complete(key):
            self._resolve(op_id)

    def _resolve(self, op_id: int) -> None:
        fut = self._futures.pop(op_id, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _arm_timer(self) -> None:
        deadlines = [d for d in (self.produce.next_deadline_ms, self.fetch.next_deadline_ms,
                                 self.delete_records.next_deadline_ms) if d is not None]
        if not deadlines:
            return
        at = min(deadlines)
        if self._timer is not None and self._timer_at_ms is not None and self._timer_at_ms <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at_ms = at
        self._timer = asyncio.get_running_loop().call_later(max(at - now_ms(), 0) / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ms = None
        t = now_ms()
        for op_id in self.produce.poll(t) + self.fetch.poll(t) + self.delete_records.poll(t):
            self._resolve(op_id)
        self._arm_timer()

    async def _park(self, purgatory: Purgatory, keys: list[Hashable], deadline_ms: int, check: Callable[[], bool]) -> None:
        op_id = next(self._ids)
        if purgatory.add(op_id, keys, deadline_ms, check):
            return
        fut = asyncio.get_running_loop().create_future()
        self._futures[op_id] = fut
        self._arm_timer()
        try:
            await fut
        finally:  # cancelled (client gone, broker stopping): end it in the purgatory too
            self._futures.pop(op_id, None)
            purgatory.cancel(op_id)

    # -- the two kinds ----------------------------------------------------------------------
    async def wait_produce(self, statuses: dict[TP, ProducePartitionStatus], timeout_ms: int) -> dict[TP, int]:
        """acks=all: until the HW passes every batch, the log loses one, or timeout."""
        op = DelayedProduce(statuses)

        def check() -> bool:
            return op.try_complete(self.lookup)

        try:
            await self._park(self.produce, list(statuses), now_ms() + timeout_ms, check)
        except PurgatoryFullError:
            pass
        if not all(s.done for s in op.partitions.values()):
            op.on_expiration()  # expired (or refused at the bound): the rest time out
        return {tp: int(code) for tp, code in op.result().items()}

    async def wait_delete_records(self, statuses: dict[TP, DeleteRecordsPartitionStatus], timeout_ms: int) -> dict[TP, tuple[int, int]]:
        """DeleteRecords' acks: until every partition's low watermark (the least log start
        over its ISR) reaches the new log start, its leadership goes, or timeout. Per
        partition: (error code, low watermark)."""
        op = DelayedDeleteRecords(statuses)

        def check() -> bool:
            return op.try_complete(self.lookup)

        try:
            await self._park(self.delete_records, list(statuses), now_ms() + timeout_ms, check)
        except PurgatoryFullError:
            pass
        if not all(s.done for s in op.partitions.values()):
            op.on_expiration()
        return {tp: (int(code), low) for tp, (code, low) in op.result().items()}

    async def wait_fetch(self, op: DelayedFetch, max_wait_ms: float, probe: Callable[[TP, int], FetchProbe | None]) -> None:
        """Until the core's DelayedFetch is complete (min_bytes available, a partition
        changed leadership or epoch, a fetch offset is past the end) or max_wait passes.
        At the purgatory's bound it returns at once: the fetch answers with what it has."""

        def check() -> bool:
            return op.try_complete(probe)

        try:
            await self._park(self.fetch, list(op.partitions), now_ms() + int(max_wait_ms), check)
        except PurgatoryFullError:
            return
