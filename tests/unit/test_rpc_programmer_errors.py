"""Issue 8: a programmer error in an inter-broker handler is never answered as a wire error
code; it is logged and the connection closed, so the caller sees a failed call (and the
controller's channel resends), while a typed operating error is answered with its code."""

from __future__ import annotations

import pytest

from kafkalite.core.codes import ErrorCode, NotLeaderOrFollowerError
from kafkalite.rpc.transport import RpcClient, RpcError, RpcServer


async def handler(header, payload):
    if header["api"] == "Bug":
        raise AssertionError("an invariant failed")
    if header["api"] == "NotLeader":
        raise NotLeaderOrFollowerError("not the leader")
    return {"error": 0, "echo": header["api"]}, b""


async def test_a_programmer_error_closes_the_connection_instead_of_answering_a_code(caplog):
    from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for

    async def typed(header, payload):
        try:
            return await handler(header, payload)
        except OPERATING_ERRORS as e:
            return {"error": error_code_for(e)}, b""

    server = RpcServer(typed)
    await server.start("127.0.0.1", 0)
    port = server._server.sockets[0].getsockname()[1]
    client = RpcClient("127.0.0.1", port, sender=1)
    try:
        header, _ = await client.call("NotLeader", {}, timeout_ms=2000)
        assert header["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        with pytest.raises(RpcError):
            await client.call("Bug", {}, timeout_ms=2000)
        assert "an invariant failed" in caplog.text
        header, _ = await client.call("Fine", {}, timeout_ms=2000)  # a new connection serves again
        assert header["echo"] == "Fine"
    finally:
        await client.close()
        await server.close()
