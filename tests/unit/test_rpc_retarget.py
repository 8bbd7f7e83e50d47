"""RpcClient.retarget (the peer re-registered at another address) while a connect is under
way: the connection that connect makes reached the old address, so it is closed and not
kept, and the call goes to the new address (found by review: it was cached, and every call
went to the old address until that connection broke). close() during a connect likewise
keeps nothing."""

from __future__ import annotations

import asyncio

import pytest

from kafkalite.rpc.transport import RpcClient, RpcError, RpcServer

SECRET = b"s" * 32


class GatedServer(RpcServer):
    """Accepts a connection, then holds it before the handshake until `release` is set: the
    client's connect is under way (awaiting the server's challenge) for as long as the test
    wants."""

    def __init__(self, name: str) -> None:
        async def handler(header, payload):
            return {"error": 0, "who": name}, b""

        super().__init__(handler, secret=SECRET)
        self.accepted = asyncio.Event()
        self.release = asyncio.Event()
        self.closed_by_client = asyncio.Event()

    async def handle_connection(self, reader, writer):
        self.accepted.set()
        await self.release.wait()
        await super().handle_connection(reader, writer)
        self.closed_by_client.set()


async def _started(server: RpcServer) -> int:
    await server.start("127.0.0.1", 0)
    return server._server.sockets[0].getsockname()[1]


async def test_a_connect_under_way_when_retargeted_is_dropped_and_the_call_goes_to_the_new_address():
    old, new = GatedServer("old"), GatedServer("new")
    new.release.set()
    old_port, new_port = await _started(old), await _started(new)
    client = RpcClient("127.0.0.1", old_port, sender=1, secret=SECRET)
    try:
        first = asyncio.create_task(client.call("Ping", {}, timeout_ms=5000))
        await asyncio.wait_for(old.accepted.wait(), 5)
        client.retarget("127.0.0.1", new_port)
        old.release.set()  # the handshake with the old address now completes
        assert (await first)[0]["who"] == "new"
        for _ in range(3):
            assert (await client.call("Ping", {}, timeout_ms=5000))[0]["who"] == "new"
        await asyncio.wait_for(old.closed_by_client.wait(), 5)  # the old connection was closed
    finally:
        await client.close()
        await old.close()
        await new.close()


async def test_close_during_a_connect_keeps_no_connection():
    server = GatedServer("old")
    port = await _started(server)
    client = RpcClient("127.0.0.1", port, sender=1, secret=SECRET)
    try:
        call = asyncio.create_task(client.call("Ping", {}, timeout_ms=5000))
        await asyncio.wait_for(server.accepted.wait(), 5)
        await client.close()
        server.release.set()
        with pytest.raises(RpcError, match="client closed"):
            await call
        assert client._writer is None
        assert client._reader_task is None
        await asyncio.wait_for(server.closed_by_client.wait(), 5)
    finally:
        await client.close()
        await server.close()
