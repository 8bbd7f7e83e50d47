"""The inter-broker RPC as asyncio Protocols (issue 13: no stream reader, and a request that
needs no wait answered without a task). Frames are cut out of whatever the socket hands
over, however it is split; a request that waits goes on in a task from where it stopped,
and is cancelled with its connection; all of it under uvloop (as the brokers run) as
well as under asyncio's own loop."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest
import uvloop

from kafkalite.rpc.framing import encode_frame
from kafkalite.rpc.transport import RPC_FRAME_BYTES_MAX, RpcClient, RpcError, RpcServer, _FrameConnection

SECRET = b"k" * 32


class _Transport:
    """Just enough of a transport for _FrameConnection's framing (pure logic)."""

    def __init__(self) -> None:
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _frames(conn: _FrameConnection) -> list[bytes]:
    got: list[bytes] = []
    conn.on_frame = lambda frame: got.append(bytes(frame))
    return got


def _wire(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(b)) + b for b in bodies)


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 64, 100_000])
def test_frames_are_cut_out_however_the_bytes_arrive(step):
    bodies = [b"", b"a", b"hello world", bytes(range(256)) * 40, b"z" * 3]
    wire = _wire(*bodies)
    conn = _FrameConnection(RPC_FRAME_BYTES_MAX)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    got = _frames(conn)
    for i in range(0, len(wire), step):
        conn.data_received(wire[i : i + step])
    assert got == bodies
    assert not conn._buf  # nothing left over


def test_an_oversized_frame_closes_the_connection_and_nothing_after_it_is_handed_on():
    conn = _FrameConnection(1000)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    got = _frames(conn)
    conn.data_received(_wire(b"ok", b"x" * 1001, b"never"))
    assert got == [b"ok"]
    assert transport.closed
    assert conn.closed_because == "frame of 1001 bytes exceeds 1000"


def test_the_first_frames_of_a_handshake_must_be_small_and_wait_in_the_inbox():
    conn = _FrameConnection(RPC_FRAME_BYTES_MAX, small_frames=1)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(_wire(b"hello", b"y" * 10_000))  # the handshake frame, then a large request right behind it
    assert not transport.closed
    assert [bytes(f) for f in conn._inbox] == [b"hello", b"y" * 10_000]
    conn._inbox.pop(0)  # what the handshake read (next_frame)
    got: list[bytes] = []
    conn.handle_inbox_with(lambda frame: got.append(bytes(frame)))  # the handshake passed: in order, then live
    conn.data_received(_wire(b"later"))
    assert got == [b"y" * 10_000, b"later"]
    big_first = _FrameConnection(RPC_FRAME_BYTES_MAX, small_frames=1)
    t2 = _Transport()
    big_first.connection_made(t2)  # type: ignore[arg-type]
    big_first.data_received(_wire(b"x" * 5000))
    assert t2.closed  # a first frame over AUTH_FRAME_BYTES_MAX is no handshake


async def _exercise(secret: bytes | None) -> None:
    """Round trips of every size, requests that wait and requests that do not, in any
    order; the waiting ones are cancelled when the server closes."""
    parked = asyncio.Event()
    released = asyncio.Event()
    cancelled: list[str] = []

    async def handler(header, payload):
        if header["api"] == "Park":
            parked.set()
            try:
                await released.wait()
            except asyncio.CancelledError:
                cancelled.append("Park")
                raise
            return {"error": 0, "parked": True}, b""
        if header["api"] == "Sleep":
            await asyncio.sleep(header["s"])
        return {"error": 0, "api": header["api"], "n": header.get("n")}, bytes(payload)

    server = RpcServer(handler, secret=secret)
    await server.start("127.0.0.1", 0)
    port = server._server.sockets[0].getsockname()[1]
    client = RpcClient("127.0.0.1", port, sender=1, secret=secret)
    try:
        big = bytes(range(256)) * (3 * 4096)  # 3 MiB: many reads on the way in and out
        header, payload = await client.call("Echo", {"n": 1}, big, timeout_ms=10_000)
        assert header["n"] == 1 and bytes(payload) == big
        # one that waits is answered after ones that did not, each to its own call
        park = asyncio.create_task(client.call("Park", {}, timeout_ms=10_000))
        await asyncio.wait_for(parked.wait(), 5)
        slow = asyncio.create_task(client.call("Sleep", {"s": 0.05, "n": 2}, timeout_ms=10_000))
        quick = [await client.call("Echo", {"n": i}, b"q" * i, timeout_ms=5000) for i in range(3, 30)]
        assert [(h["n"], bytes(p)) for h, p in quick] == [(i, b"q" * i) for i in range(3, 30)]
        assert (await slow)[0]["n"] == 2
        released.set()
        assert (await park)[0]["parked"] is True
        # a request still waiting when the server closes is cancelled, and its caller fails
        released.clear()
        parked.clear()
        park = asyncio.create_task(client.call("Park", {}, timeout_ms=10_000))
        await asyncio.wait_for(parked.wait(), 5)
        await server.close()
        with pytest.raises(RpcError):
            await park
        assert cancelled == ["Park"]
    finally:
        await client.close()
        await server.close()


@pytest.mark.parametrize("secret", [None, SECRET])
def test_round_trips_under_uvloop(secret):
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_exercise(secret))


@pytest.mark.parametrize("secret", [None, SECRET])
async def test_round_trips_under_asyncio(secret):
    await _exercise(secret)


async def test_a_malformed_header_closes_that_connection_only(caplog):
    async def handler(header, payload):
        return {"error": 0}, b""

    server = RpcServer(handler)
    await server.start("127.0.0.1", 0)
    port = server._server.sockets[0].getsockname()[1]
    client = RpcClient("127.0.0.1", port, sender=1)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.writelines(encode_frame({"api": "NoCorrelationId"}))
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
        writer.close()
        with caplog.at_level(logging.WARNING):
            assert (await client.call("Fine", {}, timeout_ms=5000))[0]["error"] == 0
        assert "header lacks api or correlation_id" in caplog.text
    finally:
        await client.close()
        await server.close()
