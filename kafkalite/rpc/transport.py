"""Inter-broker RPC over asyncio Protocols: one connection per (source, destination) pair,
many requests in flight, matched by correlation id (DESIGN.md section 4).

Request headers carry `api`, `version`, `correlation_id`, `sender` and the fencing epochs
the request depends on; responses carry `correlation_id` and `error` (a Kafka error code,
0 for none). The server side hands each decoded request to one handler coroutine and
writes back what it returns; a malformed frame closes that connection and nothing else.

With a cluster secret (`secret`), every connection starts with the mutual handshake of
kafkalite.rpc.auth; the server reads no request from a connection that has not passed it,
and a failed or missing handshake closes the connection with a log line.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import struct
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, cast

from kafkalite.aio import cancel_and_wait
from kafkalite.rpc import auth
from kafkalite.rpc.framing import MalformedFrameError, decode_frame, encode_frame

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")
RPC_FRAME_BYTES_MAX = 256 * 1024 * 1024
RPC_IN_FLIGHT_MAX = 1000

Handler = Callable[[dict[str, Any], memoryview], Awaitable[tuple[dict[str, Any], bytes]]]


class RpcError(Exception):
    """The call could not be completed (connection lost, timed out, peer unreachable)."""


class RpcConnectRefused(RpcError):
    """Connecting was refused: nothing listens on the peer's address (its process is gone,
    or not started yet)."""


class _FrameConnection(asyncio.Protocol):
    """One RPC connection as an asyncio Protocol: `data_received` cuts the length-prefixed
    frames out of what arrives and hands each to `on_frame` at once, and writes are flow
    controlled (`drain`). Issue 13: a stream reader costs two awaits and a task wake-up per
    frame (readexactly of the prefix, then of the body), and a fetch round trip is a frame
    each way per follower per append; this is the same work with neither.

    Until `on_frame` is set, frames wait in an inbox that `next_frame()` reads: the
    authentication handshake runs there, and whatever the peer sent right behind it is
    handled in order once it passed. The first `small_frames` frames may be at most
    AUTH_FRAME_BYTES_MAX (handshake frames are small); later ones `frame_bytes_max`."""

    def __init__(self, frame_bytes_max: int, *, small_frames: int = 0):
        self.transport: asyncio.Transport | None = None
        self.on_frame: Callable[[memoryview], None] | None = None
        self.lost = False
        self.closed_because: str | None = None  # why this side closed it (a malformed frame)
        self._frame_bytes_max = frame_bytes_max
        self._small_frames = small_frames
        self._buf = bytearray()
        self._need = 4  # bytes `_buf` must hold before a frame can be complete
        self._inbox: list[memoryview] = []
        self._inbox_waiter: asyncio.Future | None = None
        self.writing_paused = False
        self._drain_waiters: list[asyncio.Future] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's are not asyncio.Transport subclasses)

    def data_received(self, data: bytes) -> None:
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return  # a large frame still coming: no copy until it is whole
            data = bytes(self._buf)
            self._buf.clear()
        pos, end = 0, len(data)
        need = 4
        try:
            while end - pos >= 4:
                (size,) = _LEN.unpack_from(data, pos)
                limit = AUTH_FRAME_BYTES_MAX if self._small_frames > 0 else self._frame_bytes_max
                if size > limit:
                    raise MalformedFrameError(f"frame of {size} bytes exceeds {limit}")
                if end - pos - 4 < size:
                    need = 4 + size
                    break
                frame = memoryview(data)[pos + 4 : pos + 4 + size]  # the payload handed on is a view: no copy
                pos += 4 + size
                if self._small_frames > 0:
                    self._small_frames -= 1
                if self.on_frame is not None:
                    self.on_frame(frame)
                else:
                    self._inbox.append(frame)
                    _resolve(self._inbox_waiter)
                if self.lost or self.transport is None or self.transport.is_closing():
                    return  # the frame's handler closed the connection
        except MalformedFrameError as e:
            self.on_malformed(str(e))
            return
        self._need = need
        if pos < end:
            self._buf += memoryview(data)[pos:]

    def on_malformed(self, reason: str) -> None:
        self.close_for(reason)

    def close_for(self, reason: str) -> None:
        """Close this connection, saying why (a malformed frame, a failed handler)."""
        if self.closed_because is None:
            self.closed_because = reason
        if self.transport is not None:
            self.transport.close()

    async def next_frame(self) -> memoryview:
        """The next frame from the inbox (while `on_frame` is unset); ConnectionError if
        the connection ends first."""
        while not self._inbox:
            if self.lost:
                raise ConnectionError(self.closed_because or "connection closed")
            self._inbox_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._inbox_waiter
            finally:
                self._inbox_waiter = None
        return self._inbox.pop(0)

    def handle_inbox_with(self, on_frame: Callable[[memoryview], None]) -> None:
        """From now on frames go to `on_frame`, starting with those already in the inbox."""
        self.on_frame = on_frame
        waiting, self._inbox = self._inbox, []
        for frame in waiting:
            if self.lost or self.transport is None or self.transport.is_closing():
                return
            on_frame(frame)

    def write(self, chunks: list[bytes]) -> None:
        """Queue a whole frame (one writelines: frames never interleave)."""
        if self.lost or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError(self.closed_because or "connection closed")
        self.transport.writelines(chunks)

    async def drain(self) -> None:
        """Wait while the transport's buffer is over its high-water mark."""
        if not self.writing_paused:
            return
        if self.lost:
            raise ConnectionResetError("connection closed")
        fut = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(fut)
        await fut

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            _resolve(fut)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.writing_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(ConnectionResetError("connection closed"))
        _resolve(self._inbox_waiter)


def _resolve(fut: asyncio.Future | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


AUTH_FRAME_BYTES_MAX = 4096


class _ServerConnection(_FrameConnection):
    """One accepted connection: each request runs in a task of its own (a ReplicaFetch
    parks until there is something to answer), answers go back as they are ready."""

    def __init__(self, server: RpcServer):
        super().__init__(server._frame_bytes_max, small_frames=2 if server._secret is not None else 0)
        self.server = server
        self.peer: Any = None
        self.pending: set[asyncio.Task] = set()
        self._reading_paused = False
        self._auth_task: asyncio.Task | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.peer = transport.get_extra_info("peername")
        self.server._conns.add(self)
        if self.server._secret is not None:
            self._auth_task = asyncio.get_running_loop().create_task(self._authenticate())
        else:
            self.on_frame = self._dispatch

    async def _authenticate(self) -> None:
        secret = self.server._secret
        assert secret is not None
        try:
            async with asyncio.timeout(auth.HANDSHAKE_TIMEOUT_S):
                client_nonce, challenge = auth.server_challenge(secret, _header_of(await self.next_frame()), auth.new_nonce())
                self.write(encode_frame(challenge))
                await self.drain()
                auth.server_finish(secret, client_nonce, challenge["server_nonce"], _header_of(await self.next_frame()))
            self.handle_inbox_with(self._dispatch)
            return
        except (auth.RpcAuthError, MalformedFrameError) as e:
            reason = str(e)
        except TimeoutError:
            reason = f"no handshake within {auth.HANDSHAKE_TIMEOUT_S:g} s"
        except (ConnectionError, OSError) as e:
            reason = f"connection failed during the handshake: {e}"
        self.server.auth_failures += 1
        log.warning("closing rpc connection from %s: authentication failed (%s)", self.peer, reason)
        assert self.transport is not None
        self.transport.close()

    def on_malformed(self, reason: str) -> None:
        log.warning("closing rpc connection from %s: %s", self.peer, reason)
        self.close_for(reason)

    def _dispatch(self, frame: memoryview) -> None:
        try:
            header, payload = decode_frame(frame)
            if not isinstance(header.get("api"), str) or not isinstance(header.get("correlation_id"), int):
                raise MalformedFrameError("header lacks api or correlation_id")
        except MalformedFrameError as e:
            self.on_malformed(str(e))
            return
        # The request runs at once, here: most answers need no wait (a ReplicaFetch with
        # records ready, a Ping), and those go out without a task. One that waits (a
        # ReplicaFetch parked until the next append) goes on in a task from where it is.
        run = self._run_one(header, payload)
        try:
            awaiting = run.send(None)
        except StopIteration:
            return
        task = asyncio.get_running_loop().create_task(_carry_on(run, awaiting))
        self.pending.add(task)
        task.add_done_callback(self._one_done)
        if len(self.pending) >= RPC_IN_FLIGHT_MAX and not self._reading_paused:
            assert self.transport is not None
            self.transport.pause_reading()  # no more requests read until one is answered
            self._reading_paused = True

    def _one_done(self, task: asyncio.Task) -> None:
        self.pending.discard(task)
        if self._reading_paused and len(self.pending) < RPC_IN_FLIGHT_MAX and not self.lost:
            assert self.transport is not None
            self._reading_paused = False
            self.transport.resume_reading()

    async def _run_one(self, header: dict[str, Any], payload: memoryview) -> None:
        cid = header.get("correlation_id")
        try:
            resp, resp_payload = await self.server._handler(header, payload)
        except asyncio.CancelledError:
            raise
        except Exception:  # a programmer error: logged, never answered as a wire code
            log.exception("rpc handler failed for %s from %s; closing the connection", header.get("api"), self.peer)
            self.close_for("handler failed")
            return
        resp["correlation_id"] = cid
        try:
            self.write(encode_frame(resp, resp_payload))
            await self.drain()
        except (ConnectionError, OSError, RuntimeError):
            if self.transport is not None:
                self.transport.close()  # the peer went away; nobody waits for this answer

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.server._conns.discard(self)
        for task in list(self.pending):
            task.cancel()
        if self._auth_task is not None:
            self._auth_task.cancel()

    def tasks(self) -> list[asyncio.Task]:
        return [*self.pending, *([self._auth_task] if self._auth_task is not None else [])]


@types.coroutine
def _carry_on(coro: Coroutine[Any, Any, Any], awaiting: Any) -> Generator[Any, Any, Any]:
    """Go on running `coro`, which was started outside any task and is now awaiting
    `awaiting` (what it yielded: the future it waits on), as a task's coroutine: what the
    task sends or throws in (the future's outcome, a cancellation) is passed on to it.
    Python 3.12's eager tasks do this; 3.11 has none."""
    while True:
        try:
            sent = yield awaiting
        except BaseException as e:  # noqa: BLE001 - a cancellation (or whatever else) thrown into the task goes on to coro
            try:
                awaiting = coro.throw(e)
            except StopIteration as done:
                return done.value
        else:
            try:
                awaiting = coro.send(sent)
            except StopIteration as done:
                return done.value


def _header_of(frame: memoryview) -> dict[str, Any]:
    header, _ = decode_frame(frame)
    return header


class RpcServer:
    """The inter-broker listener. `close()` stops accepting, closes every connection and
    cancels and awaits the requests they were handling."""

    def __init__(self, handler: Handler, *, frame_bytes_max: int = RPC_FRAME_BYTES_MAX, secret: bytes | None = None):
        self._handler = handler
        self._frame_bytes_max = frame_bytes_max
        self._secret = secret
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[_ServerConnection] = set()
        self.auth_failures = 0

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerConnection(self), host, port, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        conns = list(self._conns)
        tasks = [t for c in conns for t in c.tasks()]
        for c in conns:
            if c.transport is not None:
                c.transport.close()
        await cancel_and_wait(tasks)


class _CallTimedOut(Exception):
    """A call's deadline passed before its answer came (RpcClient.call turns it into RpcError)."""


def _time_out(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(_CallTimedOut())


class _ClientConnection(_FrameConnection):
    def __init__(self, client: RpcClient):
        super().__init__(RPC_FRAME_BYTES_MAX, small_frames=1 if client._secret is not None else 0)
        self.client = client

    def answer(self, frame: memoryview) -> None:
        try:
            header, payload = decode_frame(frame)
        except MalformedFrameError as e:
            self.close_for(str(e))
            return
        fut = self.client._pending.pop(header.get("correlation_id"), None)
        if fut is not None and not fut.done():
            fut.set_result((header, payload))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.client._connection_lost(self, exc)


class RpcClient:
    """A connection to one peer broker; reconnects lazily; every call has a deadline."""

    def __init__(self, host: str, port: int, *, sender: int, on_drop: Callable[[], None] | None = None,
                 secret: bytes | None = None):
        self.host = host
        self.port = port
        self.sender = sender
        self._secret = secret
        self.on_drop = on_drop  # called when an established connection ends (not on close())
        self._cids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._conn: _ClientConnection | None = None
        self._connect_lock = asyncio.Lock()
        self._closed = False

    def retarget(self, host: str, port: int) -> None:
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self._drop_connection(RpcError("peer address changed"))

    def _usable(self) -> _ClientConnection | None:
        conn = self._conn
        if conn is not None and not conn.lost and conn.transport is not None and not conn.transport.is_closing():
            return conn
        return None

    async def _ensure_connected(self) -> _ClientConnection:
        conn = self._usable()
        if conn is not None:
            return conn
        async with self._connect_lock:
            conn = self._usable()
            if conn is not None:
                return conn
            if self._closed:
                raise RpcError("client closed")
            loop = asyncio.get_running_loop()
            try:
                _, conn = await loop.create_connection(lambda: _ClientConnection(self), self.host, self.port)
            except ConnectionRefusedError as e:
                raise RpcConnectRefused(f"cannot connect to {self.host}:{self.port}: {e.strerror or e}") from None
            except OSError as e:
                raise RpcError(f"cannot connect to {self.host}:{self.port}: {e.strerror or e}") from None
            assert isinstance(conn, _ClientConnection)
            if self._secret is not None:
                await self._authenticate(conn)
            conn.handle_inbox_with(conn.answer)
            if self._closed:  # closed while connecting
                assert conn.transport is not None
                conn.transport.close()
                raise RpcError("client closed")
            self._conn = conn
            return conn

    async def _authenticate(self, conn: _ClientConnection) -> None:
        """The client half of kafkalite.rpc.auth's handshake; RpcError (connection closed)
        when the server does not prove it holds the secret, or closes on us."""
        assert self._secret is not None
        nonce = auth.new_nonce()
        try:
            async with asyncio.timeout(auth.HANDSHAKE_TIMEOUT_S):
                conn.write(encode_frame(auth.client_hello(nonce, self.sender)))
                await conn.drain()
                conn.write(encode_frame(auth.client_finish(self._secret, nonce, _header_of(await conn.next_frame()))))
                await conn.drain()
        except (auth.RpcAuthError, MalformedFrameError, TimeoutError, ConnectionError, OSError) as e:
            assert conn.transport is not None
            conn.transport.close()
            log.warning("rpc handshake with %s:%d failed: %s", self.host, self.port, e or type(e).__name__)
            raise RpcError(f"authentication with {self.host}:{self.port} failed: {e or type(e).__name__}") from None

    def _connection_lost(self, conn: _ClientConnection, exc: Exception | None) -> None:
        if self._conn is not conn:
            return  # not established yet (its connect fails on its own), or already dropped
        if conn.closed_because is not None:
            error = RpcError(f"connection to {self.host}:{self.port} failed: {conn.closed_because}")
        elif exc is not None:
            error = RpcError(f"connection to {self.host}:{self.port} failed: {exc}")
        else:
            error = RpcError(f"connection to {self.host}:{self.port} lost")
        self._drop_connection(error)
        if self.on_drop is not None and not self._closed:
            self.on_drop()

    def _drop_connection(self, error: Exception) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.transport is not None:
            conn.transport.close()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)

    def peer_closed(self) -> bool:
        """Whether the peer has already closed (or reset) the connection, as the kernel knows
        it now, before the connection has had its turn to read: a non-blocking peek."""
        conn = self._usable()
        if conn is None:
            return True
        assert conn.transport is not None
        sock = conn.transport.get_extra_info("socket")
        if sock is None:
            return False
        try:
            with socket.socket(fileno=os.dup(sock.fileno())) as peek:
                return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False  # open, nothing to read
        except OSError:
            return True  # reset

    async def call(
        self, api: str, body: dict[str, Any], payload: bytes = b"", *, timeout_ms: int = 30000
    ) -> tuple[dict[str, Any], memoryview]:
        conn = self._usable() or await self._ensure_connected()
        cid = next(self._cids)
        header = dict(body)
        header["api"] = api
        header.setdefault("version", 0)
        header["correlation_id"] = cid
        header["sender"] = self.sender
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        self._pending[cid] = fut
        timer: asyncio.TimerHandle | None = None
        try:
            conn.write(encode_frame(header, payload))
            if conn.writing_paused:
                await conn.drain()
            # The answer's deadline is a timer that fails the future, which is awaited
            # directly: a cancellation of the caller always ends the wait (wait_for on 3.11
            # can swallow one that races the answer, and a cancelled fetcher would then never
            # stop), and no Timeout context is built per call (a ReplicaFetch per append).
            timer = loop.call_later(timeout_ms / 1000, _time_out, fut)
            return await fut
        except _CallTimedOut:
            raise RpcError(f"{api} to {self.host}:{self.port} timed out after {timeout_ms} ms") from None
        except (ConnectionError, OSError) as e:
            self._pending.pop(cid, None)
            if self._conn is conn:
                self._drop_connection(RpcError(str(e)))
            raise RpcError(f"{api} to {self.host}:{self.port} failed: {e}") from None
        finally:
            if timer is not None:
                timer.cancel()
            self._pending.pop(cid, None)

    async def close(self) -> None:
        self._closed = True
        self._drop_connection(RpcError("client closed"))
