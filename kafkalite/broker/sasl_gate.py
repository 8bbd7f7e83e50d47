"""The SASL gate in front of a SASL_PLAINTEXT / SASL_SSL listener's request loop.

Until a client has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are
served; any other request closes the connection (Kafka's SaslServerAuthenticator does the
same). SaslHandshake v1 is followed by SaslAuthenticate requests carrying the tokens (what
librdkafka, kafka-python and aiokafka use); after SaslHandshake v0 the tokens travel as bare
length-prefixed frames (KIP-43's original framing). The mechanisms themselves are the pure
state machines of kafkalite.core.sasl; the gate only moves their tokens and reads the user's
credentials from ZooKeeper (at each authentication: a `kafkalite users` change applies to the
next connection). A failed authentication is answered with SASL_AUTHENTICATION_FAILED and
one message that does not say whether the user exists (v1), then the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException

from kafkalite.broker.client_frames import frame, read_frame
from kafkalite.core.sasl import (
    FAILED_MESSAGE,
    Authenticated,
    Challenge,
    Lookup,
    PlainServer,
    SaslAuthenticationError,
    SaslServer,
    ScramCredential,
    new_server,
    user_credentials,
)
from kafkalite.protocol.codec import decode_request, encode_api_versions_unsupported, encode_response_parts
from kafkalite.protocol.errors import ErrorCode, KafkaliteError, UnsupportedVersionError
from kafkalite.protocol.schema import ApiKey
from kafkalite.zk.errors import ZkError
from kafkalite.zk.users import read_user_config

if TYPE_CHECKING:
    from kafkalite.broker.client_listener import ClientListener
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)

SERVER_NONCE_CHARS = 32
# Before authentication a frame is at most this big (Kafka's sasl.server.max.receive.size
# default): a client not yet known cannot make the broker read, and decode, a frame of
# socket.request.max.bytes (100 MiB of tiny array elements decode to about 10 GiB).
SASL_RECEIVE_BYTES_MAX = 512 * 1024
_NONCE_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
# PLAIN's password checks (PBKDF2, about 2 ms at 4096 rounds; hashlib lets go of the GIL)
# run here, never on the event loop, and not in the loop's default executor either: a flood
# of unauthenticated attempts then queues behind these threads, not ahead of ZooKeeper calls.
PASSWORD_CHECK_THREADS = 2
_password_checks = ThreadPoolExecutor(max_workers=PASSWORD_CHECK_THREADS, thread_name_prefix="sasl-password-check")


def server_nonce() -> str:
    """A random SCRAM server nonce of letters and digits, like Kafka's (ScramFormatter's
    base-36 strings)."""
    return "".join(secrets.choice(_NONCE_ALPHABET) for _ in range(SERVER_NONCE_CHARS))


class SaslGate:
    def __init__(self, broker: Broker, listener: ClientListener):
        self.broker = broker
        self.listener = listener
        self.mechanisms: list[str] = list(broker.settings["sasl.enabled.mechanisms"])
        # Keys the mock salts unknown users get (kafkalite.core.sasl.ScramServer): the
        # cluster's key from ZooKeeper, so every broker and listener, before and after a
        # restart, shows an unknown name the same salt, as a real user's is the same everywhere.
        assert broker.scram_mock_salt_key is not None, "read at start-up, before the listeners are made"
        self._mock_secret = broker.scram_mock_salt_key

    async def authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any, host: str) -> str | None:
        """Serve the connection until it has authenticated: its principal ("User:NAME"),
        or None when it must be closed (failed, misbehaved or went away)."""
        server: SaslServer | None = None
        handshake_version = -1
        while True:
            data = await read_frame(reader, peer, min(self.listener.frame_bytes_max, SASL_RECEIVE_BYTES_MAX),
                                    "the limit before SASL authentication (sasl.server.max.receive.size)")
            if data is None:
                return None
            if server is not None and handshake_version == 0:
                try:
                    reply, username = await self._step(server, data)
                except SaslAuthenticationError as e:
                    self._failed(peer, server, e)
                    return None  # v0 has no way to say why: the connection closes
                writer.write(frame(reply))
                await writer.drain()
                if username is not None:
                    return self._authenticated(peer, server, username)
                continue
            try:
                header, body = decode_request(data)
            except UnsupportedVersionError as e:
                hdr = getattr(e, "header", None)
                if hdr is not None and hdr.api_key == ApiKey.API_VERSIONS:
                    writer.write(encode_api_versions_unsupported(hdr))
                    await writer.drain()
                    continue
                log.warning("closing %s: unsupported request before SASL authentication (%s)", peer, e)
                return None
            except KafkaliteError as e:
                log.warning("closing %s: malformed request before SASL authentication (%s)", peer, e)
                return None
            api = header.api_key
            if api == ApiKey.API_VERSIONS:
                await self._answer(writer, header, await self.listener.apis.handle(header, body, host))
                continue
            if api == ApiKey.SASL_HANDSHAKE and server is None:
                mechanism = body["mechanism"]
                ok = mechanism in self.mechanisms
                await self._answer(writer, header, {"error_code": 0 if ok else int(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                                                    "mechanisms": self.mechanisms})
                if not ok:
                    log.info("closing %s: SASL mechanism %r is not enabled (%s)", peer, mechanism[:64], ",".join(self.mechanisms))
                    return None
                server = new_server(mechanism, server_nonce(), self._mock_secret)
                handshake_version = header.api_version
                continue
            if api == ApiKey.SASL_AUTHENTICATE and server is not None and handshake_version >= 1:
                try:
                    reply, username = await self._step(server, body["auth_bytes"])
                except SaslAuthenticationError as e:
                    self._failed(peer, server, e)
                    await self._answer(writer, header, {"error_code": int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                                                        "error_message": FAILED_MESSAGE, "auth_bytes": b""})
                    return None
                await self._answer(writer, header, {"error_code": 0, "error_message": None, "auth_bytes": reply,
                                                    "session_lifetime_ms": 0})
                if username is not None:
                    return self._authenticated(peer, server, username)
                continue
            log.warning("closing %s: %s (v%d) before SASL authentication", peer, ApiKey(api).name, header.api_version)
            return None

    async def _step(self, server: SaslServer, token: bytes) -> tuple[bytes, str | None]:
        """Feed one client token: (the token to send back, the user name once authenticated)."""
        step = server.receive(token)
        if isinstance(step, Lookup):
            stored = await self._credentials(step.username)
            if isinstance(server, PlainServer):
                step = await asyncio.get_running_loop().run_in_executor(_password_checks, server.credentials, stored)
            else:
                step = server.credentials(stored)
        if isinstance(step, Challenge):
            return step.data, None
        assert isinstance(step, Authenticated), step
        return step.data, step.username

    async def _credentials(self, username: str) -> dict[str, ScramCredential] | None:
        loop = asyncio.get_running_loop()
        try:
            config = await loop.run_in_executor(None, read_user_config, self.broker.kazoo, username)
        except (ZkError, KazooException, ValueError) as e:
            # ZooKeeper unreachable or the znode unreadable: nobody authenticates as this user now.
            raise SaslAuthenticationError(f"credentials of {username!r} unreadable: {type(e).__name__}: {e}") from None
        return user_credentials(config) if config is not None else None

    def _failed(self, peer: Any, server: SaslServer, e: SaslAuthenticationError) -> None:
        self.listener.authentication_failures += 1
        log.info("closing %s: SASL %s authentication failed: %s", peer, server.mechanism, e.reason)

    def _authenticated(self, peer: Any, server: SaslServer, username: str) -> str:
        log.debug("%s authenticated as %r with SASL %s", peer, username, server.mechanism)
        return f"User:{username}"

    async def _answer(self, writer: asyncio.StreamWriter, header: Any, body: dict | None) -> None:
        assert body is not None
        writer.writelines(encode_response_parts(header, body))
        await writer.drain()
