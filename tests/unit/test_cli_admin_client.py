"""The CLI's admin client and argument helpers, against a fake broker speaking the codec."""

from __future__ import annotations

import socket
import threading

import pytest

from kafkalite.cli.admin_client import (
    DEFAULT_BOOTSTRAP,
    AdminClient,
    AdminError,
    NoBrokerError,
    parse_bootstrap,
    resolve_bootstrap,
)
from kafkalite.cli.client_cmds import format_message, split_line
from kafkalite.cli.main import main
from kafkalite.cli.topics_cmd import parse_configs
from kafkalite.protocol.codec import decode_request, encode_response
from kafkalite.protocol.errors import ErrorCode
from kafkalite.protocol.framing import FrameDecoder
from kafkalite.protocol.schema import ApiKey
from kafkalite.testing.fake_clock import FakeClock
from kafkalite.testing.ports import free_port


class FakeBroker:
    """Answers each request with ``handler(api_key, body) -> response body`` on loopback."""

    def __init__(self, handler):
        self.handler = handler
        self.requests: list[tuple[int, int, dict]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        decoder = FrameDecoder(1 << 20)
        with conn:
            while data := conn.recv(65536):
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    header, body = decode_request(frame)
                    self.requests.append((header.api_key, header.api_version, body))
                    conn.sendall(encode_response(header, self.handler(header.api_key, body)))

    def close(self) -> None:
        self.sock.close()


def _metadata(body: dict, port: int) -> dict:
    topics = []
    for t in body["topics"] if body["topics"] is not None else [{"name": "a"}, {"name": "b"}]:
        if t["name"] not in ("a", "b"):
            topics.append({"error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "name": t["name"], "partitions": []})
            continue
        topics.append({"error_code": 0, "name": t["name"], "partitions": [
            {"error_code": 0, "partition_index": 1, "leader_id": -1, "leader_epoch": 4, "replica_nodes": [2, 1],
             "isr_nodes": [], "offline_replicas": [2, 1]},
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3, "replica_nodes": [1, 2],
             "isr_nodes": [1], "offline_replicas": []},
        ]})
    return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": port, "rack": "r1"}],
            "cluster_id": "c", "controller_id": 1, "topics": topics}



@pytest.fixture
def broker():
    fake: FakeBroker

    def handler(api: int, body: dict) -> dict:
        if api == ApiKey.METADATA:
            return _metadata(body, fake.port)
        if api == ApiKey.CREATE_TOPICS:
            name = body["topics"][0]["name"]
            if name == "a":
                return {"topics": [{"name": name, "error_code": int(ErrorCode.TOPIC_ALREADY_EXISTS), "error_message": "x"}]}
            if body["topics"][0]["replication_factor"] > 1:
                return {"topics": [{"name": name, "error_code": int(ErrorCode.INVALID_REPLICATION_FACTOR),
                                    "error_message": "replication factor 4 is not within 1..1 (live brokers)"}]}
            return {"topics": [{"name": name, "error_code": 0, "error_message": None}]}
        if api == ApiKey.DELETE_TOPICS:
            return {"responses": [{"name": n, "error_code": 0 if n == "a" else int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
                                  for n in body["topic_names"]]}
        if api == ApiKey.ELECT_LEADERS:
            return {"error_code": 0, "replica_election_results": [
                {"topic": t["topic"], "partition_result": [
                    {"partition_id": p, "error_code": int(ErrorCode.ELECTION_NOT_NEEDED), "error_message": None}
                    for p in t["partition_id"]]} for t in body["topic_partitions"]]}
        raise AssertionError(api)

    fake = FakeBroker(handler)
    yield fake
    fake.close()


def test_metadata_skips_a_dead_bootstrap_server_and_reads_epochs_and_health(broker):
    dead = free_port()
    with AdminClient(f"127.0.0.1:{dead},127.0.0.1:{broker.port}") as admin:
        meta = admin.metadata()
    assert meta.controller_id == 1
    assert [(b.id, b.rack) for b in meta.brokers] == [(1, "r1")]
    parts = meta.topics["a"].partitions
    assert [p.partition for p in parts] == [0, 1]
    assert (parts[0].leader, parts[0].leader_epoch, parts[0].under_replicated, parts[0].offline) == (1, 3, True, False)
    assert (parts[1].leader, parts[1].offline) == (-1, True)
    assert parts[1].to_json()["offline_replicas"] == [2, 1]
    assert broker.requests[0][:2] == (ApiKey.METADATA, 8)


def test_unknown_topic_and_broker_errors_are_one_line_admin_errors(broker):
    with AdminClient(f"127.0.0.1:{broker.port}") as admin:
        with pytest.raises(AdminError, match="unknown topic 'zz'"):
            admin.metadata(["zz"])
        with pytest.raises(AdminError, match="already exists"):
            admin.create_topic("a", 1, 1)
        with pytest.raises(AdminError, match="replication factor 4"):
            admin.create_topic("c", 1, 4)
        admin.create_topic("c", 1, 1, {"min.insync.replicas": "1"})
        admin.delete_topic("a")
        with pytest.raises(AdminError, match="unknown topic 'q'"):
            admin.delete_topic("q")
        results = admin.elect_preferred_leaders([("a", 0), ("a", 1)])
    assert results == [("a", 0, 84, None), ("a", 1, 84, None)]
    create = next(b for api, v, b in broker.requests if api == ApiKey.CREATE_TOPICS and b["topics"][0]["name"] == "c"
                  and b["topics"][0]["configs"])
    assert create["topics"][0]["configs"] == [{"name": "min.insync.replicas", "value": "1"}]


def test_nothing_listening_says_so():
    port = free_port()
    with pytest.raises(NoBrokerError, match=f"no broker reachable at 127.0.0.1:{port}"):
        AdminClient(f"127.0.0.1:{port}").metadata()


def test_bootstrap_parsing_and_resolution(monkeypatch):
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    for bad in ("a", "a:x", ":1", "a:0", ""):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)
    monkeypatch.delenv("KAFKALITE_BOOTSTRAP", raising=False)
    assert resolve_bootstrap(None) == DEFAULT_BOOTSTRAP
    monkeypatch.setenv("KAFKALITE_BOOTSTRAP", "h:9")
    assert resolve_bootstrap(None) == "h:9"
    assert resolve_bootstrap("x:1") == "x:1"


def test_config_and_line_parsing():
    assert parse_configs(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    for bad in ("novalue", "=1"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parse_configs([bad])
    assert split_line(b"k:v:w", b":") == (b"k", b"v:w")
    assert split_line(b"plain", b":") == (None, b"plain")
    assert split_line(b"k:v", None) == (None, b"k:v")


class _Msg:
    def __init__(self, key, value):
        self._key, self._value = key, value

    def partition(self):
        return 2

    def offset(self):
        return 7

    def key(self):
        return self._key

    def value(self):
        return self._value


def test_message_format():
    assert format_message(_Msg(b"k", b"v"), True, True) == b"2:7\tk\tv\n"
    assert format_message(_Msg(None, b"v"), False, True) == b"null\tv\n"
    assert format_message(_Msg(b"k", None), False, False) == b"\n"


def test_usage_errors_exit_2_with_one_line(capsys, broker):
    boot = f"127.0.0.1:{broker.port}"
    assert main(["topics", "create", "t", "--partitions", "0", "--replication-factor", "1", "--bootstrap", boot]) == 2
    assert main(["elect-leaders", "--partition", "1", "--bootstrap", boot]) == 2
    assert main(["consume", "a", "--max-messages", "0", "--bootstrap", boot]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert all(line.startswith("kafkalite ") for line in err)
    with pytest.raises(SystemExit) as exc:
        main(["consume", "a", "--from-beginning", "--offset", "3"])
    assert exc.value.code == 2


class _ScriptedMetadata(AdminClient):
    """Metadata answers from a script: an int is that many led partitions (of 4), None an
    unknown topic, an exception is raised."""

    def __init__(self, script):
        super().__init__("127.0.0.1:1")
        self.script = list(script)

    def metadata(self, topics=None):
        from kafkalite.cli.admin_client import ClusterMetadata, PartitionInfo, TopicInfo

        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, Exception):
            raise step
        if step is None:
            raise AdminError("unknown topic 't'")
        parts = [PartitionInfo(p, 1 if p < step else -1, 0, [1], [1], [], 0) for p in range(4)]
        return ClusterMetadata("c", 1, [], {"t": TopicInfo("t", parts)})


def test_topics_create_waits_for_leaders_as_long_as_they_keep_coming():
    """Issue 13: a 10,000-partition topic outlasts the request timeout; the CLI waits on."""
    clock = FakeClock()
    seen = []
    script = [None, NoBrokerError("no answer (timed out)")] + [0] * 100 + [1] * 200 + [2, 3, 4]
    admin = _ScriptedMetadata(script)
    admin.wait_for_leaders("t", 4, stall_timeout_s=120, on_progress=lambda led, n: seen.append(led),
                           clock=clock, sleep=clock.sleep)
    assert seen == [0, 1, 2, 3, 4]
    assert clock.now > 120  # longer than the stall bound in all, never that long without progress


def test_topics_create_gives_up_after_the_stall_timeout_without_progress():
    clock = FakeClock()
    admin = _ScriptedMetadata([2])
    with pytest.raises(AdminError, match="2 of its 4 partitions still have no leader"):
        admin.wait_for_leaders("t", 4, stall_timeout_s=30, clock=clock, sleep=clock.sleep)
    assert 30 < clock.now < 32


@pytest.mark.parametrize("argv, says", [
    (["topics", "create", "x", "--partitions", "1", "--replication-factor", "40000"], "--replication-factor: 40000 is out of range (int16"),
    (["topics", "create", "x", "--partitions", "3000000000", "--replication-factor", "1"], "--partitions: 3000000000 is out of range (int32"),
    (["topics", "alter", "x", "--partitions", "3000000000"], "--partitions: 3000000000 is out of range (int32"),
    (["records", "delete", "--topic", "a", "--partition", "0", "--before", str(1 << 63)], "--before: 9223372036854775808 is out of range"),
    (["records", "delete", "--topic", "a", "--partition", "0", "--before", "5", "--timeout-ms", "3000000000"], "--timeout-ms: 3000000000"),
    (["consume", "a", "--offset", str(1 << 63)], "--offset: 9223372036854775808 is out of range"),
])
def test_numbers_too_big_for_their_wire_type_are_usage_errors(capsys, broker, argv, says):
    """They were a struct.error traceback from the codec, exit 1."""
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--bootstrap", f"127.0.0.1:{broker.port}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not [api for api, _, _ in broker.requests if api != ApiKey.METADATA]


def test_a_topic_name_the_codec_cannot_encode_is_one_line_not_a_traceback(capsys, broker):
    name = "a" * 40000  # a string field is at most 32767 bytes: the codec raised ValueError
    boot = f"127.0.0.1:{broker.port}"
    assert main(["topics", "describe", name, "--bootstrap", boot]) == 1
    assert main(["topics", "create", name, "--partitions", "1", "--replication-factor", "1", "--bootstrap", boot]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert all("does not fit the Kafka protocol" in line and "exceeds int16" in line for line in err)
    with AdminClient(boot) as admin, pytest.raises(AdminError, match="cannot send METADATA"):
        admin.metadata([name])


@pytest.mark.parametrize("host", ["broker1..example.com", "a" * 64 + ".example.com"])
def test_a_host_name_the_resolver_refuses_is_a_bad_bootstrap_server(capsys, host):
    """socket's idna encoding raised UnicodeError (a traceback; from kazoo's thread for --zookeeper)."""
    with pytest.raises(ValueError, match="bad host name"):
        parse_bootstrap(f"{host}:9092")
    assert main(["topics", "list", "--bootstrap", f"{host}:9092"]) == 1
    assert main(["users", "list", "--zookeeper", f"{host}:2181"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert all("bad host name" in line for line in err)


def test_a_broker_advertising_a_host_name_the_resolver_refuses_counts_as_unreachable():
    from kafkalite.cli.admin_client import _Connection

    with pytest.raises(OSError, match="bad host name"):
        _Connection("broker1..example.com", 9092, 1000)


class _FakeProducer:
    """confluent_kafka.Producer refusing values over 1 MB as librdkafka does (MSG_SIZE_TOO_LARGE)."""

    def __init__(self, config):
        self.sent = []

    def produce(self, topic, value=None, key=None, on_delivery=None, **kw):
        from confluent_kafka import KafkaError, KafkaException

        if len(value) > 1_000_000:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Unable to produce message: Broker: Message size too large"))
        self.sent.append(value)
        on_delivery(None, None)

    def poll(self, timeout):
        return 0

    def flush(self, timeout):
        return 0


def test_produce_counts_a_line_over_the_message_size_as_failed_and_exits_1(monkeypatch, capsys):
    """librdkafka's KafkaException escaped as a traceback (only BufferError was caught)."""
    import io

    import confluent_kafka

    from kafkalite.cli import client_cmds

    monkeypatch.setattr(confluent_kafka, "Producer", _FakeProducer)
    monkeypatch.setattr(client_cmds, "_partitions", lambda *a: [0])
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"small\n" + b"x" * 1_100_000 + b"\nafter\n")))
    assert main(["produce", "t", "--bootstrap", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["kafkalite produce: 1 of 3 messages failed: Unable to produce message: Broker: Message size too large"]



class _SlowController:
    """Two brokers: the controller takes CreateTopics, DeleteTopics and CreatePartitions
    without answering in time (it is carrying them out); the other answers them as the
    topic then is: already created, already deleted. Metadata from either shows topic x
    with its partition led, the controller at `controller_port` (default: its own)."""

    def __init__(self, controller_port: int | None = None):
        self.release = threading.Event()
        self.slow = FakeBroker(lambda api, body: self._answer(api, body, slow=True))
        self.other = FakeBroker(lambda api, body: self._answer(api, body, slow=False))
        self.controller_port = controller_port or self.slow.port

    def _answer(self, api: int, body: dict, *, slow: bool) -> dict:
        if api == ApiKey.METADATA:
            return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.controller_port, "rack": None},
                                {"node_id": 2, "host": "127.0.0.1", "port": self.other.port, "rack": None}],
                    "cluster_id": "c", "controller_id": 1, "topics": [
                        {"error_code": 0, "name": t["name"], "partitions": [
                            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
                             "isr_nodes": [1], "offline_replicas": []}]} for t in body["topics"] or []]}
        if slow:
            self.release.wait(10)
        if api == ApiKey.CREATE_TOPICS:
            code = 0 if slow else int(ErrorCode.TOPIC_ALREADY_EXISTS)
            return {"topics": [{"name": "x", "error_code": code, "error_message": None}]}
        if api == ApiKey.DELETE_TOPICS:
            code = 0 if slow else int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            return {"responses": [{"name": "x", "error_code": code}]}
        if api == ApiKey.CREATE_PARTITIONS:
            code = 0 if slow else int(ErrorCode.INVALID_PARTITIONS)
            return {"results": [{"name": "x", "error_code": code, "error_message": None if slow else "x has 2 partitions"}]}
        raise AssertionError(api)

    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.slow.port},127.0.0.1:{self.other.port}"

    def sent(self, broker: FakeBroker, api: int) -> int:
        return sum(1 for a, _, _ in broker.requests if a == api)

    def close(self) -> None:
        self.release.set()
        self.slow.close()
        self.other.close()


@pytest.fixture
def slow_controller(monkeypatch):
    from kafkalite.cli import admin_client

    monkeypatch.setattr(admin_client, "SOCKET_SLACK_MS", 0)
    cluster = _SlowController()
    yield cluster
    cluster.close()


@pytest.mark.parametrize("api, call", [
    (ApiKey.CREATE_TOPICS, lambda admin: admin.create_topic("x", 1, 1)),
    (ApiKey.DELETE_TOPICS, lambda admin: admin.delete_topic("x")),
    (ApiKey.CREATE_PARTITIONS, lambda admin: admin.create_partitions("x", 2)),
], ids=["create-topics", "delete-topics", "create-partitions"])
def test_a_request_that_timed_out_is_not_sent_again_to_another_broker(slow_controller, api, call):
    """It was: the second broker answered "already exists" (or "unknown topic") while the
    controller was carrying out the first."""
    with AdminClient(slow_controller.bootstrap(), request_timeout_ms=300) as admin:
        with pytest.raises(NoBrokerError, match=f"at 127.0.0.1:{slow_controller.slow.port} to {api.name} \\(timed out\\)"):
            call(admin)
    assert slow_controller.sent(slow_controller.slow, api) == 1
    assert slow_controller.sent(slow_controller.other, api) == 0


def test_topics_create_that_timed_out_waits_for_leaders_instead_of_saying_already_exists(slow_controller, capsys, monkeypatch):
    """The CLI's fallback for a creation outlasting the request (wait for the leaders) was
    never reached: rc 1, "topic 'x' already exists"."""
    monkeypatch.setitem(AdminClient.__init__.__kwdefaults__, "request_timeout_ms", 300)
    rc = main(["topics", "create", "x", "--partitions", "1", "--replication-factor", "1", "--bootstrap", slow_controller.bootstrap()])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "waiting for every partition to have a leader" in err
    assert out.strip() == "created topic x (1 partitions, replication factor 1)"


def test_a_request_the_controller_could_not_be_sent_goes_to_another_broker(monkeypatch):
    from kafkalite.cli import admin_client

    monkeypatch.setattr(admin_client, "SOCKET_SLACK_MS", 0)
    cluster = _SlowController(controller_port=free_port())  # the controller refuses connections
    try:
        with AdminClient(f"127.0.0.1:{cluster.other.port}", request_timeout_ms=300) as admin:
            with pytest.raises(AdminError, match="already exists"):
                admin.create_topic("x", 1, 1)
        assert cluster.sent(cluster.other, ApiKey.CREATE_TOPICS) == 1
    finally:
        cluster.close()


def test_configs_alter_refuses_to_delete_a_config_the_topic_does_not_set(capsys):
    """It printed "altered topic t: -no.such.config" (exit 0); kafka-configs says
    "Invalid config(s): ..." and alters nothing."""
    def handler(api: int, body: dict) -> dict:
        if api == ApiKey.DESCRIBE_CONFIGS:
            return {"results": [{"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t", "configs": [
                {"name": "retention.ms", "value": "5", "read_only": False, "is_default": False, "config_source": 1,
                 "is_sensitive": False, "synonyms": []},
                {"name": "segment.bytes", "value": "1073741824", "read_only": False, "is_default": False, "config_source": 5,
                 "is_sensitive": False, "synonyms": []}]}]}
        if api == ApiKey.INCREMENTAL_ALTER_CONFIGS:
            return {"responses": [{"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t"}]}
        raise AssertionError(api)

    fake = FakeBroker(handler)
    try:
        boot = f"127.0.0.1:{fake.port}"
        argv = ["configs", "alter", "--topic", "t", "--bootstrap", boot]
        assert main(argv + ["--set", "retention.ms=7", "--delete", "no.such.config", "--delete", "segment.bytes"]) == 1
        assert capsys.readouterr().err.strip() == (
            "kafkalite configs alter: Invalid config(s): no.such.config,segment.bytes (not set on topic t; nothing altered)")
        assert not [api for api, _, _ in fake.requests if api == ApiKey.INCREMENTAL_ALTER_CONFIGS]
        assert main(argv + ["--delete", "retention.ms"]) == 0
        assert capsys.readouterr().out.strip() == "altered topic t: -retention.ms"
    finally:
        fake.close()


def test_a_bootstrap_port_of_non_ascii_digits_is_a_bad_bootstrap_server():
    with pytest.raises(ValueError, match="bad bootstrap server 'h:\u00b2'; expected host:port"):
        parse_bootstrap("h:\u00b2")
