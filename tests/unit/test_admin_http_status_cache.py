"""The status page's routes share one snapshot (and its renderings) for about a second:
every open tab refreshing it cost a full snapshot and render on the broker's event loop
per request before. The admin server runs here on loopback with the snapshot faked."""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace

import aiohttp
import pytest

from kafkalite.broker.admin_http import STATUS_TTL_S, AdminHttp, SharedStatus


def _snapshot(n: int) -> dict:
    return {"broker_id": 1, "cluster_id": "c", "generated_ms": 1_000 + n, "controller_id": 1, "controller_epoch": 1,
            "serving_clients": True, "brokers": [{"id": 1, "host": "127.0.0.1", "port": 9092, "admin_port": 9292, "rack": None,
                                                   "alive": True, "controller": True}],
            "partitions": [], "rates": None, "reassignments": [], "reassignment_known": True, "groups": []}


async def test_every_viewer_of_the_status_page_is_served_one_snapshot_per_second():
    made = []

    async def collect():
        made.append(len(made))
        await asyncio.sleep(0.05)  # (the reassignment read from ZooKeeper)
        return _snapshot(len(made))

    admin = AdminHttp(SimpleNamespace(broker_id=1))
    admin._snapshot = collect
    await admin.start("127.0.0.1", 0)
    try:
        port = admin._runner.addresses[0][1]
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            async def get(path: str) -> str:
                async with session.get(base + path) as r:
                    assert r.status == 200
                    return await r.text()

            paths = ["/", "/?refresh=0.5", "/status/fragment", "/status/fragment", "/status.json", "/status.json"]
            answers = await asyncio.gather(*(get(p) for p in paths))
            assert len(made) == 1  # six viewers at once: one snapshot
            generated = {re.search(r'data-generated-ms="(\d+)"', a).group(1) for a in answers[:4]}
            assert generated == {str(json.loads(answers[4])["generated_ms"])} == {"1001"}
            await get("/status/fragment")
            assert len(made) == 1  # still fresh
            await asyncio.sleep(STATUS_TTL_S + 0.1)
            assert '"generated_ms": 1002' in await get("/status.json")
            assert len(made) == 2
    finally:
        await admin.close()


async def test_shared_status_renews_after_its_ttl_and_a_failure_reaches_every_waiter():
    now = [0.0]
    calls = []

    async def collect():
        calls.append(now[0])
        await asyncio.sleep(0)
        if len(calls) == 3:
            raise RuntimeError("collect failed")
        return _snapshot(len(calls))

    shared = SharedStatus(collect, ttl_s=1.0, clock=lambda: now[0])
    first = await shared.get()
    now[0] = 0.9
    assert await shared.get() is first and len(calls) == 1
    now[0] = 1.0
    second = await shared.get()
    assert second is not first and second.snapshot["generated_ms"] == 1002
    assert second.body() is second.body()  # rendered once
    now[0] = 2.5
    results = await asyncio.gather(shared.get(), shared.get(), return_exceptions=True)
    assert [str(r) for r in results] == ["collect failed"] * 2 and len(calls) == 3
    assert (await shared.get()).snapshot["generated_ms"] == 1004  # the next viewer tries again
    await shared.close()


async def test_a_viewer_going_away_does_not_cancel_the_snapshot_others_wait_for():
    release = asyncio.Event()

    async def collect():
        await release.wait()
        return _snapshot(1)

    shared = SharedStatus(collect)
    leaving = asyncio.ensure_future(shared.get())
    staying = asyncio.ensure_future(shared.get())
    await asyncio.sleep(0)
    leaving.cancel()
    release.set()
    assert (await staying).snapshot["generated_ms"] == 1001
    with pytest.raises(asyncio.CancelledError):
        await leaving
    await shared.close()
