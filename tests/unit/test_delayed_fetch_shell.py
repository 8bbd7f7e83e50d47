"""The broker's fetch long-poll waits on the core's DelayedFetch: a wake-up that does not
bring min_bytes does not answer the fetch; one that does, or a leadership change, does;
max_wait answers with what there is."""

from __future__ import annotations

import asyncio

from kafkalite.broker.delayed import DelayedOperations
from kafkalite.core.purgatory import DelayedFetch, FetchPartitionStatus, FetchProbe

TP = ("t", 0)


async def test_fetch_waits_for_min_bytes_not_for_any_wake_up():
    seen = {"bytes": 0, "epoch": 3}
    delayed = DelayedOperations(100, lambda tp: None)

    def probe(tp, fetch_offset):
        return FetchProbe(seen["epoch"], 10, seen["bytes"])

    op = DelayedFetch({TP: FetchPartitionStatus(5, 3)}, min_bytes=100)
    waiting = asyncio.create_task(delayed.wait_fetch(op, 5_000, probe))
    await asyncio.sleep(0.05)
    seen["bytes"] = 40
    delayed.wake(TP)
    await asyncio.sleep(0.05)
    assert not waiting.done()  # 40 < 100 bytes: keep waiting
    seen["bytes"] = 120
    delayed.wake(TP)
    await asyncio.wait_for(waiting, 1)


async def test_a_leadership_change_answers_at_once_and_max_wait_answers_anyway():
    seen = {"epoch": 3}
    delayed = DelayedOperations(100, lambda tp: None)

    def probe(tp, fetch_offset):
        return FetchProbe(seen["epoch"], 10, 0)

    op = DelayedFetch({TP: FetchPartitionStatus(5, 3)}, min_bytes=1)
    waiting = asyncio.create_task(delayed.wait_fetch(op, 5_000, probe))
    await asyncio.sleep(0.05)
    seen["epoch"] = 4
    delayed.wake(TP)
    await asyncio.wait_for(waiting, 1)
    assert op.error_partitions == {TP}
    started = asyncio.get_running_loop().time()
    await delayed.wait_fetch(DelayedFetch({TP: FetchPartitionStatus(5, 4)}, min_bytes=1), 200, probe)
    assert asyncio.get_running_loop().time() - started >= 0.15
