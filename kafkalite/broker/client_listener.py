"""The Kafka-protocol listener: frames in, handlers run, responses out in request order.

Requests on one connection are handled concurrently (a long-poll fetch does not block a
metadata request behind it in the handler) but answered strictly in the order they came,
as the protocol requires; at most `max.in.flight.requests.per.connection` are read ahead.

Bad input never harms the broker: an oversized or garbled frame, an unknown API or version
(except ApiVersions, answered in v0 format with UNSUPPORTED_VERSION as Kafka does) closes
that one connection with a log line. A well-formed request whose handler fails with a
programmer error is answered with UNKNOWN_SERVER_ERROR and logged with its traceback.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import TYPE_CHECKING, Any

from kafkalite.aio import StreamServer, cancel_and_wait
from kafkalite.broker.client_frames import read_frame
from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for
from kafkalite.broker.sasl_gate import SaslGate
from kafkalite.broker.tls import certificate_principal
from kafkalite.protocol.codec import (
    RequestHeader,
    decode_request,
    encode_api_versions_unsupported,
    encode_response_parts,
    error_response,
)
from kafkalite.protocol.errors import ErrorCode, InvalidRequestError, KafkaliteError, UnsupportedVersionError
from kafkalite.protocol.schema import ApiKey

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

SASL_AUTHENTICATION_TIMEOUT_S = 30.0  # a SASL client must finish authenticating within this

log = logging.getLogger(__name__)

# The name of the listener the request being handled came in on: Metadata and
# FindCoordinator answer with each broker's address on that listener (Kafka's named
# listeners), so clients inside a network and outside it both get addresses they can use.
# Set by ClientListener for each request's task; None outside a request.
current_listener: contextvars.ContextVar[str | None] = contextvars.ContextVar("current_listener", default=None)

ANONYMOUS = "User:ANONYMOUS"


class ConnectionState:
    """What one client connection has established about itself: who is on the other end
    (Kafka's KafkaPrincipal as "User:NAME"; ANONYMOUS until a listener's security
    authenticates it), from which host, on which listener."""

    __slots__ = ("listener", "host", "principal")

    def __init__(self, listener: str, host: str, principal: str = ANONYMOUS):
        self.listener = listener
        self.host = host
        self.principal = principal


# The connection the request being handled came in on (authorization reads its principal
# and host). Set by ClientListener for each request's task; None outside a request.
current_connection: contextvars.ContextVar[ConnectionState | None] = contextvars.ContextVar("current_connection", default=None)


class ClientListener(StreamServer):
    def __init__(self, broker: Broker, name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT"):
        super().__init__()
        assert security_protocol in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), security_protocol
        self.broker = broker
        self.name = name
        self.security_protocol = security_protocol
        self.apis = broker.kafka_apis
        self.frame_bytes_max = broker.settings["socket.request.max.bytes"]
        self.in_flight_max = broker.settings["max.in.flight.requests.per.connection"]
        self.connections = 0
        self.authentication_failures = 0
        self._sasl = SaslGate(broker, self) if security_protocol.startswith("SASL_") else None

    async def handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        peer = writer.get_extra_info("peername")
        state = ConnectionState(self.name, peer[0] if isinstance(peer, tuple) and peer else "")
        try:
            if self.security_protocol == "SSL":
                # mTLS: the verified client certificate names the principal (Kafka's
                # DefaultKafkaPrincipalBuilder); no certificate (ssl.client.auth=none or
                # requested) stays ANONYMOUS.
                ssl_object = writer.get_extra_info("ssl_object")
                der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
                if der:
                    state.principal = certificate_principal(der)
            if self._sasl is not None:
                try:
                    principal = await asyncio.wait_for(self._sasl.authenticate(reader, writer, peer, state.host),
                                                       SASL_AUTHENTICATION_TIMEOUT_S)
                except TimeoutError:
                    log.info("closing %s: no SASL authentication within %.0f s", peer, SASL_AUTHENTICATION_TIMEOUT_S)
                    principal = None
                if principal is None:
                    return
                state.principal = principal
            await self._serve_requests(reader, writer, peer, state)
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
            self.connections -= 1

    async def _serve_requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any,
                              state: ConnectionState) -> None:
        # (handler task, API name, when the request was read), answered in this order
        responses: asyncio.Queue[tuple[asyncio.Task, str, float] | None] = asyncio.Queue(maxsize=self.in_flight_max)
        sender = asyncio.create_task(self._send_loop(responses, writer))
        # Requests of this connection that wait on others (a fetch's long poll, an acks=all
        # produce in the purgatory) and have not finished: ended with the connection.
        parked: set[asyncio.Task] = set()
        try:
            while True:
                frame = await read_frame(reader, peer, self.frame_bytes_max)
                if frame is None:
                    break
                read_at = time.monotonic()
                job = self._decode_and_dispatch(frame, peer, state)
                if job is None:
                    break
                if job[1] in _PARKING_APIS:
                    parked.add(job[0])
                    job[0].add_done_callback(parked.discard)
                if not responses.full():
                    responses.put_nowait((job[0], job[1], read_at))
                else:
                    # Full: wait for the sender to take one, unless it ends meanwhile (the
                    # client reset, or a handler failed), which nothing else would notice:
                    # this reader waited for ever, holding every queued answer.
                    put = asyncio.ensure_future(responses.put((job[0], job[1], read_at)))
                    try:
                        await asyncio.wait({put, sender}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        stuck = not put.done()
                        if stuck:
                            put.cancel()
                    if stuck:
                        break
                if sender.done():
                    break
        finally:
            try:
                try:
                    responses.put_nowait(None)
                except asyncio.QueueFull:
                    sender.cancel()
                # Let queued responses go out (bounded), then make sure the sender is gone.
                await asyncio.wait({sender}, timeout=5)
                await cancel_and_wait([sender])
            finally:
                # Nobody will read what still waits (a fetch's long poll, an acks=all produce
                # waiting for the ISR): it ends now, and leaves the purgatory, instead of
                # holding its slot there until its own timeout. (Other requests, an admin
                # request's ZooKeeper writes, run to their end as before.)
                for task in list(parked):
                    task.cancel()

    def _decode_and_dispatch(self, frame: bytes, peer: Any, state: ConnectionState) -> tuple[asyncio.Task, str] | None:
        """Start handling one request: its task and API name; None means: close the connection."""
        try:
            header, body = decode_request(frame)
        except UnsupportedVersionError as e:
            hdr = getattr(e, "header", None)
            if hdr is not None and hdr.api_key == ApiKey.API_VERSIONS:
                return _done(encode_api_versions_unsupported(hdr)), ApiKey.API_VERSIONS.name
            log.warning("closing %s: unsupported request (%s)", peer, e)
            return None
        except KafkaliteError as e:
            log.warning("closing %s: malformed request (%s); first bytes %s", peer, e, frame[:48].hex())
            return None
        api = _API_NAMES[header.api_key]  # (decoded: an API this broker serves)
        self.broker.metrics.request(api)
        return asyncio.create_task(self._handle(header, body, state)), api

    async def _handle(self, header: RequestHeader, body: dict, state: ConnectionState) -> list | None:
        current_listener.set(self.name)  # this task's own context: no reset needed
        current_connection.set(state)
        try:
            resp = await self.apis.handle(header, body, state.host)
        except OPERATING_ERRORS as e:
            return [error_response(header, body, error_code_for(e))]
        if resp is None:
            if header.api_key == ApiKey.PRODUCE:
                return None  # acks=0: no response at all
            return [error_response(header, body, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))]
        return encode_response_parts(header, resp)

    async def _send_loop(self, responses: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        """Answers in request order. Those already done behind the one awaited go out in the
        same write: an acks=all HW advance often completes several produce requests of one
        connection at once, and one write wakes the client once instead of once per answer
        (issue 13: the loopback send and the wake-ups are a large part of a small request's
        cost, for the broker and for the client)."""
        item = await responses.get()
        while item is not None:
            out: list[bytes] = []
            answered: list[tuple[str, float]] = []
            while True:
                job, api, read_at = item
                try:
                    parts = await job  # (at once for every item after the first: they are done)
                except asyncio.CancelledError:
                    raise
                except Exception:  # a programmer error (broker/errors.py): logged, the connection closed
                    log.exception("request handler failed; closing the connection")
                    if out:  # the answers before it still go
                        writer.writelines(out)
                    writer.close()
                    return
                if parts:
                    out.extend(parts)
                    answered.append((api, read_at))
                item = responses.get_nowait() if not responses.empty() else _NOTHING_READY
                if item is None or item is _NOTHING_READY or not item[0].done():
                    break
            if out:
                try:
                    writer.writelines(out)
                    now = time.monotonic()
                    for api, read_at in answered:
                        self.broker.metrics.request_total(api, now - read_at)
                    await writer.drain()
                except (ConnectionError, OSError):
                    return  # the client went away (a TLS transport says so as ConnectionResetError)
            if item is _NOTHING_READY:
                item = await responses.get()


_NOTHING_READY = object()  # _send_loop: no answer queued behind the ones just written
_API_NAMES = {int(k): k.name for k in ApiKey}  # ApiKey(n).name, without the enum's call per request
_PARKING_APIS = frozenset({ApiKey.FETCH.name, ApiKey.PRODUCE.name})  # ended with their connection


def _done(data: bytes) -> asyncio.Task:
    async def ready() -> list:
        return [data]

    return asyncio.create_task(ready())


__all__ = ["ANONYMOUS", "ClientListener", "ConnectionState", "InvalidRequestError", "current_connection"]
