"""asyncio task hygiene shared by the broker shell and the RPC layer (STYLE: every
background task is owned; `close()` cancels and awaits)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


CANCEL_ATTEMPTS_MAX = 20
CANCEL_ATTEMPT_WAIT_S = 0.5


async def cancel_and_wait(tasks: Iterable[asyncio.Task | None]) -> None:
    """Cancel every task, then wait for each to end; errors they end with are logged.
    A task that swallowed its cancellation (asyncio code racing a result against a
    cancel can) is cancelled again, a bounded number of times."""
    pending = [t for t in tasks if t is not None]
    for t in pending:
        t.cancel()
    for t in pending:
        for _ in range(CANCEL_ATTEMPTS_MAX):
            if t.done():
                break
            await asyncio.wait({t}, timeout=CANCEL_ATTEMPT_WAIT_S)
            if not t.done():
                t.cancel()
        if not t.done():
            log.error("task %s did not stop after %d cancellations", t.get_name(), CANCEL_ATTEMPTS_MAX)
            continue
        if t.cancelled():
            continue
        exc = t.exception()
        if exc is not None:
            log.error("task %s failed while stopping: %r", t.get_name(), exc)
