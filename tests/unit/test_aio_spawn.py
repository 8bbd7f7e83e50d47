"""spawn: an owned background task is kept referenced until it ends, leaves its owner's set
then, and a failure is logged with its traceback instead of vanishing."""

from __future__ import annotations

import asyncio
import logging

from kafkalite.aio import cancel_and_wait, spawn


async def test_spawned_task_is_owned_until_it_ends_and_its_failure_is_logged(caplog):
    owner: set[asyncio.Task] = set()

    async def boom() -> None:
        raise RuntimeError("bug in a background task")

    async def forever() -> None:
        await asyncio.Event().wait()

    with caplog.at_level(logging.ERROR, logger="kafkalite.aio"):
        failing = spawn(boom(), name="boom", owner=owner)
        lasting = spawn(forever(), name="forever", owner=owner)
        assert owner == {failing, lasting}
        await asyncio.sleep(0.01)
    assert owner == {lasting}
    assert any("task boom failed" in r.getMessage() and r.exc_info for r in caplog.records)
    await cancel_and_wait(list(owner))
    assert owner == set()
