"""The inter-broker RPC's deadlines and the leader's fetch wake-up (issue 13 made both
lighter: a timer on the call's future, not a Timeout context; a future, not wait_for on an
Event). A call whose answer does not come in time fails with RpcError and leaves nothing
pending; a cancelled call ends at once; answers to concurrent calls are matched to them."""

from __future__ import annotations

import asyncio

import pytest

from kafkalite.aio import Wakeup
from kafkalite.rpc.transport import RpcClient, RpcError, RpcServer


async def _serve(handler):
    server = RpcServer(handler)
    await server.start("127.0.0.1", 0)
    return server, server._server.sockets[0].getsockname()[1]


async def test_a_call_without_an_answer_in_time_fails_and_leaves_nothing_pending():
    never = asyncio.Event()

    async def handler(header, payload):
        if header["api"] == "Hang":
            await never.wait()
        return {"error": 0, "echo": header["api"], "n": header.get("n")}, bytes(payload)

    server, port = await _serve(handler)
    client = RpcClient("127.0.0.1", port, sender=1)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(RpcError, match="timed out after 200 ms"):
            await client.call("Hang", {}, timeout_ms=200)
        assert 0.15 < loop.time() - started < 5
        assert client._pending == {}
        # The connection still serves, and concurrent answers find their own calls.
        answers = await asyncio.gather(*(client.call("Echo", {"n": i}, b"x" * i, timeout_ms=5000) for i in range(20)))
        assert [(h["n"], bytes(p)) for h, p in answers] == [(i, b"x" * i) for i in range(20)]
        # A cancelled call ends at once and is forgotten.
        call = asyncio.create_task(client.call("Hang", {}, timeout_ms=60_000))
        await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert client._pending == {}
    finally:
        never.set()
        await client.close()
        await server.close()


async def test_a_wakeup_returns_when_set_or_when_its_time_is_up():
    w = Wakeup()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await w.wait(0.05) is False  # nobody set it: the time ran out
    assert loop.time() - started >= 0.04
    loop.call_later(0.01, w.set)
    assert await asyncio.wait_for(w.wait(30), 5) is True
    assert await w.wait(30) is True  # still set: returns at once
    w.clear()
    waiters = [asyncio.create_task(w.wait(30)) for _ in range(3)]  # several waiters all wake
    await asyncio.sleep(0)
    w.set()
    assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == [True, True, True]
    w.clear()
    parked = asyncio.create_task(w.wait(30))
    await asyncio.sleep(0)
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parked
    assert w._waiters == []
