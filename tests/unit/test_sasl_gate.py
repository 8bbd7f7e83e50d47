"""The SASL gate of a SASL_PLAINTEXT / SASL_SSL listener (kafkalite.broker.sasl_gate), driven
through its request loop with a stream of client frames; ZooKeeper is a dict standing in for
kazoo (the users' znodes and the cluster's key of the mock SCRAM salts)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
import threading
from types import SimpleNamespace

import pytest
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.security import Permissions

from kafkalite.broker.sasl_gate import SaslGate
from kafkalite.core import sasl
from kafkalite.core.sasl import SALT_BYTES, make_credential
from kafkalite.protocol.codec import decode_response, encode_request
from kafkalite.protocol.schema import ApiKey
from kafkalite.zk import paths
from kafkalite.zk.client import ZkAdapter
from kafkalite.zk.errors import ZnodeDecodeError
from kafkalite.zk.security import ZkSecurity
from kafkalite.zk.users import encode_user_config, scram_mock_salt_key


class FakeKazoo:
    """get/create over a dict: enough for the gate's user reads and the key's creation."""

    def __init__(self, users: dict[str, dict[str, str]] | None = None):
        self.data = {paths.config_user_path(name): encode_user_config(config) for name, config in (users or {}).items()}
        self.acls: dict[str, list | None] = {}

    def get(self, path):
        if path not in self.data:
            raise NoNodeError(path)
        return self.data[path], SimpleNamespace(version=0)

    def create(self, path, value, acl=None, ephemeral=False, makepath=False, include_data=False):
        if path in self.data:
            raise NodeExistsError(path)
        self.data[path], self.acls[path] = value, acl
        return path, SimpleNamespace(version=0)


class Writer:
    def __init__(self):
        self.sent = bytearray()

    def write(self, data):
        self.sent += data

    def writelines(self, parts):
        for part in parts:
            self.sent += part

    async def drain(self):
        pass


def gate(key: bytes, kazoo: FakeKazoo, mechanisms=("SCRAM-SHA-512", "PLAIN")) -> SaslGate:
    broker = SimpleNamespace(settings={"sasl.enabled.mechanisms": list(mechanisms)}, scram_mock_salt_key=key, kazoo=kazoo)
    return SaslGate(broker, SimpleNamespace(frame_bytes_max=1 << 20, authentication_failures=0, apis=None))


async def exchange(sasl: SaslGate, mechanism: str, *tokens: bytes) -> tuple[str | None, list[dict]]:
    """SaslHandshake v1 then one SaslAuthenticate v1 per token, then the client goes away:
    (the principal, the bodies of the SaslAuthenticate answers)."""
    reader = asyncio.StreamReader()
    reader.feed_data(encode_request(ApiKey.SASL_HANDSHAKE, 1, 0, "c", {"mechanism": mechanism}))
    for i, token in enumerate(tokens, 1):
        reader.feed_data(encode_request(ApiKey.SASL_AUTHENTICATE, 1, i, "c", {"auth_bytes": token}))
    reader.feed_eof()
    writer = Writer()
    principal = await sasl.authenticate(reader, writer, "peer", "127.0.0.1")
    frames, pos = [], 0
    while pos < len(writer.sent):
        (size,) = struct.unpack_from(">i", writer.sent, pos)
        frames.append(bytes(writer.sent[pos + 4:pos + 4 + size]))
        pos += 4 + size
    assert decode_response(ApiKey.SASL_HANDSHAKE, 1, frames[0])[1]["error_code"] == 0
    return principal, [decode_response(ApiKey.SASL_AUTHENTICATE, 1, frame)[1] for frame in frames[1:]]


def server_first_salt(answer: dict) -> bytes:
    attrs = dict(kv.split("=", 1) for kv in answer["auth_bytes"].decode().split(","))
    return base64.b64decode(attrs["s"])


async def test_an_unknown_scram_user_gets_the_same_salt_from_every_broker_and_after_restarts():
    # A real user's salt is stored: every broker and listener shows the same one. An unknown
    # name's mock salt must be as stable, or asking two brokers (or one before and after a
    # restart) tells who exists.
    zookeeper = FakeKazoo({"alice": {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "pw", b"s" * SALT_BYTES).to_kafka()}})
    zk = ZkAdapter(zookeeper, security=ZkSecurity("kafka", "pw", set_acl=True))
    broker_1_key = scram_mock_salt_key(zk, b"\x01" * 32)  # the first broker stores its key
    broker_2_key = scram_mock_salt_key(zk, b"\x02" * 32)  # the others (and restarts) read it
    assert broker_1_key == broker_2_key == b"\x01" * 32
    acl = zookeeper.acls[paths.SCRAM_MOCK_SALT_KEY]
    assert [(a.id.scheme, a.perms) for a in acl] == [("digest", Permissions.ALL)]  # private, like the credentials

    salts = []
    for key in (broker_1_key, broker_1_key, broker_2_key):  # two listeners of broker 1, then broker 2
        _, answers = await exchange(gate(key, zookeeper), "SCRAM-SHA-512", b"n,,n=mallory,r=abc")
        salts.append(server_first_salt(answers[0]))
    assert len(set(salts)) == 1
    assert len(salts[0]) == SALT_BYTES  # the length of `kafkalite users` salts


def test_an_unreadable_mock_salt_key_is_a_typed_error():
    zookeeper = FakeKazoo()
    zk = ZkAdapter(zookeeper)
    for bad in (b"not hex", b"00ff"):
        zookeeper.data[paths.SCRAM_MOCK_SALT_KEY] = bad
        with pytest.raises(ZnodeDecodeError):
            scram_mock_salt_key(zk, b"\x01" * 32)


async def test_plain_password_checks_run_off_the_event_loop_for_known_and_unknown_users(monkeypatch):
    # PBKDF2 of 4096 rounds on the event loop stalled every connection of the broker for
    # each unauthenticated PLAIN attempt.
    zookeeper = FakeKazoo({"carol": {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "pw", b"s" * SALT_BYTES).to_kafka()}})
    loop_thread = threading.get_ident()
    threads: list[int] = []
    real = hashlib.pbkdf2_hmac

    def recorded(*args):
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(sasl.hashlib, "pbkdf2_hmac", recorded)
    sasl_gate = gate(b"k" * 32, zookeeper)
    principal, answers = await exchange(sasl_gate, "PLAIN", b"\x00carol\x00pw")
    assert principal == "User:carol" and answers[0]["error_code"] == 0
    for token in (b"\x00carol\x00wrong", b"\x00nobody\x00pw"):
        principal, answers = await exchange(sasl_gate, "PLAIN", token)
        assert principal is None and answers[0]["error_code"] == 58  # SASL_AUTHENTICATION_FAILED, the same for both
    assert len(threads) == 3  # one PBKDF2 each, the unknown user's too
    assert loop_thread not in threads
