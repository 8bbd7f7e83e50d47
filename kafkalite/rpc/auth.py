"""Authentication of inter-broker RPC connections by a shared cluster secret (issue 15).

Sans-I/O: the messages and the checks; kafkalite.rpc.transport does the reading and
writing. At the start of each connection, before any request, both ends prove they know
the secret K without sending it (a mutual challenge-response):

    client -> server   {"api": "Authenticate", "client_nonce": Nc}          (32 random bytes)
    server -> client   {"server_nonce": Ns, "server_proof": HMAC(K, "kafkalite-rpc server" | Nc | Ns)}
    client -> server   {"client_proof": HMAC(K, "kafkalite-rpc client" | Nc | Ns)}

HMAC-SHA256; proofs are compared in constant time (hmac.compare_digest). Each side picks
its own fresh nonce, so a recorded exchange cannot be replayed to either, and the two
proofs have different labels, so one cannot be reflected back as the other. A client that
gets a wrong server proof, or a server that gets a wrong client proof (or any other first
frame), closes the connection.

What this protects: a process that does not hold the secret cannot open an RPC
connection, so it cannot send LeaderAndIsr, StopReplica, UpdateMetadata, ReplicaFetch or
any other RPC. What it does not: the frames after the handshake carry no MAC and no
encryption, so someone who can read or alter the packets on the network path (not just
connect to the port) can read replicated data or inject into an authenticated
connection. Against that, the inter-broker traffic needs TLS, which this RPC does not have.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

NONCE_BYTES = 32
SECRET_BYTES_MIN = 16
HANDSHAKE_TIMEOUT_S = 10.0
AUTHENTICATE_API = "Authenticate"
_SERVER_LABEL = b"kafkalite-rpc server"
_CLIENT_LABEL = b"kafkalite-rpc client"


class RpcAuthError(Exception):
    """The peer failed the handshake (wrong secret, no handshake, malformed messages)."""


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def _proof(secret: bytes, label: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    assert len(client_nonce) == NONCE_BYTES
    assert len(server_nonce) == NONCE_BYTES
    return hmac.new(secret, label + client_nonce + server_nonce, hashlib.sha256).digest()


def _nonce_in(message: dict[str, Any], key: str) -> bytes:
    value = message.get(key)
    if not isinstance(value, bytes) or len(value) != NONCE_BYTES:
        raise RpcAuthError(f"no valid {key} in the handshake")
    return value


def _check(expected: bytes, message: dict[str, Any], key: str) -> None:
    got = message.get(key)
    if not isinstance(got, bytes) or not hmac.compare_digest(expected, got):
        raise RpcAuthError(f"wrong {key}: the peer does not hold this cluster's inter-broker secret")


# -- client side --------------------------------------------------------------------------
def client_hello(client_nonce: bytes, sender: int) -> dict[str, Any]:
    return {"api": AUTHENTICATE_API, "correlation_id": 0, "client_nonce": client_nonce, "sender": sender}


def client_finish(secret: bytes, client_nonce: bytes, challenge: dict[str, Any]) -> dict[str, Any]:
    """Check the server's proof; the client's proof to send back. RpcAuthError when wrong."""
    server_nonce = _nonce_in(challenge, "server_nonce")
    _check(_proof(secret, _SERVER_LABEL, client_nonce, server_nonce), challenge, "server_proof")
    return {"client_proof": _proof(secret, _CLIENT_LABEL, client_nonce, server_nonce)}


# -- server side --------------------------------------------------------------------------
def server_challenge(secret: bytes, hello: dict[str, Any], server_nonce: bytes) -> tuple[bytes, dict[str, Any]]:
    """(the client's nonce, the challenge to send) for a client's first frame; RpcAuthError
    if that frame is not a handshake."""
    if hello.get("api") != AUTHENTICATE_API:
        raise RpcAuthError(f"first frame is {hello.get('api')!r}, not the {AUTHENTICATE_API} handshake")
    client_nonce = _nonce_in(hello, "client_nonce")
    return client_nonce, {"server_nonce": server_nonce, "server_proof": _proof(secret, _SERVER_LABEL, client_nonce, server_nonce)}


def server_finish(secret: bytes, client_nonce: bytes, server_nonce: bytes, answer: dict[str, Any]) -> None:
    _check(_proof(secret, _CLIENT_LABEL, client_nonce, server_nonce), answer, "client_proof")


# -- configuration --------------------------------------------------------------------------
def unauthenticated_rpc_warning(cfg: Any, secret: bytes | None) -> str | None:
    """What a broker logs at start when its clients must authenticate (a listener other
    than PLAINTEXT, or an authorizer) but its inter-broker RPC has no secret; None otherwise."""
    if secret is not None:
        return None
    secured = [spec.name for spec in cfg.client_listeners() if spec.security_protocol != "PLAINTEXT"]
    if not secured and not cfg["authorizer.class.name"]:
        return None
    host, port = cfg.inter_broker_listener()
    why = f"listeners {', '.join(secured)}" if secured else "authorizer.class.name is set"
    return (f"clients must authenticate ({why}) but the inter-broker RPC on {host}:{port} does not: anyone who reaches "
            f"it can send LeaderAndIsr or StopReplica; set inter.broker.secret (or inter.broker.secret.file), the same "
            f"on every broker")


def load_secret(value: str, path: str) -> bytes | None:
    """`inter.broker.secret` or the contents of `inter.broker.secret.file` (surrounding
    whitespace stripped); None when neither is set. ValueError naming the problem."""
    if value and path:
        raise ValueError("set inter.broker.secret or inter.broker.secret.file, not both")
    if path:
        try:
            value = Path(path).read_text().strip()
        except OSError as e:
            raise ValueError(f"inter.broker.secret.file {path}: {e.strerror or e}") from None
        if not value:
            raise ValueError(f"inter.broker.secret.file {path} is empty")
    if not value:
        return None
    secret = value.encode()
    if len(secret) < SECRET_BYTES_MIN:
        raise ValueError(f"the inter-broker secret must be at least {SECRET_BYTES_MIN} bytes")
    return secret
