"""Admin HTTP listener (aiohttp): /healthz, /metrics (Prometheus), /state (JSON).

/state is the broker's own view: its partitions (with `log_size_bytes`, the bytes of each
replica's log on disk, which `kafkalite reassign status` compares between a leader and
its new replicas), roles, HW/LEO, metadata cache and controller view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker


class AdminHttp:
    def __init__(self, broker: Broker):
        self.broker = broker
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/state", self._state)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, reuse_address=True).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

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
