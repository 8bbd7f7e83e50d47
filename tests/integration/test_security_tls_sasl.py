"""TLS and SASL on client listeners (issue 15), against one secure 3-broker cluster of real
processes: SASL_SSL with SCRAM-SHA-512 (the client listener of `bin/cluster up --secure`) and
an SSL listener requiring client certificates (mutual TLS) on every broker.

kcat, confluent-kafka, kafka-python and aiokafka produce and consume over both; wrong
passwords, unknown users, plaintext on the TLS port, expired and foreign certificates are
refused cleanly while the brokers keep serving everyone else.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kafkalite.cli import client_security
from kafkalite.cli.dev_ca import Issued, issue, make_ca, write_pair
from kafkalite.core.sasl import FAILED_MESSAGE, ScramClient
from kafkalite.protocol.codec import decode_response, encode_request
from kafkalite.protocol.errors import ErrorCode
from kafkalite.protocol.schema import ApiKey
from kafkalite.testing.cluster import ADMIN_USER, LocalCluster
from kafkalite.testing.fixtures import TEST_BROKER_OVERRIDES, fresh_chroot
from kafkalite.testing.ports import free_ports

TOPIC = "secure-topic"
MESSAGES = 20
_LEN = struct.Struct(">i")


@pytest.fixture(scope="module")
def secure(zk_server, tmp_path_factory):
    """The module's cluster, its client.properties and an mTLS client pair."""
    brokers = 3
    ports = free_ports(4 * brokers)
    triples = [(ports[4 * i], ports[4 * i + 1], ports[4 * i + 2]) for i in range(brokers)]
    mtls_ports = [ports[4 * i + 3] for i in range(brokers)]
    directory = tmp_path_factory.mktemp("secure")
    # The authorizer is on (issue 15's other half): admin (SASL) and the dev-ca client
    # certificate (mTLS) are super users; anyone else needs ACLs, which shows that the
    # principal authentication sets is the one authorization sees.
    overrides = {**TEST_BROKER_OVERRIDES, "authorizer.class.name": "kafkalite.AclAuthorizer",
                 "super.users": f"User:{ADMIN_USER};User:CN=client,O=kafkalite"}
    cluster = LocalCluster(directory, brokers=brokers, overrides=overrides,
                           zk_connect=fresh_chroot(zk_server, "secure"), ports=triples, secure=True, mtls_ports=mtls_ports)
    try:
        status = cluster.up()
        props = client_security.parse_properties(Path(status["client_config"]).read_text())
        tls = cluster.state["secure"]
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(props)
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3)]).values():
            f.result(timeout=30)
        yield {"cluster": cluster, "status": status, "props": props, "tls": tls, "dir": directory,
               "mtls_bootstrap": ",".join(f"127.0.0.1:{p}" for p in mtls_ports), "mtls_ports": mtls_ports}
    finally:
        cluster.down()


def _sasl_props(secure) -> dict:
    return {k: v for k, v in secure["props"].items()}


def _mtls_props(secure) -> dict:
    tls = secure["tls"]
    return {"bootstrap.servers": secure["mtls_bootstrap"], "security.protocol": "SSL", "ssl.ca.location": tls["ca"],
            "ssl.certificate.location": tls["client"], "ssl.key.location": tls["client_key"]}


# -- the four clients ------------------------------------------------------------------------

def _confluent_round_trip(props: dict, tag: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({**props, "acks": "all"})
    errors: list = []
    for i in range(MESSAGES):
        producer.produce(TOPIC, key=tag.encode(), value=f"{tag}-{i}".encode(), partition=0,
                         on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None] * MESSAGES
    consumer = Consumer({**props, "group.id": f"g-{tag}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got = _drain(lambda: consumer.poll(1.0), tag)
    finally:
        consumer.close()
    assert got == [f"{tag}-{i}" for i in range(MESSAGES)]


def _drain(poll, tag: str) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + 30
    while len(got) < MESSAGES and time.monotonic() < deadline:
        msg = poll()
        if msg is None or msg.error():
            continue
        if msg.key() == tag.encode():
            got.append(msg.value().decode())
    return got


def test_confluent_kafka_produces_and_consumes_over_sasl_ssl_scram_sha_512(secure):
    assert secure["props"]["security.protocol"] == "SASL_SSL" and secure["props"]["sasl.mechanisms"] == "SCRAM-SHA-512"
    _confluent_round_trip(_sasl_props(secure), "confluent-sasl")


def test_confluent_kafka_produces_and_consumes_over_mutual_tls(secure):
    _confluent_round_trip(_mtls_props(secure), "confluent-mtls")


def _kcat(args: list[str], stdin: str | None = None) -> str:
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("kind", ["sasl", "mtls"])
def test_kcat_produces_and_consumes(secure, kind, tmp_path):
    props = _sasl_props(secure) if kind == "sasl" else _mtls_props(secure)
    conf = tmp_path / "kcat.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))  # kcat -F reads librdkafka properties
    tag = f"kcat-{kind}"
    _kcat(["-F", str(conf), "-P", "-t", TOPIC, "-p", "1", "-K:"], stdin="".join(f"{tag}:{tag}-{i}\n" for i in range(MESSAGES)))
    out = _kcat(["-F", str(conf), "-C", "-t", TOPIC, "-p", "1", "-o", "beginning", "-e", "-f", "%k:%s\n"])
    assert [line.split(":", 1)[1] for line in out.splitlines() if line.startswith(f"{tag}:")] == [f"{tag}-{i}" for i in range(MESSAGES)]


def _kafka_python_kwargs(secure, kind: str) -> dict:
    tls = secure["tls"]
    if kind == "sasl":
        p = secure["props"]
        return {"bootstrap_servers": p["bootstrap.servers"], "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": p["sasl.username"], "sasl_plain_password": p["sasl.password"], "ssl_cafile": tls["ca"]}
    return {"bootstrap_servers": secure["mtls_bootstrap"], "security_protocol": "SSL", "ssl_cafile": tls["ca"],
            "ssl_certfile": tls["client"], "ssl_keyfile": tls["client_key"]}


@pytest.mark.parametrize("kind", ["sasl", "mtls"])
def test_kafka_python_produces_and_consumes(secure, kind):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    kwargs = _kafka_python_kwargs(secure, kind)
    tag = f"kafka-python-{kind}"
    producer = KafkaProducer(acks="all", **kwargs)
    try:
        for i in range(MESSAGES):
            producer.send(TOPIC, key=tag.encode(), value=f"{tag}-{i}".encode(), partition=2).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=20000, **kwargs)
    try:
        consumer.assign([TopicPartition(TOPIC, 2)])
        consumer.seek_to_beginning()
        got = [m.value.decode() for m in itertools.islice((m for m in consumer if m.key == tag.encode()), MESSAGES)]
    finally:
        consumer.close()
    assert got == [f"{tag}-{i}" for i in range(MESSAGES)]


@pytest.mark.parametrize("kind", ["sasl", "mtls"])
def test_aiokafka_produces_and_consumes(secure, kind):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    tls = secure["tls"]
    if kind == "sasl":
        p = secure["props"]
        kwargs = {"bootstrap_servers": p["bootstrap.servers"], "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                  "sasl_plain_username": p["sasl.username"], "sasl_plain_password": p["sasl.password"],
                  "ssl_context": create_ssl_context(cafile=tls["ca"])}
    else:
        kwargs = {"bootstrap_servers": secure["mtls_bootstrap"], "security_protocol": "SSL",
                  "ssl_context": create_ssl_context(cafile=tls["ca"], certfile=tls["client"], keyfile=tls["client_key"])}
    tag = f"aiokafka-{kind}"

    async def run() -> list[str]:
        producer = AIOKafkaProducer(acks="all", **kwargs)
        await producer.start()
        try:
            for i in range(MESSAGES):
                await producer.send_and_wait(TOPIC, key=tag.encode(), value=f"{tag}-{i}".encode(), partition=1)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(auto_offset_reset="earliest", enable_auto_commit=False, **kwargs)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(TOPIC, 1)])
            await consumer.seek_to_beginning()
            got: list[str] = []
            deadline = time.monotonic() + 30
            while len(got) < MESSAGES and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=1000)
                got += [m.value.decode() for ms in batch.values() for m in ms if m.key == tag.encode()]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"{tag}-{i}" for i in range(MESSAGES)]


# -- raw protocol: what a failing or misbehaving client sees ---------------------------------

class Raw:
    """One TLS connection speaking Kafka requests by hand."""

    def __init__(self, port: int, cafile: str, cert: tuple[str, str] | None = None):
        ctx = ssl.create_default_context(cafile=cafile)
        if cert:
            ctx.load_cert_chain(*cert)
        self.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1")
        self.ids = itertools.count(1)

    def request(self, api: ApiKey, version: int, body: dict) -> dict:
        cid = next(self.ids)
        self.sock.sendall(encode_request(api, version, cid, "raw", body))
        (size,) = _LEN.unpack(self._read(4))
        got, response = decode_response(api, version, self._read(size))
        assert got == cid
        return response

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return out

    def closed_by_broker(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True

    def close(self) -> None:
        self.sock.close()


def _scram_attempt(secure, username: str, password: str) -> tuple[Raw, dict]:
    raw = Raw(secure["status"]["brokers"][0]["port"], secure["tls"]["ca"])
    assert raw.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
    client = ScramClient("SCRAM-SHA-512", username, password, "clientnonce")
    first = raw.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.first()})
    assert first["error_code"] == 0
    return raw, raw.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": client.final(first["auth_bytes"])})


def test_wrong_password_and_unknown_user_get_the_same_answer_then_the_connection_closes(secure):
    answers = []
    for username, password in ((secure["props"]["sasl.username"], "not-the-password"), ("nobody-here", "whatever")):
        raw, answer = _scram_attempt(secure, username, password)
        try:
            assert raw.closed_by_broker()
        finally:
            raw.close()
        answers.append((answer["error_code"], answer["error_message"]))
    assert answers == [(ErrorCode.SASL_AUTHENTICATION_FAILED, FAILED_MESSAGE)] * 2
    # and the right password still works, on a connection of its own
    raw, answer = _scram_attempt(secure, secure["props"]["sasl.username"], secure["props"]["sasl.password"])
    try:
        assert answer["error_code"] == 0
        assert raw.request(ApiKey.METADATA, 5, {"topics": None, "allow_auto_topic_creation": False})["brokers"]
    finally:
        raw.close()


def test_confluent_kafka_with_a_wrong_password_gets_an_authentication_error(secure):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    seen: list = []
    admin = AdminClient({**secure["props"], "sasl.password": "wrong", "error_cb": seen.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    admin.poll(1)  # error_cb runs from poll
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen


def test_requests_before_authentication_close_the_connection(secure):
    raw = Raw(secure["status"]["brokers"][1]["port"], secure["tls"]["ca"])
    try:
        versions = raw.request(ApiKey.API_VERSIONS, 0, {})
        assert {k["api_key"] for k in versions["api_keys"]} >= {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
        raw.sock.sendall(encode_request(ApiKey.METADATA, 5, 99, "raw", {"topics": None, "allow_auto_topic_creation": False}))
        assert raw.closed_by_broker()
    finally:
        raw.close()
    # Before authentication a frame may be 512 KiB at most (Kafka's sasl.server.max.receive.size):
    # a bigger one is not read, let alone decoded; the connection closes.
    raw = Raw(secure["status"]["brokers"][1]["port"], secure["tls"]["ca"])
    try:
        raw.sock.sendall(struct.pack(">i", 512 * 1024 + 1) + b"\0" * 1024)
        assert raw.closed_by_broker()
    finally:
        raw.close()


def test_an_unsupported_mechanism_is_refused_with_the_enabled_list(secure):
    raw = Raw(secure["status"]["brokers"][1]["port"], secure["tls"]["ca"])
    try:
        answer = raw.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["SCRAM-SHA-512"]}
        assert raw.closed_by_broker()
    finally:
        raw.close()


def test_sasl_handshake_v0_carries_scram_tokens_as_bare_frames(secure):
    raw = Raw(secure["status"]["brokers"][2]["port"], secure["tls"]["ca"])
    p = secure["props"]
    try:
        assert raw.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
        client = ScramClient("SCRAM-SHA-512", p["sasl.username"], p["sasl.password"], "v0nonce")

        def token(data: bytes) -> bytes:
            raw.sock.sendall(_LEN.pack(len(data)) + data)
            (size,) = _LEN.unpack(raw._read(4))
            return raw._read(size)

        client.verify(token(client.final(token(client.first()))))
        assert raw.request(ApiKey.METADATA, 5, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})["topics"][0]["name"] == TOPIC
        # a second handshake on an authenticated connection: Kafka's ILLEGAL_SASL_STATE
        assert raw.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    finally:
        raw.close()


def test_a_plaintext_client_on_the_tls_port_is_dropped(secure):
    sock = socket.create_connection(("127.0.0.1", secure["status"]["brokers"][0]["port"]), timeout=10)
    try:
        sock.sendall(encode_request(ApiKey.API_VERSIONS, 0, 1, "plain", {}))
        data = b""
        try:
            while chunk := sock.recv(4096):
                data += chunk
        except ConnectionError:
            pass
        # at most a TLS alert record (content type 21), never a Kafka response
        assert data == b"" or data[0] == 21
    finally:
        sock.close()


def _client_pair(secure, tmp_path: Path, issued: Issued, stem: str) -> tuple[str, str]:
    cert, key = write_pair(issued, tmp_path, stem)
    return str(cert), str(key)


def _ca_of(secure) -> Issued:
    tls = secure["tls"]
    cert = x509.load_pem_x509_certificate(Path(tls["ca"]).read_bytes())
    key = serialization.load_pem_private_key(Path(tls["ca_key"]).read_bytes(), password=None)
    return Issued(cert, key)  # type: ignore[arg-type]


def _mtls_refused(secure, cert: tuple[str, str]) -> bool:
    """Whether the mTLS listener refuses this client certificate: the handshake fails, or
    (TLS 1.3, where the client finishes first) the first request finds the connection gone."""
    try:
        raw = Raw(secure["mtls_ports"][0], secure["tls"]["ca"], cert)
    except (ssl.SSLError, ConnectionError):
        return True
    try:
        raw.request(ApiKey.API_VERSIONS, 0, {})
        return False
    except (ssl.SSLError, ConnectionError, OSError):
        return True
    finally:
        raw.close()


def test_expired_and_foreign_client_certificates_are_refused_and_the_listener_keeps_serving(secure, tmp_path):
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    expired = issue(_ca_of(secure), "client", server=False, days=1, not_before=long_ago)
    foreign = issue(make_ca("some other CA"), "client", server=False)
    assert _mtls_refused(secure, _client_pair(secure, tmp_path, expired, "expired"))
    assert _mtls_refused(secure, _client_pair(secure, tmp_path, foreign, "foreign"))
    assert not _mtls_refused(secure, (secure["tls"]["client"], secure["tls"]["client_key"]))
    from confluent_kafka.admin import AdminClient

    assert TOPIC in AdminClient(_mtls_props(secure)).list_topics(timeout=20).topics


def test_no_client_certificate_on_the_mtls_listener_is_refused(secure):
    assert _mtls_refused(secure, None)  # type: ignore[arg-type]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", *args], capture_output=True, text=True, timeout=60)


def test_users_cli_adds_and_removes_a_user_that_brokers_accept_without_restart(secure, tmp_path):
    zk = secure["cluster"].state["zookeeper"]["connect"]
    pw = tmp_path / "pw"
    pw.write_text("bobs-password\n")
    added = _cli("users", "add", "bob", "--password-file", str(pw), "--mechanism", "SCRAM-SHA-512", "--zookeeper", zk)
    assert added.returncode == 0, added.stderr
    listed = _cli("users", "list", "--json", "--zookeeper", zk)
    assert {"name": "bob", "mechanisms": ["SCRAM-SHA-512"]} in __import__("json").loads(listed.stdout)["users"]
    raw, answer = _scram_attempt(secure, "bob", "bobs-password")
    raw.close()
    assert answer["error_code"] == 0
    assert _cli("users", "remove", "bob", "--zookeeper", zk).returncode == 0
    raw, answer = _scram_attempt(secure, "bob", "bobs-password")
    raw.close()
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_cli_commands_take_the_command_config(secure, tmp_path):
    conf = secure["status"]["client_config"]
    listed = _cli("topics", "list", "--command-config", conf, "--json")
    assert listed.returncode == 0, listed.stderr
    assert TOPIC in listed.stdout
    produced = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "produce", TOPIC, "--partition", "0",
                               "--command-config", conf], input="cli-line\n", capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = _cli("consume", TOPIC, "--partition", "0", "--from-beginning", "--command-config", conf, "--timeout-ms", "5000")
    assert consumed.returncode == 0, consumed.stderr
    assert "cli-line" in consumed.stdout.splitlines()
    without = _cli("topics", "list", "--bootstrap", secure["props"]["bootstrap.servers"])
    assert without.returncode == 1
    # issue 16's commands over SASL_SSL too, on a topic of their own
    own = "secure-cli-admin"
    created = _cli("topics", "create", own, "--partitions", "1", "--replication-factor", "3", "--command-config", conf)
    assert created.returncode == 0, created.stderr
    lines = "".join(f"line-{i}\n" for i in range(5))
    produced = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "produce", own, "--partition", "0",
                               "--command-config", conf], input=lines, capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    altered = _cli("configs", "alter", "--topic", own, "--set", "retention.ms=86400000", "--command-config", conf)
    assert altered.returncode == 0, altered.stderr
    described = _cli("configs", "describe", "--topic", own, "--json", "--command-config", conf)
    assert described.returncode == 0, described.stderr
    assert "86400000" in described.stdout
    deleted = _cli("records", "delete", "--topic", own, "--partition", "0", "--before", "2", "--command-config", conf)
    assert deleted.returncode == 0, deleted.stderr
    dirs = _cli("log-dirs", "--json", "--command-config", conf)
    assert dirs.returncode == 0, dirs.stderr
    assert own in dirs.stdout
    consumed = _cli("consume", own, "--partition", "0", "--from-beginning", "--command-config", conf, "--timeout-ms", "5000")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"line-{i}" for i in range(2, 5)]


def test_sasl_plaintext_with_plain_and_scram_sha_256_on_a_one_broker_cluster(zk_server, tmp_path):
    """The other mechanisms, end to end with real clients, on a SASL_PLAINTEXT listener
    (a 1-broker cluster of its own: the shared one offers SCRAM-SHA-512 only)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    sasl_ssl, ib, admin_port, sasl_plain = free_ports(4)
    cluster = LocalCluster(tmp_path / "c", brokers=1, zk_connect=fresh_chroot(zk_server, "saslplain"),
                           ports=[(sasl_ssl, ib, admin_port)], secure=True,
                           overrides={**TEST_BROKER_OVERRIDES, "default.replication.factor": 1, "offsets.topic.replication.factor": 1,
                                      "listeners": f"SASL_SSL://127.0.0.1:{sasl_ssl},SASL_PLAINTEXT://127.0.0.1:{sasl_plain}",
                                      "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"})
    try:
        status = cluster.up()
        props = client_security.parse_properties(Path(status["client_config"]).read_text())
        base = {"bootstrap.servers": f"127.0.0.1:{sasl_plain}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.username": props["sasl.username"], "sasl.password": props["sasl.password"]}
        admin = AdminClient({**base, "sasl.mechanisms": "PLAIN"})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1)]).values():
            f.result(timeout=30)
        _confluent_round_trip({**base, "sasl.mechanisms": "PLAIN"}, "plain")
        _confluent_round_trip({**base, "sasl.mechanisms": "SCRAM-SHA-256"}, "scram-256")
        from confluent_kafka import KafkaException

        with pytest.raises(KafkaException):
            AdminClient({**base, "sasl.mechanisms": "PLAIN", "sasl.password": "wrong"}).list_topics(timeout=3)
    finally:
        cluster.down()


def _produce_until(conf: dict, want_ok: bool, timeout_s: float = 20) -> str | None:
    """Produce one record until the outcome is `want_ok` (ACL changes reach brokers through
    a ZooKeeper watch); the last error's name, None if it went through."""
    from confluent_kafka import Producer

    deadline = time.monotonic() + timeout_s
    while True:
        producer = Producer({**conf, "acks": "all", "message.timeout.ms": 3000, "log_level": 0})
        outcome: list = []
        producer.produce(TOPIC, b"acl-probe", partition=0, on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(10)
        err = outcome[0].name() if outcome and outcome[0] is not None else (None if outcome else "NO_ANSWER")
        if (err is None) == want_ok or time.monotonic() > deadline:
            return err
        time.sleep(0.5)


def test_the_authenticated_principal_is_what_the_authorizer_sees(secure, tmp_path):
    zk = secure["cluster"].state["zookeeper"]["connect"]
    conf = secure["status"]["client_config"]
    assert _cli("users", "add", "carol", "--password", "carols-password", "--zookeeper", zk).returncode == 0
    carol = {**secure["props"], "sasl.username": "carol", "sasl.password": "carols-password"}
    assert _produce_until(carol, want_ok=False) == "TOPIC_AUTHORIZATION_FAILED"
    added = _cli("acls", "add", "--allow", "--principal", "User:carol", "--operation", "Write", "--operation", "Describe",
                 "--topic", TOPIC, "--command-config", conf)
    assert added.returncode == 0, added.stderr
    assert _produce_until(carol, want_ok=True) is None
    # mTLS: the certificate's subject is the principal; another CN of the same CA is nobody special
    other = issue(_ca_of(secure), "other", server=False)
    cert, key = write_pair(other, tmp_path, "other")
    other_conf = {**_mtls_props(secure), "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    assert _produce_until(other_conf, want_ok=False) == "TOPIC_AUTHORIZATION_FAILED"
    assert _cli("acls", "add", "--allow", "--principal", "User:CN=other,O=kafkalite", "--operation", "Write",
                "--operation", "Describe", "--topic", TOPIC, "--command-config", conf).returncode == 0
    assert _produce_until(other_conf, want_ok=True) is None
