"""asyncio task hygiene shared by the broker shell and the RPC layer (STYLE: every
background task is owned; `close()` cancels and awaits)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


async def cancel_and_wait(tasks: Iterable[asyncio.Task | None]) -> None:
    """Cancel every task, then wait for each to end; errors they end with are logged."""
    pending = [t for t in tasks if t is not None]
    for t in pending:
        t.cancel()
    for t in pending:
        try:
            await t
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - the task is gone either way; say why
            log.exception("task %s failed while stopping", t.get_name())
