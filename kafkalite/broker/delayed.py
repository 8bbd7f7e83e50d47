"""The asyncio side of the purgatories: futures parked on partitions.

Which operation is complete is decided synchronously (a status function per partition,
evaluated on the loop thread whenever a partition's HW, LEO or role moves); this module only
parks and wakes coroutines. Bounded: past `size_max` parked operations new ones are refused
with REQUEST_TIMED_OUT-free back-pressure (they complete at once with their current status).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from kafkalite.protocol.errors import ErrorCode

TP = tuple[str, int]


class _Waiter:
    __slots__ = ("keys", "future", "check")

    def __init__(self, keys: list[TP], future: asyncio.Future, check: Callable[[], bool]):
        self.keys = keys
        self.future = future
        self.check = check


class DelayedOperations:
    def __init__(self, size_max: int):
        self.size_max = size_max
        self._by_key: dict[TP, set[_Waiter]] = {}
        self.produce_waiting = 0
        self.fetch_waiting = 0

    @property
    def size(self) -> int:
        return self.produce_waiting + self.fetch_waiting

    def _park(self, keys: list[TP], check: Callable[[], bool]) -> _Waiter:
        w = _Waiter(keys, asyncio.get_running_loop().create_future(), check)
        for k in keys:
            self._by_key.setdefault(k, set()).add(w)
        return w

    def _unpark(self, w: _Waiter) -> None:
        for k in w.keys:
            s = self._by_key.get(k)
            if s is not None:
                s.discard(w)
                if not s:
                    del self._by_key[k]

    def wake(self, key: TP) -> None:
        """Re-check every operation parked on `key`; complete those that are done (once)."""
        for w in list(self._by_key.get(key, ())):
            if not w.future.done() and w.check():
                w.future.set_result(None)

    def fail_key(self, key: TP, code: int) -> None:
        self.wake(key)

    async def wait_produce(
        self, waiting: dict[TP, Any], status: Callable[[TP, Any], int | None], timeout_ms: int
    ) -> dict[TP, int]:
        """acks=all: wait until every partition's status is decided or the timeout passes."""
        outcome: dict[TP, int] = {}

        def check() -> bool:
            for tp, last in waiting.items():
                if tp not in outcome:
                    code = status(tp, last)
                    if code is not None:
                        outcome[tp] = code
            return len(outcome) == len(waiting)

        if check() or self.size >= self.size_max:
            return self._finish(waiting, outcome)
        w = self._park(list(waiting), check)
        self.produce_waiting += 1
        try:
            await asyncio.wait_for(asyncio.shield(w.future), timeout_ms / 1000)
        except asyncio.TimeoutError:
            pass
        finally:
            self.produce_waiting -= 1
            self._unpark(w)
        return self._finish(waiting, outcome)

    @staticmethod
    def _finish(waiting: dict[TP, Any], outcome: dict[TP, int]) -> dict[TP, int]:
        return {tp: outcome.get(tp, int(ErrorCode.REQUEST_TIMED_OUT)) for tp in waiting}

    async def wait_fetch(self, keys: list[TP], max_wait_ms: int) -> None:
        """Wait until any of `keys` changes (new data, HW move, role change) or max_wait."""
        if self.size >= self.size_max:
            return
        w = self._park(keys, lambda: True)
        self.fetch_waiting += 1
        try:
            await asyncio.wait_for(asyncio.shield(w.future), max_wait_ms / 1000)
        except asyncio.TimeoutError:
            pass
        finally:
            self.fetch_waiting -= 1
            self._unpark(w)
