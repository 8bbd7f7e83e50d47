"""What a client's connection leaves behind when it goes (kafkalite.broker.client_listener):
nothing. A real listener on a loopback port; the broker behind it is a stand-in whose
request handler is given per test."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from types import SimpleNamespace

from kafkalite.broker.client_listener import ClientListener
from kafkalite.protocol.codec import encode_request
from kafkalite.protocol.schema import ApiKey


def _listener(handle, in_flight: int) -> ClientListener:
    metrics = SimpleNamespace(request=lambda api: None, request_total=lambda api, seconds: None)
    broker = SimpleNamespace(settings={"socket.request.max.bytes": 100 << 20, "max.in.flight.requests.per.connection": in_flight},
                             kafka_apis=SimpleNamespace(handle=handle), metrics=metrics)
    return ClientListener(broker)


def _fetch(cid: int, max_wait_ms: int = 0) -> bytes:
    return encode_request(ApiKey.FETCH, 4, cid, "c", {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})


def _fetch_answer(records: bytes) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 0, "last_stable_offset": 0, "log_start_offset": 0,
         "aborted_transactions": None, "preferred_read_replica": -1, "records": records}]}]}


async def _until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.05)
    return condition()


async def test_a_client_that_pipelines_never_reads_and_resets_leaves_nothing_behind():
    """Its answers fill the socket and the in-flight queue; then it resets. The sender's
    write fails, and the reader, waiting for room in the full queue, must notice: it held
    the connection and every queued answer for ever."""

    async def handle(header, body, host=""):
        return _fetch_answer(b"x" * (256 << 10))

    lst = _listener(handle, in_flight=8)
    await lst.start("127.0.0.1", 0)
    port = lst._server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        sending = asyncio.ensure_future(loop.sock_sendall(s, b"".join(_fetch(i) for i in range(200))))
        assert await _until(lambda: lst.connections == 1, 5)
        await asyncio.sleep(1.0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        s.close()
        sending.cancel()
        assert await _until(lambda: lst.connections == 0 and not lst._conns, 10)
    finally:
        await lst.close()


async def test_requests_still_parked_when_the_client_goes_are_ended():
    """Long polls (a fetch parked in the purgatory, an acks=all produce waiting for the
    ISR) of a connection that closed end with it, not at their own timeout."""
    started: list[asyncio.Task] = []

    async def handle(header, body, host=""):
        started.append(asyncio.current_task())
        await asyncio.sleep(60)  # stands for a fetch parked for its max wait
        return _fetch_answer(b"")

    lst = _listener(handle, in_flight=100)
    await lst.start("127.0.0.1", 0)
    port = lst._server.sockets[0].getsockname()[1]
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(_fetch(i, 60_000) for i in range(20)))
        await writer.drain()
        assert await _until(lambda: len(started) == 20, 5)
        writer.close()
        assert await _until(lambda: all(t.done() for t in started), 10)
        assert lst.connections == 0
    finally:
        await lst.close()
