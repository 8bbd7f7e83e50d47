"""The SASL mechanisms as pure state machines (kafkalite.core.sasl), against RFC 7677's
test vector and a small SCRAM client written from RFC 5802."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from kafkalite.core import sasl
from kafkalite.core.sasl import (
    FAILED_MESSAGE,
    Authenticated,
    Challenge,
    CredentialFormatError,
    Lookup,
    PlainServer,
    SaslAuthenticationError,
    ScramClient,
    ScramCredential,
    ScramServer,
    make_credential,
    password_matches,
    user_credentials,
)

# RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256, 4096 iterations.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc_stored() -> dict[str, ScramCredential]:
    return {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)}


def test_scram_sha_256_server_reproduces_rfc_7677_exchange():
    server = ScramServer("SCRAM-SHA-256", RFC_SERVER_NONCE, b"mock")
    assert server.receive(RFC_CLIENT_FIRST) == Lookup("user")
    assert server.credentials(_rfc_stored()) == Challenge(RFC_SERVER_FIRST)
    assert server.receive(RFC_CLIENT_FINAL) == Authenticated(RFC_SERVER_FINAL, "user")
    assert server.done


def test_scram_wrong_proof_fails_with_same_message_as_unknown_user():
    bad_final = RFC_CLIENT_FINAL[:-4] + b"AAA="
    server = ScramServer("SCRAM-SHA-256", RFC_SERVER_NONCE, b"mock")
    server.receive(RFC_CLIENT_FIRST)
    server.credentials(_rfc_stored())
    with pytest.raises(SaslAuthenticationError) as wrong:
        server.receive(bad_final)
    unknown = ScramServer("SCRAM-SHA-256", RFC_SERVER_NONCE, b"mock")
    unknown.receive(RFC_CLIENT_FIRST)
    first = unknown.credentials(None)  # unknown user: a mock salt, the same exchange
    assert isinstance(first, Challenge) and first.data.startswith(b"r=rOprNGfwEbeRWgbNEkqO%hvY")
    with pytest.raises(SaslAuthenticationError) as missing:
        unknown.receive(RFC_CLIENT_FINAL)
    assert "wrong password" in wrong.value.reason and "unknown user" in missing.value.reason
    assert "unknown" not in FAILED_MESSAGE and "exist" not in FAILED_MESSAGE  # what clients see, either way


def test_mock_salt_is_stable_per_unknown_user():
    def salt_for(name: bytes) -> bytes:
        server = ScramServer("SCRAM-SHA-512", "srv", b"secret")
        server.receive(b"n,,n=" + name + b",r=abc")
        step = server.credentials(None)
        assert isinstance(step, Challenge)
        return step.data.split(b",")[1]

    assert salt_for(b"ghost") == salt_for(b"ghost")
    assert salt_for(b"ghost") != salt_for(b"phantom")


def _scram_client(mechanism: str, user: str, password: str, server: ScramServer, stored) -> Authenticated:
    """RFC 5802's client side, enough to drive the server through a whole exchange."""
    hash_name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    bare = f"n={user},r=clientnonce"
    assert server.receive(f"n,,{bare}".encode()) == Lookup(user)
    first = server.credentials(stored)
    assert isinstance(first, Challenge)
    attrs = dict(kv.split("=", 1) for kv in first.data.decode().split(","))
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{bare},{first.data.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    final = server.receive(f"{without_proof},p={proof}".encode())
    assert isinstance(final, Authenticated)
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    assert final.data == b"v=" + base64.b64encode(hmac.new(server_key, auth_message, hash_name).digest())
    return final


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_and_wrong_password(mechanism):
    stored = {mechanism: make_credential(mechanism, "s3cret", b"salt-bytes", 4096)}
    done = _scram_client(mechanism, "alice", "s3cret", ScramServer(mechanism, "xyz", b"k"), stored)
    assert done.username == "alice"
    with pytest.raises(SaslAuthenticationError):
        _scram_client(mechanism, "alice", "other", ScramServer(mechanism, "xyz", b"k"), stored)


def test_scram_user_without_this_mechanism_fails_like_unknown():
    stored = {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pw", b"s", 4096)}
    with pytest.raises(SaslAuthenticationError, match="unknown user"):
        _scram_client("SCRAM-SHA-512", "bob", "pw", ScramServer("SCRAM-SHA-512", "n", b"k"), stored)


@pytest.mark.parametrize("client_first", [
    b"p=tls-unique,,n=user,r=abc",     # channel binding asked for
    b"n,,r=abc",                        # no user name
    b"n,,n=user",                       # no nonce
    b"n,a=other,n=user,r=abc",          # impersonation
    b"n,,n=us=er,r=abc",                # bad saslname escape
    b"\xff\xfe",                        # not UTF-8
    b"n,,n=user,r=abc,m=ext",           # mandatory extension
])
def test_scram_malformed_client_first_is_rejected(client_first):
    with pytest.raises(SaslAuthenticationError):
        ScramServer("SCRAM-SHA-512", "n", b"k").receive(client_first)


def test_scram_client_final_with_wrong_nonce_or_binding_is_rejected():
    for final in (RFC_CLIENT_FINAL.replace(b"r=rOpr", b"r=XOpr"), RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),
                  b"c=biws,r=x", b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!"):
        server = ScramServer("SCRAM-SHA-256", RFC_SERVER_NONCE, b"mock")
        server.receive(RFC_CLIENT_FIRST)
        server.credentials(_rfc_stored())
        with pytest.raises(SaslAuthenticationError):
            server.receive(final)


def test_scram_accepts_librdkafka_2_0s_client_nonce_repeated_in_front_as_kafka_does():
    # librdkafka <= 2.0 puts c-nonce in front of the server's whole nonce (c-nonce + s-nonce);
    # Kafka's server checks endsWith, so the proof over the message as sent must still verify.
    stored = {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)}
    server = ScramServer("SCRAM-SHA-256", RFC_SERVER_NONCE, b"mock")
    server.receive(RFC_CLIENT_FIRST)
    first = server.credentials(stored)
    assert isinstance(first, Challenge)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", RFC_SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqO" + first.data.decode().split(",")[0][2:]
    auth_message = f"n=user,r=rOprNGfwEbeRWgbNEkqO,{first.data.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    assert isinstance(server.receive(f"{without_proof},p={proof}".encode()), Authenticated)


def test_scram_message_out_of_order_is_rejected():
    server = ScramServer("SCRAM-SHA-256", RFC_SERVER_NONCE, b"mock")
    with pytest.raises(SaslAuthenticationError):
        server.credentials(_rfc_stored())
    server.receive(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError):
        server.receive(RFC_CLIENT_FIRST)  # still waiting for the credentials


def test_plain_checks_password_against_stored_scram_credential():
    stored = {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "pw", b"salt", 4096)}
    server = PlainServer()
    assert server.receive(b"\x00carol\x00pw") == Lookup("carol")
    assert server.credentials(stored) == Authenticated(b"", "carol")
    wrong = PlainServer()
    wrong.receive(b"carol\x00carol\x00nope")
    with pytest.raises(SaslAuthenticationError):
        wrong.credentials(stored)
    unknown = PlainServer()
    unknown.receive(b"\x00nobody\x00pw")
    with pytest.raises(SaslAuthenticationError):
        unknown.credentials(None)


def test_plain_unknown_user_costs_the_same_pbkdf2_as_a_wrong_password(monkeypatch):
    # An unknown name failed at once while a wrong password cost a 4096-round PBKDF2: the
    # time told whether the user exists.
    stored = {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "pw", b"s" * 32, 4096)}
    rounds: list[tuple[str, int]] = []
    real = hashlib.pbkdf2_hmac

    def counted(hash_name, password, salt, iterations):
        rounds.append((hash_name, iterations))
        return real(hash_name, password, salt, iterations)

    monkeypatch.setattr(sasl.hashlib, "pbkdf2_hmac", counted)
    work = {}
    for name, creds in (("carol", stored), ("nobody", None), ("malformed", user_credentials({"SCRAM-SHA-512": "junk"}))):
        rounds.clear()
        server = PlainServer()
        server.receive(f"\x00{name}\x00wrong".encode())
        with pytest.raises(SaslAuthenticationError):
            server.credentials(creds)
        work[name] = list(rounds)
    assert work["carol"] == [("sha512", 4096)]
    assert work["nobody"] == work["carol"]
    assert work["malformed"] == work["carol"]


@pytest.mark.parametrize("token", [b"carol\x00pw", b"\x00\x00pw", b"\x00carol\x00", b"eve\x00carol\x00pw", b"\xff\x00a\x00b"])
def test_plain_malformed_or_impersonating_message_is_rejected(token):
    with pytest.raises(SaslAuthenticationError):
        PlainServer().receive(token)


def test_credential_kafka_format_round_trips_and_rejects_garbage():
    cred = make_credential("SCRAM-SHA-512", "pw", b"0123456789abcdef", 8192)
    text = cred.to_kafka()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_kafka(text) == cred
    assert password_matches("SCRAM-SHA-512", cred, "pw") and not password_matches("SCRAM-SHA-512", cred, "pW")
    for bad in ("", "salt=x", "salt=!!,stored_key=AA==,server_key=AA==,iterations=1", text.replace("iterations=8192", "iterations=x")):
        with pytest.raises(CredentialFormatError):
            ScramCredential.from_kafka(bad)
    assert user_credentials({"SCRAM-SHA-512": text, "SCRAM-SHA-256": "garbage", "producer_byte_rate": "1024"}) == {"SCRAM-SHA-512": cred}


def test_scram_client_reproduces_rfc_7677_exchange():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(SaslAuthenticationError):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree_on_names_that_need_escaping(mechanism):
    name = "a,b=c"
    stored = {mechanism: make_credential(mechanism, "pw", b"salty", 4096)}
    client = ScramClient(mechanism, name, "pw", "cn")
    server = ScramServer(mechanism, "sn", b"k")
    assert server.receive(client.first()) == Lookup(name)
    first = server.credentials(stored)
    assert isinstance(first, Challenge)
    done = server.receive(client.final(first.data))
    assert done == Authenticated(done.data, name)
    client.verify(done.data)


def test_scram_client_refuses_weak_or_foreign_server_first():
    # i=² passed isdigit() and int() raised ValueError, not SaslAuthenticationError
    for server_first in (b"r=cnXX,s=AAAA,i=1000", b"r=other,s=AAAA,i=4096", b"r=cn,s=AAAA,i=4096", "r=cnXX,s=AAAA,i=²".encode()):
        with pytest.raises(SaslAuthenticationError):
            ScramClient("SCRAM-SHA-512", "u", "p", "cn").final(server_first)
