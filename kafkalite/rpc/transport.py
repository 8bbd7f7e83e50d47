"""Inter-broker RPC over asyncio streams: one connection per (source, destination) pair,
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
from collections.abc import Awaitable, Callable
from typing import Any

from kafkalite.aio import StreamServer, cancel_and_wait
from kafkalite.rpc import auth
from kafkalite.rpc.framing import RPC_FRAME_BYTES_MAX, MalformedFrameError, decode_frame, encode_frame

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")
RPC_IN_FLIGHT_MAX = 1000

Handler = Callable[[dict[str, Any], memoryview], Awaitable[tuple[dict[str, Any], bytes]]]


class RpcError(Exception):
    """The call could not be completed (connection lost, timed out, peer unreachable)."""


class RpcConnectRefused(RpcError):
    """Connecting was refused: nothing listens on the peer's address (its process is gone,
    or not started yet)."""


async def _open_connection(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio.open_connection, trying the addresses `host` resolves to one at a time, in
    order (as asyncio does without happy eyeballs), so that ConnectionRefusedError says
    that every one of them refused. When a name resolves to several addresses (localhost
    to ::1 and 127.0.0.1) and all refuse, asyncio raises a bare OSError("Multiple
    exceptions: ...") that keeps no errno nor the errors, only their text: a dead broker
    advertised under such a name was never found gone by the process watch (its verdict
    stayed UNKNOWN) and waited for its session to expire."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"getaddrinfo({host!r}) returned no address")
    errors: list[OSError] = []
    for family, _type, proto, _canonical, address in infos:
        try:
            return await asyncio.open_connection(address[0], address[1], family=family, proto=proto, limit=1 << 20)
        except OSError as e:
            errors.append(e)
    if len(errors) == 1 or all(isinstance(e, ConnectionRefusedError) for e in errors):
        raise errors[0]
    raise OSError("; ".join(f"{address[0]}: {e}" for (*_, address), e in zip(infos, errors, strict=True)))


async def _read_frame(reader: asyncio.StreamReader, frame_bytes_max: int) -> bytes | None:
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError:
        return None
    (size,) = _LEN.unpack(head)
    if size > frame_bytes_max:
        raise MalformedFrameError(f"frame of {size} bytes exceeds {frame_bytes_max}")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


async def _read_message(reader: asyncio.StreamReader) -> dict[str, Any]:
    """One handshake frame's header map (handshake frames are small and carry no payload)."""
    frame = await _read_frame(reader, AUTH_FRAME_BYTES_MAX)
    if frame is None:
        raise auth.RpcAuthError("connection closed during the handshake")
    header, _ = decode_frame(frame)
    return header


AUTH_FRAME_BYTES_MAX = 4096


class RpcServer(StreamServer):
    def __init__(self, handler: Handler, *, frame_bytes_max: int = RPC_FRAME_BYTES_MAX, secret: bytes | None = None):
        super().__init__()
        self._handler = handler
        self._frame_bytes_max = frame_bytes_max
        self._secret = secret
        self.auth_failures = 0

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any) -> bool:
        assert self._secret is not None
        try:
            async with asyncio.timeout(auth.HANDSHAKE_TIMEOUT_S):
                client_nonce, challenge = auth.server_challenge(self._secret, await _read_message(reader), auth.new_nonce())
                writer.writelines(encode_frame(challenge))
                await writer.drain()
                auth.server_finish(self._secret, client_nonce, challenge["server_nonce"], await _read_message(reader))
            return True
        except (auth.RpcAuthError, MalformedFrameError) as e:
            reason = str(e)
        except TimeoutError:
            reason = f"no handshake within {auth.HANDSHAKE_TIMEOUT_S:g} s"
        except (ConnectionError, OSError) as e:
            reason = f"connection failed during the handshake: {e}"
        self.auth_failures += 1
        log.warning("closing rpc connection from %s: authentication failed (%s)", peer, reason)
        return False

    async def handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if self._secret is not None and not await self._authenticate(reader, writer, peer):
            writer.close()
            return
        pending: set[asyncio.Task] = set()

        async def run_one(header: dict[str, Any], payload: memoryview) -> None:
            cid = header.get("correlation_id")
            try:
                resp, resp_payload = await self._handler(header, payload)
            except asyncio.CancelledError:
                raise
            except Exception:  # a programmer error: logged, never answered as a wire code
                log.exception("rpc handler failed for %s from %s; closing the connection", header.get("api"), peer)
                writer.close()
                return
            resp["correlation_id"] = cid
            if writer.is_closing():
                return  # the peer went away; nobody waits for this answer
            try:
                # One writelines puts the whole frame in the transport's buffer, so answers
                # never interleave; concurrent drains are allowed (each waits for room).
                writer.writelines(encode_frame(resp, resp_payload))
                await writer.drain()
            except (ConnectionError, OSError, RuntimeError):
                writer.close()

        try:
            while True:
                frame = await _read_frame(reader, self._frame_bytes_max)
                if frame is None:
                    break
                header, payload = decode_frame(frame)
                if not isinstance(header.get("api"), str) or not isinstance(header.get("correlation_id"), int):
                    raise MalformedFrameError("header lacks api or correlation_id")
                if len(pending) >= RPC_IN_FLIGHT_MAX:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                t = asyncio.create_task(run_one(header, payload))
                pending.add(t)
                t.add_done_callback(pending.discard)
        except MalformedFrameError as e:
            log.warning("closing rpc connection from %s: %s", peer, e)
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            for t in list(pending):
                t.cancel()
            writer.close()


class _CallTimedOut(Exception):
    """A call's deadline passed before its answer came (RpcClient.call turns it into RpcError)."""


def _time_out(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(_CallTimedOut())


def _drain_may_wait(writer: asyncio.StreamWriter) -> bool:
    """Whether writing may be paused: only then can drain() wait, and only then is the
    wait put under a deadline (a transport resumes writing at or below its low-water mark,
    so a paused one always holds more). Nearly every frame goes straight to the socket."""
    transport = writer.transport
    return transport.get_write_buffer_size() > transport.get_write_buffer_limits()[0]


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
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._connect_lock = asyncio.Lock()
        self._closed = False
        # Bumped by retarget and close: a connect that started under an older generation
        # is closed when it completes, never stored (it reached the old address, or the
        # client is closed).
        self._generation = 0

    def retarget(self, host: str, port: int) -> None:
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self._generation += 1
            self._drop_connection(RpcError("peer address changed"))

    async def _connect_by(self, deadline: float) -> asyncio.StreamWriter:
        """The connection, made if there is none; by `deadline` (loop time), which bounds
        the wait for another call's connect, the TCP connect (a host that drops SYNs would
        hold it for minutes) and the handshake. TimeoutError when it passes: a connection
        half made is closed, and the next call starts again."""
        async with asyncio.timeout_at(deadline), self._connect_lock:
            while True:
                if self._writer is not None and not self._writer.is_closing():
                    return self._writer
                if self._closed:
                    raise RpcError("client closed")
                generation, host, port = self._generation, self.host, self.port
                try:
                    reader, writer = await _open_connection(host, port)
                except ConnectionRefusedError as e:
                    raise RpcConnectRefused(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
                except OSError as e:
                    raise RpcError(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
                try:
                    if self._secret is not None:
                        await self._authenticate(reader, writer, host, port)
                except BaseException:  # the deadline's cancellation too: never leave it open
                    writer.close()
                    raise
                if generation != self._generation:
                    # Retargeted (or closed) meanwhile: this reached the old address.
                    writer.close()
                    continue
                self._writer = writer
                self._reader_task = asyncio.create_task(self._read_loop(reader, writer))
                return writer

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int) -> None:
        """The client half of kafkalite.rpc.auth's handshake; RpcError (connection closed)
        when the server does not prove it holds the secret, or closes on us."""
        assert self._secret is not None
        nonce = auth.new_nonce()
        try:
            async with asyncio.timeout(auth.HANDSHAKE_TIMEOUT_S):
                writer.writelines(encode_frame(auth.client_hello(nonce, self.sender)))
                await writer.drain()
                writer.writelines(encode_frame(auth.client_finish(self._secret, nonce, await _read_message(reader))))
                await writer.drain()
        except (auth.RpcAuthError, MalformedFrameError, TimeoutError, ConnectionError, OSError) as e:
            writer.close()
            log.warning("rpc handshake with %s:%d failed: %s", host, port, e or type(e).__name__)
            raise RpcError(f"authentication with {host}:{port} failed: {e or type(e).__name__}") from None

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        error: Exception = RpcError(f"connection to {self.host}:{self.port} lost")
        try:
            while True:
                frame = await _read_frame(reader, RPC_FRAME_BYTES_MAX)
                if frame is None:
                    break
                header, payload = decode_frame(frame)
                fut = self._pending.pop(header.get("correlation_id"), None)
                if fut is not None and not fut.done():
                    fut.set_result((header, payload))
        except (MalformedFrameError, ConnectionError, OSError) as e:
            error = RpcError(f"connection to {self.host}:{self.port} failed: {e}")
        except asyncio.CancelledError:
            pass
        finally:
            if self._writer is writer:
                self._drop_connection(error)
                if self.on_drop is not None and not self._closed:
                    self.on_drop()

    def _drop_connection(self, error: Exception) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)

    def peer_closed(self) -> bool:
        """Whether the peer has already closed (or reset) the connection, as the kernel knows
        it now, before the read loop has had its turn: a non-blocking peek at the socket."""
        writer = self._writer
        if writer is None or writer.is_closing():
            return True
        sock = writer.get_extra_info("socket")
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
        """Send one request and wait for its answer. RpcError unless the answer comes within
        `timeout_ms` of entering: the deadline covers connecting (and the handshake),
        handing the frame to a peer that may not be reading, and the answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        writer = self._writer
        if writer is None or writer.is_closing():
            try:
                writer = await self._connect_by(deadline)
            except TimeoutError:
                raise RpcError(f"{api} to {self.host}:{self.port} timed out after {timeout_ms} ms connecting") from None
        cid = next(self._cids)
        header = dict(body)
        header["api"] = api
        header.setdefault("version", 0)
        header["correlation_id"] = cid
        header["sender"] = self.sender
        fut: asyncio.Future = loop.create_future()
        self._pending[cid] = fut
        # The answer's deadline is a timer that fails the future, which is awaited
        # directly: a cancellation of the caller always ends the wait (wait_for on 3.11
        # can swallow one that races the answer, and a cancelled fetcher would then never
        # stop), and no Timeout context is built per call (a ReplicaFetch per append).
        timer = loop.call_at(deadline, _time_out, fut)
        try:
            writer.writelines(encode_frame(header, payload))
            if _drain_may_wait(writer):
                try:
                    async with asyncio.timeout_at(deadline):
                        await writer.drain()
                except TimeoutError:
                    # The peer did not take this frame within the whole deadline: it is
                    # not reading. Dropped; the next call connects again.
                    self._abandon(writer, RpcError(f"connection to {self.host}:{self.port} stalled"))
                    raise _CallTimedOut() from None
            return await fut
        except _CallTimedOut:
            raise RpcError(f"{api} to {self.host}:{self.port} timed out after {timeout_ms} ms") from None
        except (ConnectionError, OSError) as e:
            self._abandon(writer, RpcError(str(e)))
            raise RpcError(f"{api} to {self.host}:{self.port} failed: {e}") from None
        finally:
            timer.cancel()
            self._pending.pop(cid, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # failed while nobody awaited it (drain): retrieved, not logged

    def _abandon(self, writer: asyncio.StreamWriter, error: Exception) -> None:
        """Give up on `writer`: dropped (its calls failed with `error`) if it is still the
        connection, else just closed."""
        if self._writer is writer:
            self._drop_connection(error)
        else:
            writer.close()

    async def close(self) -> None:
        self._closed = True
        self._generation += 1
        self._drop_connection(RpcError("client closed"))
        await cancel_and_wait([self._reader_task])
