"""MetadataUpdates: waiters wake on every applied UpdateMetadata, not on a polling timer."""

from __future__ import annotations

import asyncio

from kafkalite.broker.metadata_cache import MetadataUpdates


async def test_wait_until_wakes_when_notified_and_times_out_otherwise():
    updates = MetadataUpdates()
    state = {"ready": False}
    waiter = asyncio.create_task(updates.wait_until(lambda: state["ready"], 5))
    await asyncio.sleep(0.05)
    updates.notify()  # a change that does not satisfy the condition
    await asyncio.sleep(0.05)
    assert not waiter.done()
    state["ready"] = True
    updates.notify()
    assert await asyncio.wait_for(waiter, 1) is True
    assert await updates.wait_until(lambda: False, 0.05) is False
    assert await updates.wait_until(lambda: True, 0) is True
