"""RpcConnectRefused, the process watch's evidence that a broker is gone (issue 13), for a
peer whose name resolves to several addresses (localhost: ::1 and 127.0.0.1)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from kafkalite.rpc.transport import RpcClient, RpcConnectRefused, RpcServer


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
async def two_addresses(monkeypatch):
    """The name "dual.test" resolves to 127.0.0.1 then 127.0.0.2."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo

    async def getaddrinfo(host, port, **kwargs):
        if host == "dual.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, port)) for ip in ("127.0.0.1", "127.0.0.2")]
        return await real(host, port, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)


async def test_a_name_whose_every_address_refuses_is_refused(two_addresses):
    """Found by review: asyncio raises OSError("Multiple exceptions: ...") rather than
    ConnectionRefusedError when several addresses all refuse, so a dead broker advertised
    under such a name was never found gone (the watch's verdict stayed UNKNOWN)."""
    client = RpcClient("dual.test", _closed_port(), sender=1)
    try:
        with pytest.raises(RpcConnectRefused):
            await client.call("Ping", {}, timeout_ms=2000)
    finally:
        await client.close()


async def test_a_name_whose_first_address_refuses_connects_to_the_next(two_addresses):
    async def handler(header, payload):
        return {"error": 0, "who": "second"}, b""

    server = RpcServer(handler)
    await server.start("127.0.0.2", 0)
    port = server._server.sockets[0].getsockname()[1]
    client = RpcClient("dual.test", port, sender=1)
    try:
        header, _ = await client.call("Ping", {}, timeout_ms=2000)
        assert header["who"] == "second"
    finally:
        await client.close()
        await server.close()
