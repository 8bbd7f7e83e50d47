"""The inter-broker RPC's deadlines and the leader's fetch wake-up (issue 13 made both
lighter: a timer on the call's future, not a Timeout context; a future, not wait_for on an
Event). A call whose answer does not come in time fails with RpcError and leaves nothing
pending; a cancelled call ends at once; answers to concurrent calls are matched to them."""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvloop

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


async def _peer_that_never_reads() -> tuple[asyncio.Server, int, list[asyncio.StreamWriter]]:
    """Accepts connections and never reads from them (nor answers)."""
    accepted: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], accepted


async def _stalled_send_scenario() -> None:
    server, port, accepted = await _peer_that_never_reads()
    client = RpcClient("127.0.0.1", port, sender=1)
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        # Far more than the socket buffers of both ends hold: the frame cannot all go out.
        with pytest.raises(RpcError, match="timed out after 300 ms"):
            await asyncio.wait_for(client.call("LeaderAndIsr", {}, bytes(32 << 20), timeout_ms=300), 10)
        assert loop.time() - started < 3
        assert client._writer is None  # dropped: the stalled connection is not used again
        assert client._pending == {}
        with pytest.raises(RpcError, match="timed out after 200 ms"):
            await asyncio.wait_for(client.call("Ping", {}, timeout_ms=200), 10)
        assert len(accepted) == 2  # the next call connected again
    finally:
        await client.close()
        for w in accepted:
            w.close()
        server.close()


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_a_call_to_a_peer_that_does_not_read_fails_by_its_deadline_and_the_next_call_reconnects(run):
    run(_stalled_send_scenario())


async def test_a_connect_whose_syns_are_dropped_fails_by_the_call_deadline():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # never accepts: once its queue is full the kernel drops new SYNs
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(s)
    client = RpcClient("127.0.0.1", port, sender=1)
    loop = asyncio.get_running_loop()
    try:
        await asyncio.sleep(0.1)
        started = loop.time()
        calls = [client.call("Ping", {}, timeout_ms=300) for _ in range(2)]  # the second waits on the connect lock
        for outcome in await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10):
            assert isinstance(outcome, RpcError)
            assert "timed out after 300 ms connecting" in str(outcome)
        assert loop.time() - started < 3
        assert not client._connect_lock.locked()
        assert client._writer is None
    finally:
        await client.close()
        listener.close()
        for s in fillers:
            s.close()


async def test_a_handshake_that_gets_no_answer_fails_by_the_call_deadline_and_is_closed():
    ended = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # the client hello, then nothing until the client closes
        ended.set()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = RpcClient("127.0.0.1", port, sender=1, secret=b"s" * 32)
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        with pytest.raises(RpcError, match="timed out after 300 ms connecting"):
            await asyncio.wait_for(client.call("Ping", {}, timeout_ms=300), 10)  # the handshake's own bound is 10 s
        assert loop.time() - started < 3
        await asyncio.wait_for(ended.wait(), 5)  # the half-made connection was closed
        assert client._writer is None
    finally:
        await client.close()
        server.close()


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
