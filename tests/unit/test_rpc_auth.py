"""Issue 15: inter-broker RPC connections authenticated by the cluster secret
(kafkalite.rpc.auth, a mutual HMAC-SHA256 challenge-response). The pure handshake, then a
real RpcServer and RpcClient on loopback: the right secret is served; no handshake, a
wrong secret, or a replayed proof closes the connection before any request reaches the
handler, and the server keeps serving."""

from __future__ import annotations

import asyncio
import struct

import pytest

from kafkalite.rpc import auth
from kafkalite.rpc.framing import encode_frame
from kafkalite.rpc.transport import RpcClient, RpcError, RpcServer

SECRET = b"s" * 32
OTHER = b"o" * 32


def test_the_handshake_proves_both_sides_and_checks_what_it_gets():
    cn, sn = auth.new_nonce(), auth.new_nonce()
    client_nonce, challenge = auth.server_challenge(SECRET, auth.client_hello(cn, 1), sn)
    assert client_nonce == cn
    answer = auth.client_finish(SECRET, cn, challenge)
    auth.server_finish(SECRET, cn, sn, answer)  # no error
    with pytest.raises(auth.RpcAuthError, match="server_proof"):
        auth.client_finish(OTHER, cn, challenge)  # a server without the secret
    with pytest.raises(auth.RpcAuthError, match="client_proof"):
        auth.server_finish(SECRET, cn, sn, auth.client_finish(SECRET, cn, auth.server_challenge(SECRET, auth.client_hello(cn, 1),
                                                                                                   auth.new_nonce())[1]))
    # the server's proof is not a client proof (no reflection)
    with pytest.raises(auth.RpcAuthError):
        auth.server_finish(SECRET, cn, sn, {"client_proof": challenge["server_proof"]})
    with pytest.raises(auth.RpcAuthError, match="not the Authenticate"):
        auth.server_challenge(SECRET, {"api": "LeaderAndIsr", "correlation_id": 1}, sn)
    with pytest.raises(auth.RpcAuthError, match="client_nonce"):
        auth.server_challenge(SECRET, {"api": "Authenticate", "client_nonce": b"short"}, sn)


def test_secret_configuration(tmp_path):
    assert auth.load_secret("", "") is None
    assert auth.load_secret("x" * 16, "") == b"x" * 16
    f = tmp_path / "secret"
    f.write_text("  " + "y" * 20 + "\n")
    assert auth.load_secret("", str(f)) == b"y" * 20
    with pytest.raises(ValueError, match="at least 16"):
        auth.load_secret("short", "")
    with pytest.raises(ValueError, match="not both"):
        auth.load_secret("x" * 16, str(f))
    with pytest.raises(ValueError, match="missing"):
        auth.load_secret("", str(tmp_path / "missing"))


async def _raw_exchange(port: int, frames: list[dict]) -> bytes:
    """Send frames without the client's handshake logic; what the server sends back
    before it closes (b"" if it closes at once)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for f in frames:
            writer.writelines(encode_frame(f))
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5)  # until EOF: the server closed
    finally:
        writer.close()


async def test_forged_frames_are_refused_and_the_server_keeps_serving(caplog):
    served: list[str] = []

    async def handler(header, payload):
        served.append(header["api"])
        return {"error": 0}, b""

    server = RpcServer(handler, secret=SECRET)
    await server.start("127.0.0.1", 0)
    port = server._server.sockets[0].getsockname()[1]
    good = RpcClient("127.0.0.1", port, sender=1, secret=SECRET)
    wrong = RpcClient("127.0.0.1", port, sender=2, secret=OTHER)
    plain = RpcClient("127.0.0.1", port, sender=3)
    try:
        header, _ = await good.call("Ping", {}, timeout_ms=5000)
        assert header["error"] == 0
        # a LeaderAndIsr with no handshake: closed, never handled
        forged = {"api": "LeaderAndIsr", "correlation_id": 7, "sender": 9, "controller_epoch": 99, "partitions": []}
        assert await _raw_exchange(port, [forged]) == b""
        with pytest.raises(RpcError):
            await plain.call("StopReplica", {"partitions": []}, timeout_ms=5000)
        # a client with the wrong secret: it refuses the server's proof itself
        with pytest.raises(RpcError, match="authentication"):
            await wrong.call("LeaderAndIsr", {}, timeout_ms=5000)
        # a forger that ignores the server's proof and sends a made-up client proof
        cn = auth.new_nonce()
        got = await _raw_exchange(port, [auth.client_hello(cn, 9), {"client_proof": b"\0" * 32},
                                         {"api": "UpdateMetadata", "correlation_id": 8}])
        (size,) = struct.unpack(">I", got[:4])
        assert len(got) == 4 + size  # only the challenge came back, then the close
        assert served == ["Ping"]
        assert server.auth_failures >= 3
        assert "authentication failed" in caplog.text
        header, _ = await good.call("Ping", {}, timeout_ms=5000)  # still serving
        assert served == ["Ping", "Ping"]
    finally:
        for c in (good, wrong, plain):
            await c.close()
        await server.close()


def test_a_broker_whose_clients_authenticate_warns_when_its_rpc_does_not():
    from kafkalite.config import BrokerConfig

    plain = BrokerConfig({"broker.id": 1})
    assert auth.unauthenticated_rpc_warning(plain, None) is None
    secured = BrokerConfig({"broker.id": 1, "listeners": "SASL_PLAINTEXT://127.0.0.1:9192"})
    warning = auth.unauthenticated_rpc_warning(secured, None)
    assert warning is not None and "SASL_PLAINTEXT" in warning and "inter.broker.secret" in warning
    assert auth.unauthenticated_rpc_warning(secured, SECRET) is None
    authorizer = BrokerConfig({"broker.id": 1, "authorizer.class.name": "kafkalite.AclAuthorizer"})
    assert "authorizer.class.name" in (auth.unauthenticated_rpc_warning(authorizer, None) or "")
