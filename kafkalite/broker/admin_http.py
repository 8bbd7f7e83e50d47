"""Admin HTTP listener (aiohttp): /healthz, /metrics (Prometheus), /state (JSON), and the
status page: / (HTML), /status/fragment (its refreshed part), /status.json (the snapshot
it renders), /status.css and /status.js (kafkalite.broker.status_page).

/state is the broker's own view: its partitions (with `log_size_bytes`, the bytes of each
replica's log on disk, which `kafkalite reassign status` compares between a leader and
its new replicas), roles, HW/LEO, metadata cache and controller view.

The status page's routes share one snapshot and its renderings (`SharedStatus`) for
STATUS_TTL_S: N open tabs cost one snapshot and one render a second on the broker's
event loop, not N every refresh."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kafkalite.broker import status_page
from kafkalite.broker.status_snapshot import RateMeter, collect_status, metric_totals
from kafkalite.clock import wall_ms
from kafkalite.zk.errors import ZkError

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)

# The page reads /admin/reassign_partitions from ZooKeeper on each refresh; a ZooKeeper that
# does not answer within this leaves the reassignment "unknown" instead of hanging the page.
REASSIGNMENT_READ_TIMEOUT_S = 2.0
_NO_CACHE = {"Cache-Control": "no-store"}
# How long every viewer of the status page (/, /status/fragment, /status.json) is served
# the same snapshot; the page refreshes every REFRESH_S_MIN (0.5 s) at the fastest.
STATUS_TTL_S = 1.0


class _Rendered:
    """One snapshot and what is made of it, each made once, when first asked for."""

    def __init__(self, snapshot: dict[str, Any], made_at_s: float):
        self.snapshot = snapshot
        self.made_at_s = made_at_s
        self._body: str | None = None
        self._json: str | None = None

    def body(self) -> str:
        if self._body is None:
            self._body = status_page.render_body(self.snapshot)
        return self._body

    def json_text(self) -> str:
        if self._json is None:
            self._json = json.dumps(self.snapshot)
        return self._json


class SharedStatus:
    """The status snapshot every viewer is served for `ttl_s` after it was made. One
    collection at a time: requests arriving while one runs wait for it (a viewer that
    goes away does not cancel it for the others). Time is the `clock` given."""

    def __init__(self, collect: Callable[[], Awaitable[dict[str, Any]]], *, ttl_s: float = STATUS_TTL_S,
                 clock: Callable[[], float] = time.monotonic):
        assert ttl_s > 0
        self._collect = collect
        self.ttl_s = ttl_s
        self._clock = clock
        self._current: _Rendered | None = None
        self._collecting: asyncio.Task[_Rendered] | None = None

    async def get(self) -> _Rendered:
        current = self._current
        if current is not None and self._clock() - current.made_at_s < self.ttl_s:
            return current
        if self._collecting is None:
            self._collecting = asyncio.get_running_loop().create_task(self._collect_once())
            # (its failure reaches every waiter; if none is left, this retrieves it)
            self._collecting.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(self._collecting)

    async def _collect_once(self) -> _Rendered:
        try:
            snapshot = await self._collect()
            self._current = _Rendered(snapshot, self._clock())  # fresh from when it is done
            return self._current
        finally:
            self._collecting = None

    async def close(self) -> None:
        task = self._collecting
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class AdminHttp:
    def __init__(self, broker: Broker):
        self.broker = broker
        self._runner: web.AppRunner | None = None
        self._rates = RateMeter()
        self._status = SharedStatus(lambda: self._snapshot())

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/state", self._state)
        app.router.add_get("/", self._status_page)
        app.router.add_get("/status/fragment", self._status_fragment)
        app.router.add_get("/status.json", self._status_json)
        app.router.add_get("/status.css", self._asset(status_page.STATUS_CSS, "text/css"))
        app.router.add_get("/status.js", self._asset(status_page.STATUS_JS, "text/javascript"))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, reuse_address=True).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self._status.close()

    async def _healthz(self, request: web.Request) -> web.Response:
        ok = self.broker.broker_epoch >= 0 and not self.broker.stopping
        return web.json_response({"ok": ok, "broker_id": self.broker.broker_id}, status=200 if ok else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.broker.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _state(self, request: web.Request) -> web.Response:
        state = self.broker.state()
        for (topic, partition), replica in self.broker.replica_manager.partitions.items():
            entry = state["partitions"].get(f"{topic}-{partition}")
            if entry is not None:
                entry["log_size_bytes"] = replica.log.size_bytes
        return web.json_response(state)

    # -- the status page (kafkalite.broker.status_page) ---------------------------------
    async def _snapshot(self) -> dict[str, Any]:
        rates = self._rates.observe(time.monotonic(), metric_totals(self.broker.metrics))
        return collect_status(self.broker, now_ms=wall_ms(), rates=rates, reassignment=await self._reassignment())

    async def _reassignment(self) -> dict[tuple[str, int], list[int]] | None:
        """The partitions /admin/reassign_partitions asks to move, with their targets (the
        controller's own view exists only on the controller); None if unreadable."""
        zk = self.broker.zk
        if zk is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(REASSIGNMENT_READ_TIMEOUT_S):
                found = await loop.run_in_executor(None, zk.get_reassignment)
        except (TimeoutError, ZkError) as e:
            log.debug("status page: reading the reassignment failed: %r", e)
            return None
        except Exception as e:  # noqa: BLE001 - kazoo's connection errors: the page says "unknown"
            log.debug("status page: reading the reassignment failed: %r", e)
            return None
        if found is None:
            return {}
        return {tp: list(replicas) for tp, replicas in found[0].partitions.items()}

    async def _status_page(self, request: web.Request) -> web.Response:
        refresh_s = _refresh_s(request)
        status = await self._status.get()
        html = status_page.render_page(status.snapshot, refresh_s, body=status.body())
        return web.Response(text=html, content_type="text/html", headers=_page_headers())

    async def _status_fragment(self, request: web.Request) -> web.Response:
        status = await self._status.get()
        return web.Response(text=status.body(), content_type="text/html", headers=_page_headers())

    async def _status_json(self, request: web.Request) -> web.Response:
        status = await self._status.get()
        return web.Response(text=status.json_text(), content_type="application/json", headers=_NO_CACHE)

    @staticmethod
    def _asset(text: str, content_type: str):
        async def serve(request: web.Request) -> web.Response:
            return web.Response(text=text, content_type=content_type, headers={"Cache-Control": "max-age=60"})
        return serve


def _page_headers() -> dict[str, str]:
    return {**_NO_CACHE, "Content-Security-Policy": status_page.CONTENT_SECURITY_POLICY}


def _refresh_s(request: web.Request) -> float:
    """`?refresh=SECONDS` (bounded); a bad value is the caller's error, answered with 400."""
    raw = request.query.get("refresh")
    if raw is None:
        return status_page.REFRESH_S_DEFAULT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not status_page.REFRESH_S_MIN <= value <= status_page.REFRESH_S_MAX:
        raise web.HTTPBadRequest(text=f"refresh must be a number of seconds from {status_page.REFRESH_S_MIN:g} "
                                      f"to {status_page.REFRESH_S_MAX:g}, got {raw!r}\n")
    return value
