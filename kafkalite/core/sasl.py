"""SASL server mechanisms, sans-I/O: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
RFC 7677), and Kafka's stored SCRAM credential format.

A mechanism is a small state machine driven by the listener: client tokens in, server
tokens out. Looking a user up is I/O (ZooKeeper), so a mechanism that has read the user name
returns `Lookup(username)` and the shell answers with `credentials(...)` (the user's stored
credentials, or None for an unknown user). Every failure is one `SaslAuthenticationError`
whose message never says whether the user exists: an unknown user is walked through SCRAM
with a mock credential (RFC 5802 section 5.1) and fails at the proof, like a wrong password.

Credentials are stored as Kafka stores them under /config/users/NAME:
"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N" per mechanism (Kafka's
ScramCredentialUtils), so kafkalite and Kafka tooling read each other's users.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS: Mapping[str, str] = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

# Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations, and the 16384 cap of
# ScramCredentialUtils' callers): fewer than 4096 is refused as too weak.
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384
# `kafkalite users` salts: 32 random bytes. Mock salts of unknown users are 32 bytes too, so
# they look like kafkalite's own. (Kafka's ScramFormatter.secureRandomBytes makes the ASCII
# of a base-36 number of up to 26 characters instead; either reads the other's.)
SALT_BYTES = 32

FAILED_MESSAGE = "Authentication failed: invalid username or password"
TOKEN_BYTES_MAX = 16384  # no legitimate PLAIN or SCRAM message comes near this


class SaslAuthenticationError(Exception):
    """The client did not authenticate: wrong password, unknown user, malformed or
    out-of-order message. The listener answers SASL_AUTHENTICATION_FAILED and closes."""

    def __init__(self, reason: str):
        # `reason` is for the broker's log only; clients get FAILED_MESSAGE.
        super().__init__(reason)
        self.reason = reason


class CredentialFormatError(ValueError):
    """A stored credential string that is not Kafka's SCRAM format."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        fields = dict(item.partition("=")[::2] for item in text.split(","))
        try:
            cred = cls(base64.b64decode(fields["salt"], validate=True), base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError) as e:
            raise CredentialFormatError(f"not a SCRAM credential ({type(e).__name__}: {e})") from None
        if not cred.salt or not cred.stored_key or not cred.server_key or cred.iterations < 1:
            raise CredentialFormatError("SCRAM credential with an empty field or no iterations")
        return cred


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def _keys(hash_name: str, password: bytes, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(client key, server key) of RFC 5802 section 3."""
    salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    return _hmac(hash_name, salted, b"Client Key"), _hmac(hash_name, salted, b"Server Key")


def make_credential(mechanism: str, password: str, salt: bytes, iterations: int = ITERATIONS_MIN) -> ScramCredential:
    """The stored form of `password` for a SCRAM mechanism (the caller picks a random salt)."""
    hash_name = SCRAM_MECHANISMS[mechanism]
    assert ITERATIONS_MIN <= iterations <= ITERATIONS_MAX, iterations
    assert salt
    client_key, server_key = _keys(hash_name, password.encode(), salt, iterations)
    return ScramCredential(salt, hashlib.new(hash_name, client_key).digest(), server_key, iterations)


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from (PLAIN checks a password
    against the stored SCRAM credentials: no plaintext password is ever stored)."""
    hash_name = SCRAM_MECHANISMS[mechanism]
    client_key, _ = _keys(hash_name, password.encode(), credential.salt, credential.iterations)
    return hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), credential.stored_key)


# -- what a mechanism step returns -------------------------------------------------------


@dataclass(frozen=True)
class Challenge:
    """Send `data` to the client and wait for its next token."""

    data: bytes


@dataclass(frozen=True)
class Lookup:
    """Fetch this user's stored credentials and pass them to `credentials()`."""

    username: str


@dataclass(frozen=True)
class Authenticated:
    """Done: send `data` (possibly empty) to the client; `username` is authenticated."""

    data: bytes
    username: str


Step = Challenge | Lookup | Authenticated


# What PLAIN checks an unknown user's password against: the same PBKDF2 (SHA-512, the
# default iterations) as a `kafkalite users` user's, so a wrong name costs what a wrong
# password costs and the time taken does not tell whether the user exists.
_PLAIN_MOCK_CREDENTIAL = ScramCredential(b"\x00" * SALT_BYTES, b"\x00" * 64, b"\x00" * 64, ITERATIONS_MIN)


class PlainServer:
    """RFC 4616: one message, "[authzid] NUL authcid NUL passwd", checked against the user's
    stored SCRAM credentials (the strongest one stored). The check is a PBKDF2 of thousands
    of rounds: the shell runs `credentials` off its event loop."""

    mechanism = PLAIN

    def __init__(self) -> None:
        self._username: str | None = None
        self._password: str | None = None
        self.done = False

    def receive(self, token: bytes) -> Step:
        if self._username is not None:
            raise SaslAuthenticationError("PLAIN: a second client message")
        parts = _utf8(token).split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError("PLAIN: not authzid NUL authcid NUL passwd")
        authzid, username, password = parts
        if not username or not password:
            raise SaslAuthenticationError("PLAIN: empty user name or password")
        if authzid and authzid != username:  # Kafka's PlainSaslServer: no impersonation
            raise SaslAuthenticationError("PLAIN: authorization id differs from the user name")
        self._username, self._password = username, password
        return Lookup(username)

    def credentials(self, stored: Mapping[str, ScramCredential] | None) -> Step:
        if self._username is None or self._password is None or self.done:
            raise SaslAuthenticationError("PLAIN: credentials out of order")
        for mechanism in (SCRAM_SHA_512, SCRAM_SHA_256):
            credential = (stored or {}).get(mechanism)
            if credential is not None:
                if not password_matches(mechanism, credential, self._password):
                    raise SaslAuthenticationError(f"PLAIN: wrong password for {self._username!r}")
                self.done = True
                return Authenticated(b"", self._username)
        password_matches(SCRAM_SHA_512, _PLAIN_MOCK_CREDENTIAL, self._password)  # the same work as a known user
        raise SaslAuthenticationError(f"PLAIN: no credentials stored for {self._username!r}")


class ScramServer:
    """RFC 5802 server side for one SCRAM mechanism, in three steps:
    client-first -> Lookup; credentials -> server-first; client-final -> server-final.

    `server_nonce` is random from the caller (printable, no ','); `mock_secret` keys the
    salt of the mock credential an unknown user gets, so the same unknown name always sees
    the same salt and cannot be told apart from a real user by asking twice. It must be the
    same on every broker and listener and across restarts (the cluster's key in ZooKeeper),
    as a real user's stored salt is, and secret (a salt anyone could compute gives a mock away)."""

    def __init__(self, mechanism: str, server_nonce: str, mock_secret: bytes):
        assert mechanism in SCRAM_MECHANISMS, mechanism
        assert server_nonce and "," not in server_nonce
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism]
        self._server_nonce = server_nonce
        self._mock_secret = mock_secret
        self._state = "client-first"
        self._username = ""
        self._nonce = ""
        self._client_first_bare = ""
        self._gs2_header = ""
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._user_known = False

    @property
    def done(self) -> bool:
        return self._state == "done"

    def receive(self, token: bytes) -> Step:
        if self._state == "client-first":
            return self._client_first(_utf8(token))
        if self._state == "client-final":
            return self._client_final(_utf8(token))
        raise SaslAuthenticationError(f"{self.mechanism}: unexpected client message in state {self._state}")

    def _client_first(self, text: str) -> Step:
        # gs2-header: "n," or "y," (no channel binding), optional "a=authzid", then ","
        cbind, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if cbind not in ("n", "y"):
            raise SaslAuthenticationError(f"{self.mechanism}: channel binding {cbind!r} not supported")
        attrs = _attributes(bare)
        username = _saslname(attrs.get("n", ""))
        nonce = attrs.get("r", "")
        if not username or not nonce:
            raise SaslAuthenticationError(f"{self.mechanism}: client-first-message without user name or nonce")
        if authzid and _saslname(authzid.removeprefix("a=")) != username:
            raise SaslAuthenticationError(f"{self.mechanism}: authorization id differs from the user name")
        if "m" in attrs:
            raise SaslAuthenticationError(f"{self.mechanism}: mandatory extension not supported")
        self._gs2_header = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._username = username
        self._nonce = nonce + self._server_nonce
        self._state = "lookup"
        return Lookup(username)

    def credentials(self, stored: Mapping[str, ScramCredential] | None) -> Step:
        if self._state != "lookup":
            raise SaslAuthenticationError(f"{self.mechanism}: credentials out of order")
        credential = (stored or {}).get(self.mechanism)
        self._user_known = credential is not None
        if credential is None:
            salt = _hmac(self._hash, self._mock_secret, self._username.encode())[:SALT_BYTES]
            credential = ScramCredential(salt, b"\x00", b"\x00", ITERATIONS_MIN)
        self._credential = credential
        salt_b64 = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt_b64},i={credential.iterations}"
        self._state = "client-final"
        return Challenge(self._server_first.encode())

    def _client_final(self, text: str) -> Step:
        assert self._credential is not None
        without_proof, sep, proof_attr = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError(f"{self.mechanism}: client-final-message without proof")
        attrs = _attributes(without_proof)
        if attrs.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise SaslAuthenticationError(f"{self.mechanism}: channel binding does not match the gs2 header")
        # Kafka's ScramSaslServer only checks that the nonce ends with the one it sent:
        # librdkafka up to 2.0 (Debian's kcat) sends the client nonce again in front of it.
        # The proof covers the message as sent, and the server's random part is in it.
        if not attrs.get("r", "").endswith(self._nonce):
            raise SaslAuthenticationError(f"{self.mechanism}: nonce does not match")
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            raise SaslAuthenticationError(f"{self.mechanism}: proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self._hash, self._credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslAuthenticationError(f"{self.mechanism}: proof of the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not self._user_known:
            raise SaslAuthenticationError(f"{self.mechanism}: unknown user {self._username!r}")
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), self._credential.stored_key):
            raise SaslAuthenticationError(f"{self.mechanism}: wrong password for {self._username!r}")
        server_signature = _hmac(self._hash, self._credential.server_key, auth_message)
        self._state = "done"
        return Authenticated(b"v=" + base64.b64encode(server_signature), self._username)


SaslServer = PlainServer | ScramServer


def new_server(mechanism: str, server_nonce: str, mock_secret: bytes) -> SaslServer:
    """The server side of `mechanism` (one of MECHANISMS)."""
    if mechanism == PLAIN:
        return PlainServer()
    return ScramServer(mechanism, server_nonce, mock_secret)


def _utf8(token: bytes) -> str:
    if len(token) > TOKEN_BYTES_MAX:
        raise SaslAuthenticationError(f"SASL token of {len(token)} bytes")
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError("SASL token is not UTF-8") from None


def _attributes(text: str) -> dict[str, str]:
    """"k=v,k=v" (RFC 5802 attribute-value pairs); a malformed pair fails the exchange."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1 or key in out:
            raise SaslAuthenticationError(f"malformed SCRAM attribute {item[:32]!r}")
        out[key] = value
    return out


def _saslname(text: str) -> str:
    """RFC 5802 saslname: "=2C" is ',' and "=3D" is '='; any other '=' is malformed."""
    out = text.replace("=2C", ",").replace("=3D", "=")
    if text.count("=") != text.count("=2C") + text.count("=3D"):
        raise SaslAuthenticationError("malformed SCRAM user name")
    return out


def user_credentials(config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a /config/users/NAME `config` map (other keys, such as
    quotas, are ignored; a malformed credential is skipped, as if not stored)."""
    out: dict[str, ScramCredential] = {}
    for mechanism in SCRAM_MECHANISMS:
        text = config.get(mechanism)
        if isinstance(text, str):
            try:
                out[mechanism] = ScramCredential.from_kafka(text)
            except CredentialFormatError:
                continue
    return out


class ScramClient:
    """RFC 5802 client side (the kafkalite CLI's admin client speaks SCRAM with it):
    first() -> client-first; final(server-first) -> client-final; verify(server-final)."""

    def __init__(self, mechanism: str, username: str, password: str, client_nonce: str):
        assert mechanism in SCRAM_MECHANISMS, mechanism
        assert client_nonce and "," not in client_nonce
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism]
        self._password = password.encode()
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._bare = f"n={name},r={client_nonce}"
        self._nonce = client_nonce
        self._expected_server_signature: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _utf8(server_first)
        attrs = _attributes(text)
        nonce, salt_b64, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or nonce == self._nonce or not iterations.isascii() or not iterations.isdigit():
            raise SaslAuthenticationError(f"{self.mechanism}: bad server-first-message")
        if int(iterations) < ITERATIONS_MIN:
            raise SaslAuthenticationError(f"{self.mechanism}: server asks for {iterations} iterations, fewer than {ITERATIONS_MIN}")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except ValueError:
            raise SaslAuthenticationError(f"{self.mechanism}: salt is not base64") from None
        client_key, server_key = _keys(self._hash, self._password, salt, int(iterations))
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = _hmac(self._hash, hashlib.new(self._hash, client_key).digest(), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._expected_server_signature = _hmac(self._hash, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """The server proved it knows the credential (else SaslAuthenticationError)."""
        assert self._expected_server_signature is not None, "verify() before final()"
        attrs = _attributes(_utf8(server_final))
        if "e" in attrs:
            raise SaslAuthenticationError(f"{self.mechanism}: server error {attrs['e']}")
        try:
            signature = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            raise SaslAuthenticationError(f"{self.mechanism}: server signature is not base64") from None
        if not hmac.compare_digest(signature, self._expected_server_signature):
            raise SaslAuthenticationError(f"{self.mechanism}: the server's signature is wrong (not the real server?)")
