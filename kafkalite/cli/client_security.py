"""`--command-config FILE`: how the CLI's Kafka-protocol clients reach a secured listener.

FILE is a librdkafka property file (what `bin/cluster up --secure` writes as
client.properties): security.protocol, sasl.mechanisms, sasl.username, sasl.password,
ssl.ca.location, ssl.certificate.location, ssl.key.location, bootstrap.servers. The same
properties go unchanged to confluent-kafka producers and consumers (`produce`, `consume`);
the CLI's own admin client (topics, groups, reassign, ...) opens its sockets through
`connect()`, which does the TLS handshake and the SASL exchange (SaslHandshake v1 +
SaslAuthenticate, SCRAM with kafkalite.core.sasl's client, or PLAIN).

One CLI invocation is one process with one set of client properties: `configure()` (called
by `kafkalite` after parsing, from --command-config, else $KAFKALITE_COMMAND_CONFIG) sets them
for the process.
"""

from __future__ import annotations

import itertools
import os
import secrets
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from kafkalite.config import protocol_uses_sasl, protocol_uses_tls
from kafkalite.core.sasl import MECHANISMS, PLAIN, SCRAM_MECHANISMS, SaslAuthenticationError, ScramClient
from kafkalite.protocol.codec import decode_response, encode_request
from kafkalite.protocol.errors import ErrorCode
from kafkalite.protocol.schema import ApiKey

COMMAND_CONFIG_ENV = "KAFKALITE_COMMAND_CONFIG"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The keys understood here; any other key is still passed to confluent-kafka clients.
KNOWN_KEYS = ("security.protocol", "sasl.mechanisms", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location",
              "ssl.certificate.location", "ssl.key.location", "ssl.key.password", "bootstrap.servers",
              "ssl.endpoint.identification.algorithm")
_LENGTH = struct.Struct(">i")


class ClientConfigError(Exception):
    """A command config a user can fix; one line."""


class SecurityHandshakeError(OSError):
    """The broker refused our TLS or SASL (wrong CA, wrong password, ...): one line."""


@dataclass(frozen=True)
class ClientSecurity:
    properties: dict[str, str]
    security_protocol: str = "PLAINTEXT"
    mechanism: str = ""
    username: str = ""
    password: str = ""

    @property
    def tls(self) -> bool:
        return protocol_uses_tls(self.security_protocol)

    @property
    def sasl(self) -> bool:
        return protocol_uses_sasl(self.security_protocol)


PLAINTEXT = ClientSecurity({})
_current: ClientSecurity | None = None  # None: not configured yet, $KAFKALITE_COMMAND_CONFIG decides


def parse_properties(text: str, source: str = "command config") -> dict[str, str]:
    """Java/librdkafka .properties: key=value lines, '#' and '!' comments."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ClientConfigError(f"{source}:{lineno}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def security_from_properties(props: dict[str, str]) -> ClientSecurity:
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ClientConfigError(f"security.protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    mechanism = props.get("sasl.mechanisms", props.get("sasl.mechanism", "")).upper()
    if protocol.startswith("SASL_"):
        if mechanism not in MECHANISMS:
            raise ClientConfigError(f"sasl.mechanisms={mechanism!r}: expected one of {', '.join(MECHANISMS)}")
        if not props.get("sasl.username") or not props.get("sasl.password"):
            raise ClientConfigError(f"security.protocol={protocol} needs sasl.username and sasl.password")
    return ClientSecurity(dict(props), protocol, mechanism, props.get("sasl.username", ""), props.get("sasl.password", ""))


def configure(path: str | None) -> ClientSecurity:
    """Load the command config (or $KAFKALITE_COMMAND_CONFIG) for this process."""
    global _current
    path = path or os.environ.get(COMMAND_CONFIG_ENV)
    if not path:
        _current = PLAINTEXT
        return _current
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ClientConfigError(f"cannot read command config {path!r}: {e.strerror}") from None
    _current = security_from_properties(parse_properties(text, path))
    return _current


def current() -> ClientSecurity:
    """This process's client security: as configured, else from $KAFKALITE_COMMAND_CONFIG
    (so helper processes a command starts, e.g. bin/chaos's group members, inherit it)."""
    return _current if _current is not None else configure(None)


def librdkafka_config() -> dict[str, str]:
    """The command config's properties for confluent-kafka clients (bootstrap.servers
    excluded: the command decides it)."""
    return {k: v for k, v in current().properties.items() if k != "bootstrap.servers"}


def bootstrap_default() -> str | None:
    return current().properties.get("bootstrap.servers") or None


def client_context(security: ClientSecurity) -> ssl.SSLContext:
    props = security.properties
    ctx = ssl.create_default_context(cafile=props.get("ssl.ca.location") or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if props.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        ctx.check_hostname = False
    if props.get("ssl.certificate.location"):
        ctx.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location") or None,
                            password=props.get("ssl.key.password") or None)
    return ctx


def connect(host: str, port: int, connect_timeout_s: float, timeout_s: float, client_id: str) -> socket.socket:
    """A connected socket ready for Kafka requests: TLS and SASL done as the command config
    says. OSError when the broker is unreachable, refuses TLS or the credentials."""
    security = current()
    sock = socket.create_connection((host, port), timeout=connect_timeout_s)
    try:
        sock.settimeout(timeout_s)
        if security.tls:
            try:
                sock = client_context(security).wrap_socket(sock, server_hostname=host)
            except ssl.SSLError as e:
                raise SecurityHandshakeError(f"TLS handshake with {host}:{port} failed: {e.reason or e}") from None
        if security.sasl:
            _sasl(sock, security, client_id)
        return sock
    except BaseException:
        sock.close()
        raise


def _sasl(sock: socket.socket, security: ClientSecurity, client_id: str) -> None:
    ids = itertools.count(1)

    def call(api: ApiKey, version: int, body: dict[str, Any]) -> dict:
        correlation_id = next(ids)
        sock.sendall(encode_request(api, version, correlation_id, client_id, body))
        (size,) = _LENGTH.unpack(_read(sock, _LENGTH.size))
        got, response = decode_response(api, version, _read(sock, size))
        if got != correlation_id:
            raise OSError(f"correlation id {got}, expected {correlation_id}")
        return response

    handshake = call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
    if handshake["error_code"] != 0:
        raise SecurityHandshakeError(f"SASL mechanism {security.mechanism} refused (the broker offers {', '.join(handshake['mechanisms'])})")

    def authenticate(token: bytes) -> bytes:
        response = call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        if response["error_code"] != 0:
            raise SecurityHandshakeError(f"SASL authentication failed: {response['error_message'] or ErrorCode(response['error_code']).name}")
        return response["auth_bytes"]

    if security.mechanism == PLAIN:
        authenticate(f"\x00{security.username}\x00{security.password}".encode())
        return
    assert security.mechanism in SCRAM_MECHANISMS
    client = ScramClient(security.mechanism, security.username, security.password, secrets.token_urlsafe(18))
    try:
        server_first = authenticate(client.first())
        client.verify(authenticate(client.final(server_first)))
    except SaslAuthenticationError as e:
        raise SecurityHandshakeError(str(e)) from None


def _read(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise OSError("connection closed by the broker")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
