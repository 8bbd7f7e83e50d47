"""Bad input against a live broker: it stays up, answers what it can, harms no data and keeps
serving a well-behaved client throughout (DESIGN.md section 7, guarantee 5)."""

from __future__ import annotations

import socket
import struct
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite.log.records import decode_records, encode_batch
from kafkalite.protocol.codec import decode_response, encode_request
from kafkalite.protocol.schema import ApiKey
from kafkalite.testing.fuzz_frames import KINDS, FrameFuzzer
from kafkalite.testing.probes import broker_state

CLIENT = "well-behaved"


def _roundtrip(port: int, frames: list[bytes], expect: int, timeout_s: float = 10.0) -> list[bytes]:
    """Send frames on one connection; read `expect` responses (without their length prefix)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        for f in frames:
            s.sendall(f)
        out = []
        buf = b""
        while len(out) < expect:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 4:
                (n,) = struct.unpack(">i", buf[:4])
                if len(buf) < 4 + n:
                    break
                out.append(buf[4 : 4 + n])
                buf = buf[4 + n :]
        return out


def _send_raw(port: int, data: bytes) -> bytes:
    """Send arbitrary bytes, half-close, read until the broker closes (or answers)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            return b""
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return got


class GoodClient:
    """Produces one numbered record at a time with our own codec and reads it back."""

    def __init__(self, port: int, topic: str):
        self.port = port
        self.topic = topic
        self.sent: list[bytes] = []
        self.cid = 0

    def produce_and_check(self) -> None:
        value = b"good-%d" % len(self.sent)
        self.cid += 1
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
                "topic_data": [{"name": self.topic, "partition_data": [{"index": 0, "records": encode_batch([(None, value, ())])}]}]}
        (resp,) = _roundtrip(self.port, [encode_request(ApiKey.PRODUCE, 7, self.cid, CLIENT, body)], 1)
        _, decoded = decode_response(ApiKey.PRODUCE, 7, resp)
        pr = decoded["responses"][0]["partition_responses"][0]
        assert pr["error_code"] == 0, pr
        assert pr["base_offset"] == len(self.sent)
        self.sent.append(value)

    def read_all(self) -> list[bytes]:
        self.cid += 1
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 10 << 20, "isolation_level": 0,
                "topics": [{"topic": self.topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 10 << 20}]}]}
        (resp,) = _roundtrip(self.port, [encode_request(ApiKey.FETCH, 11, self.cid, CLIENT, body)], 1)
        _, decoded = decode_response(ApiKey.FETCH, 11, resp)
        part = decoded["responses"][0]["partitions"][0]
        assert part["error_code"] == 0
        records = part["records"]
        values = []
        pos = 0
        while pos < len(records):
            (length,) = struct.unpack(">i", records[pos + 8 : pos + 12])
            values += [r.value for r in decode_records(records[pos : pos + 12 + length])]
            pos += 12 + length
        return values


def _create_topic(port: int, name: str) -> int:
    body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 20000, "validate_only": False}
    (resp,) = _roundtrip(port, [encode_request(ApiKey.CREATE_TOPICS, 3, 1, CLIENT, body)], 1, timeout_s=30)
    return decode_response(ApiKey.CREATE_TOPICS, 3, resp)[1]["topics"][0]["error_code"]


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _header(api_key: int, version: int, cid: int = 7) -> bytes:
    return struct.pack(">hhih", api_key, version, cid, 4) + b"fuzz"


frames = st.one_of(
    st.binary(max_size=300),  # garbage, lying lengths
    st.binary(max_size=200).map(_framed),  # framed garbage
    st.tuples(st.integers(-5, 80), st.integers(-3, 20), st.binary(max_size=120)).map(lambda t: _framed(_header(t[0], t[1]) + t[2])),
    st.tuples(st.sampled_from([0, 1, 2, 3, 19, 20, 22, 23, 32]), st.integers(0, 12), st.binary(max_size=64))
      .map(lambda t: _framed(_header(t[0], t[1]) + t[2])),  # real APIs, bodies garbled
    st.integers(2**20, 2**31 - 1).map(lambda n: struct.pack(">i", n) + b"x" * 16),  # huge length prefix
    st.integers(-(2**31), -1).map(lambda n: struct.pack(">i", n)),  # negative length
)


def test_malformed_frames_never_harm_the_broker_or_other_clients(cluster_factory):
    c = cluster_factory(1, overrides={"socket.request.max.bytes": 1 << 20})
    b = c.broker(1)
    port = b["port"]
    assert _create_topic(port, "fuzzed") == 0
    good = GoodClient(port, "fuzzed")
    good.produce_and_check()
    counter = {"n": 0}

    @settings(max_examples=2500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(frames)
    def throw(data: bytes) -> None:
        _send_raw(port, data)
        counter["n"] += 1
        if counter["n"] % 250 == 0:
            good.produce_and_check()

    throw()
    assert counter["n"] >= 2000
    # The fuzz soak's frames (bench/fuzz_soak.py, issue 14), a short run: real clients'
    # frames mutated, truncated and spliced, lying lengths, and garbage at the RPC port.
    fuzzer = FrameFuzzer(seed=14)
    kinds: set[str] = set()
    for i in range(3000):
        kind, data = fuzzer.next()
        kinds.add(kind)
        _send_raw(b["inter_broker_port"] if kind == "rpc" else port, data)
        if i % 500 == 0:
            good.produce_and_check()
    assert kinds == set(KINDS)
    good.produce_and_check()
    assert good.read_all() == good.sent
    state = broker_state(b["admin_port"])
    assert state["partitions"]["fuzzed-0"]["leo"] == len(good.sent)
    assert c.status()["brokers"][0]["alive"]


def test_specific_bad_requests_get_kafka_error_codes(cluster_factory):
    c = cluster_factory(1, overrides={"socket.request.max.bytes": 1 << 20})
    port = c.broker(1)["port"]
    # ApiVersions at a version we do not serve: v0-format answer, UNSUPPORTED_VERSION, our ranges.
    (resp,) = _roundtrip(port, [_framed(_header(ApiKey.API_VERSIONS, 99, cid=42))], 1)
    cid, body = decode_response(ApiKey.API_VERSIONS, 0, resp)
    assert cid == 42
    assert body["error_code"] == 35
    assert any(k["api_key"] == ApiKey.PRODUCE and k["min_version"] == 3 and k["max_version"] == 8 for k in body["api_keys"])
    # Bad topic names: INVALID_TOPIC_EXCEPTION from CreateTopics and Metadata.
    assert _create_topic(port, "bad/name") == 17
    assert _create_topic(port, "x" * 300) == 17
    meta = encode_request(ApiKey.METADATA, 5, 3, CLIENT, {"topics": [{"name": "no such?"}], "allow_auto_topic_creation": False})
    (resp,) = _roundtrip(port, [meta], 1)
    assert decode_response(ApiKey.METADATA, 5, resp)[1]["topics"][0]["error_code"] == 17
    # Produce with a corrupt batch (CRC flipped): CORRUPT_MESSAGE, nothing appended.
    assert _create_topic(port, "ok") == 0
    batch = bytearray(encode_batch([(b"k", b"v", ())]))
    batch[-1] ^= 0xFF
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": "ok", "partition_data": [{"index": 0, "records": bytes(batch)}]}]}
    (resp,) = _roundtrip(port, [encode_request(ApiKey.PRODUCE, 7, 4, CLIENT, body)], 1)
    assert decode_response(ApiKey.PRODUCE, 7, resp)[1]["responses"][0]["partition_responses"][0]["error_code"] == 2
    # Two batches for one partition (Kafka allows one from Produce v3 on): INVALID_RECORD,
    # nothing appended. An idempotent second batch would otherwise go unchecked.
    two = encode_batch([(b"k", b"v", ())], producer_id=5, producer_epoch=0, base_sequence=0) + \
        encode_batch([(b"k", b"w", ())], producer_id=5, producer_epoch=0, base_sequence=1)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": "ok", "partition_data": [{"index": 0, "records": two}]}]}
    (resp,) = _roundtrip(port, [encode_request(ApiKey.PRODUCE, 7, 4, CLIENT, body)], 1)
    assert decode_response(ApiKey.PRODUCE, 7, resp)[1]["responses"][0]["partition_responses"][0]["error_code"] == 87
    # A frame over socket.request.max.bytes closes the connection without an answer.
    assert _send_raw(port, struct.pack(">i", (1 << 20) + 1) + b"\0" * 1024) == b""
    # Group APIs answer, not drop the connection: FindCoordinator creates the offsets topic
    # (COORDINATOR_NOT_AVAILABLE while its leader is not yet elected), then names broker 1.
    find = encode_request(ApiKey.FIND_COORDINATOR, 1, 5, CLIENT, {"key": "g", "key_type": 0})
    (resp,) = _roundtrip(port, [find], 1, timeout_s=30)
    found = decode_response(ApiKey.FIND_COORDINATOR, 1, resp)[1]
    assert (found["error_code"], found["node_id"]) in ((0, 1), (15, -1)), found
    # Explicit replica assignments that break Kafka's rules: INVALID_REPLICA_ASSIGNMENT.
    for assignments in ([{"partition_index": 0, "broker_ids": [1, 1]}], [{"partition_index": 0, "broker_ids": [9]}],
                        [{"partition_index": 1, "broker_ids": [1]}]):
        body = {"topics": [{"name": "manual", "num_partitions": -1, "replication_factor": -1, "assignments": assignments, "configs": []}],
                "timeout_ms": 5000, "validate_only": False}
        (resp,) = _roundtrip(port, [encode_request(ApiKey.CREATE_TOPICS, 3, 6, CLIENT, body)], 1)
        assert decode_response(ApiKey.CREATE_TOPICS, 3, resp)[1]["topics"][0]["error_code"] == 39
    state = broker_state(c.broker(1)["admin_port"])
    assert state["partitions"]["ok-0"]["leo"] == 0
    assert "manual" not in state["metadata"]["topics"]


class _Conn:
    """One client connection speaking our codec, a request at a time."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.buf = b""
        self.cid = 0

    def send(self, api: int, version: int, body: dict) -> None:
        self.cid += 1
        self.sock.sendall(encode_request(api, version, self.cid, CLIENT, body))

    def read(self, api: int, version: int) -> dict:
        while len(self.buf) < 4 or len(self.buf) < 4 + struct.unpack(">i", self.buf[:4])[0]:
            chunk = self.sock.recv(65536)
            assert chunk, "the broker closed the connection"
            self.buf += chunk
        (n,) = struct.unpack(">i", self.buf[:4])
        frame, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
        return decode_response(api, version, frame)[1]

    def call(self, api: int, version: int, body: dict) -> dict:
        self.send(api, version, body)
        return self.read(api, version)


def test_a_static_member_with_a_rebalance_timeout_of_0_does_not_hang_the_broker(cluster_factory):
    """A static member (group.instance.id) that asks for a rebalance timeout of 0 and is
    left alone in a rebalance it did not rejoin: the group coordinator's core used to re-arm
    its wait at the same instant for ever, and the broker's loop hung, for every client.
    Now the group waits for the member's session, then empties; the broker serves on."""
    c = cluster_factory(1, overrides={"group.min.session.timeout.ms": 1000, "group.initial.rebalance.delay.ms": 1000})
    port = c.broker(1)["port"]
    assert _create_topic(port, "alive") == 0
    good = GoodClient(port, "alive")
    good.produce_and_check()
    admin = _Conn(port)
    find = {"key": "static0", "key_type": 0}
    for _ in range(60):  # the offsets topic is created on the first FindCoordinator
        if admin.call(ApiKey.FIND_COORDINATOR, 1, find)["error_code"] == 0:
            break
        time.sleep(0.5)
    protocols = [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x01\x00\x05alive\x00\x00\x00\x00"}]
    join = {"group_id": "static0", "protocol_type": "consumer", "protocols": protocols}
    a, b = _Conn(port), _Conn(port)
    a.send(ApiKey.JOIN_GROUP, 5, {**join, "session_timeout_ms": 4_000, "rebalance_timeout_ms": 0, "member_id": "",
                                  "group_instance_id": "i-a"})
    first = b.call(ApiKey.JOIN_GROUP, 5, {**join, "session_timeout_ms": 1_500, "rebalance_timeout_ms": 1_500,
                                          "member_id": "", "group_instance_id": None})
    assert first["error_code"] == 79  # MEMBER_ID_REQUIRED (KIP-394)
    b.send(ApiKey.JOIN_GROUP, 5, {**join, "session_timeout_ms": 1_500, "rebalance_timeout_ms": 1_500,
                                  "member_id": first["member_id"], "group_instance_id": None})
    joined_a, joined_b = a.read(ApiKey.JOIN_GROUP, 5), b.read(ApiKey.JOIN_GROUP, 5)  # after the initial delay
    assert joined_a["error_code"] == joined_b["error_code"] == 0
    # Neither sends SyncGroup. b's session ends 1.5 s into the generation, leaving i-a alone
    # in a rebalance with a timeout of 0; i-a's ends 2.5 s later.
    time.sleep(2)
    good.produce_and_check()  # the broker answers (it hung here)

    def state() -> str:
        return admin.call(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["static0"]})["groups"][0]["group_state"]

    assert state() == "PreparingRebalance"
    deadline = time.monotonic() + 20
    while state() != "Empty":
        assert time.monotonic() < deadline, f"the group is still {state()}"
        time.sleep(0.5)
    good.produce_and_check()
    assert good.read_all() == good.sent
    for conn in (admin, a, b):
        conn.sock.close()


def test_excessively_large_partition_counts_are_refused_and_the_broker_keeps_its_session(cluster_factory):
    """More than 10,000 new partitions in one CreateTopics or CreatePartitions:
    POLICY_VIOLATION, nothing created, and the broker's ZooKeeper connection untouched (a
    3,000,000-partition topic used to be placed and written, and ZooKeeper closed the
    broker's connection over the oversized znode). 10,000 exactly is accepted, as in Kafka."""
    c = cluster_factory(1)
    b = c.broker(1)
    port = b["port"]
    conn = _Conn(port)

    def create(topics: list[dict], validate_only: bool = False) -> list[tuple[int, str]]:
        body = {"topics": [{"replication_factor": 1, "assignments": [], "configs": [], **t} for t in topics],
                "timeout_ms": 30000, "validate_only": validate_only}
        return [(r["error_code"], r["error_message"]) for r in conn.call(ApiKey.CREATE_TOPICS, 3, body)["topics"]]

    for n in (2**31 - 1, 3_000_000, 10_001):
        [(code, message)] = create([{"name": f"huge{n}", "num_partitions": n}])
        assert code == 44 and "Excessively large number of partitions per request" in message, (n, message)
    # Several topics of one request count together; all are refused.
    got = create([{"name": "a", "num_partitions": 6000}, {"name": "b", "num_partitions": 6000}])
    assert [code for code, _ in got] == [44, 44]
    assert create([{"name": "ok10k", "num_partitions": 10_000}], validate_only=True) == [(0, None)]
    assert "huge10001" not in broker_state(b["admin_port"])["metadata"]["topics"]
    assert create([{"name": "grow", "num_partitions": 1}]) == [(0, None)]
    add = conn.call(ApiKey.CREATE_PARTITIONS, 1, {"topics": [{"name": "grow", "count": 20_000, "assignments": None}],
                                                  "timeout_ms": 10000, "validate_only": False})
    assert add["results"][0]["error_code"] == 44, add
    meta = conn.call(ApiKey.METADATA, 5, {"topics": None, "allow_auto_topic_creation": False})
    names = {t["name"] for t in meta["topics"]}
    assert "grow" in names and not names & {"a", "b", "huge10001"}
    assert len(next(t for t in meta["topics"] if t["name"] == "grow")["partitions"]) == 1
    with open(b["log"]) as f:
        assert "Connection dropped" not in f.read()  # kazoo's warning when ZooKeeper closes it
    conn.sock.close()
