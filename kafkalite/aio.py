"""asyncio task hygiene shared by the broker shell and the RPC layer (STYLE: every
background task is owned; `close()` cancels and awaits)."""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
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


def spawn(coro, *, name: str, owner: set[asyncio.Task]) -> asyncio.Task:
    """Start a task that `owner` holds (a set its owner cancels and awaits when it closes,
    e.g. with `cancel_and_wait`). The set keeps the task referenced until it ends, and a
    failure is logged with its traceback when it does: a background task never dies
    silently."""
    task = asyncio.create_task(coro, name=name)
    owner.add(task)

    def ended(t: asyncio.Task) -> None:
        owner.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("task %s failed", t.get_name(), exc_info=t.exception())

    task.add_done_callback(ended)
    return task


class Wakeup:
    """asyncio.Event for a hot path: `wait(timeout_s)` parks on a plain future with a timer
    (asyncio.wait_for on Python 3.11 wraps Event.wait() in a task of its own: a task, a
    timer and two more loop turns for every wait). Returns whether it was set."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future] = []

    def set(self) -> None:
        self._set = True
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout_s: float) -> bool:
        if self._set:
            return True
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        timer = loop.call_later(max(timeout_s, 0.0), _expire, fut)
        self._waiters.append(fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waiters.remove(fut)
        return self._set


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class StreamServer:
    """A listening socket whose connection tasks it owns: `close()` stops accepting and
    cancels and awaits every open connection. Subclasses implement `handle_connection`."""

    def __init__(self) -> None:
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task] = set()

    async def start(self, host: str, port: int, *, serving: bool = True, ssl: _ssl.SSLContext | None = None,
                    ssl_handshake_timeout_s: float | None = None) -> None:
        """Bind now; with `serving=False` connections are refused until `start_serving()`
        (the port is ours, so a clash is still a start-up error). With `ssl`, connections
        are TLS and `handle_connection` runs after a successful handshake only."""
        self._server = await asyncio.start_server(self._serve, host, port, limit=1 << 20, reuse_address=True,
                                                  start_serving=serving, ssl=ssl,
                                                  ssl_handshake_timeout=ssl_handshake_timeout_s if ssl is not None else None)

    async def start_serving(self) -> None:
        assert self._server is not None
        await self._server.start_serving()

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await cancel_and_wait(list(self._conns))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            await self.handle_connection(reader, writer)
        finally:
            self._conns.discard(task)

    async def handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError
