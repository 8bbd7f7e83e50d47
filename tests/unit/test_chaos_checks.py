"""bin/chaos's own checks (kafkalite.cli.chaos) without a cluster: brokers are stub admin
HTTP servers on 127.0.0.1 answering /state, the producer a fake."""

from __future__ import annotations

import contextlib
import json
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from kafkalite.cli import chaos
from kafkalite.testing import verify
from kafkalite.testing.history import FinalLog, History, check
from kafkalite.testing.verify import PartitionWait, VerifyingProducer, partition_of, replicas_identical_below_hw

TOPIC = "chaos"


def broker_state_doc(leaders: dict[int, int], partitions: dict[str, dict] | None = None) -> dict:
    """A /state document as a broker of the newest controller epoch would answer it."""
    topics = {TOPIC: {str(p): {"leader": leader, "replicas": [1, 2], "isr": [1, 2]} for p, leader in leaders.items()}}
    return {"metadata": {"controller_epoch": 1, "topics": topics}, "controller": {"active": True},
            "partitions": partitions or {}}


@contextlib.contextmanager
def admin_server(answer: Callable[[int], bytes | dict]) -> Iterator[int]:
    """A broker's admin HTTP server: `answer(n)` gives the n-th /state reply, a dict (JSON) or
    raw bytes of a reply cut short (Content-Length 500 and fewer bytes, then the
    connection closes, as when the broker dies while answering). Yields its port."""
    calls = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            got = answer(calls[0])
            calls[0] += 1
            if isinstance(got, dict):
                body = json.dumps(got).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Length", "500")
            self.end_headers()
            self.wfile.write(got)
            self.close_connection = True

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class FakeCluster:
    def __init__(self, ports: dict[int, int], log_dirs: dict[int, list[str]] | None = None) -> None:
        self.ports = ports
        self.log_dirs = log_dirs or {}

    def status(self) -> dict:
        return {"brokers": [{"id": b, "alive": True, "pid": None, "admin_port": port, "host": "127.0.0.1",
                             "log_dirs": self.log_dirs.get(b, [])}
                            for b, port in self.ports.items()]}

    def broker(self, broker_id: int) -> dict:
        return next(b for b in self.status()["brokers"] if b["id"] == broker_id)


class SilentProducer:
    """Acknowledged nothing for 100 s."""

    sent = 5000
    fatal = None

    def seconds_since_last_ack(self) -> float:
        return 100.0

    def snapshot(self) -> tuple[int, int]:
        return 1000, 0

    def partition_waits(self) -> dict:
        return {}


def rules_of(verdict) -> set[str]:
    return {v.rule for v in verdict.violations}


def wait_for(predicate: Callable[[], object], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_broker_answer_cut_short_leaves_the_stall_watch_watching():
    """http.client.IncompleteRead from a broker dying mid-answer escaped every_partition_led
    and ended the watch's thread: bin/chaos then said LIVENESS OK whatever followed."""
    cut = b'{"metadata": {'
    with admin_server(lambda n: cut if n < 3 else broker_state_doc({0: 1, 1: 1})) as port:
        watch = chaos.StallWatch(FakeCluster({1: port}), SilentProducer(), TOPIC, 2, stall_s=30, interval_s=0.02)
        watch.start()
        try:
            wait_for(lambda: watch.stalls)
            assert watch.is_alive()
        finally:
            watch.stop()
    assert watch.stalls[0].startswith("STALL: no acknowledgement for 100 s while every partition has a leader")
    assert watch.died() is None


class FlakyCluster(FakeCluster):
    """status() fails in an unexpected way the first `failures` times."""

    def __init__(self, ports: dict[int, int], failures: int) -> None:
        super().__init__(ports)
        self.failures = failures

    def status(self) -> dict:
        if self.failures:
            self.failures -= 1
            raise KeyError("brokers")
        return super().status()


def test_an_unexpected_error_in_a_look_is_logged_and_the_watch_looks_again(capsys):
    with admin_server(lambda n: broker_state_doc({0: 1})) as port:
        watch = chaos.StallWatch(FlakyCluster({1: port}, failures=2), SilentProducer(), TOPIC, 1, stall_s=30,
                                 interval_s=0.02)
        watch.start()
        try:
            wait_for(lambda: watch.stalls)
        finally:
            watch.stop()
    assert watch.failed_looks == 2 and watch.died() is None
    assert "stall watch: this look failed (KeyError: 'brokers'); looking again" in capsys.readouterr().out


class DyingWatch(chaos.StallWatch):
    def _look(self) -> None:
        raise SystemExit("gone")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_stall_watch_that_died_before_the_end_fails_liveness():
    watch = DyingWatch(FakeCluster({}), SilentProducer(), TOPIC, 1, stall_s=30, interval_s=0.01)
    watch.start()
    watch.join(5)
    watch.stop()
    assert watch.died() == "SystemExit: gone"
    live, lines = chaos.liveness_report(watch.stalls, [], watch.died(), 30, 60)
    assert not live
    assert lines[0] == "LIVENESS FAILED: 0 producer stalls, 0 times not fully replicated, the stall watch died"
    assert lines[1] == "  STALL WATCH DIED before the end (SystemExit: gone): no stall was looked for after that"
    # One that watched until stop() is no failure by itself.
    quiet = chaos.StallWatch(FakeCluster({}), SilentProducer(), TOPIC, 1, stall_s=300, interval_s=0.01)
    quiet.start()
    quiet.stop()
    quiet.join(5)
    assert quiet.died() is None
    assert chaos.liveness_report([], [], quiet.died(), 30, 60)[0]


class PartlyStrandedProducer:
    """Acknowledged 2 s ago (in some partition); partition 2 has waited 40 s on 3000 sends
    (all failing, say), partition 3 as long but it has no leader, partition 0 only 5 s;
    partitions 1, 4 and 5 have nothing unanswered (or were never sent to)."""

    sent = 9000
    fatal = None

    def __init__(self) -> None:
        self.waits = {0: PartitionWait(5.0, 400, 0), 2: PartitionWait(40.0, 3000, 2900), 3: PartitionWait(40.0, 3000, 0)}

    def seconds_since_last_ack(self) -> float:
        return 2.0

    def snapshot(self) -> tuple[int, int]:
        return 6000, 2900

    def partition_waits(self) -> dict[int, PartitionWait]:
        return dict(self.waits)


def test_one_stranded_partition_is_a_stall_though_the_others_are_acknowledged(capsys):
    """The producer-wide last acknowledgement hid a partition left without one: the run said
    LIVENESS OK."""
    producer = PartlyStrandedProducer()
    leaders = {0: 1, 1: 1, 2: 2, 3: -1, 4: 1, 5: 2}
    with admin_server(lambda n: broker_state_doc(leaders)) as port:
        watch = chaos.StallWatch(FakeCluster({1: port}), producer, TOPIC, 6, stall_s=30, interval_s=0.02)
        watch.start()
        try:
            wait_for(lambda: watch.stalls)
            time.sleep(0.2)  # more looks: reported once
            assert watch.stalls == ["STALL: partition 2 acknowledged nothing sent to it for 40 s while it has leader 2 "
                                    "(3000 sent there since its last acknowledgement, 2900 of them failed)"]
            producer.waits = {3: producer.waits[3]}  # partition 2 acknowledged again
            wait_for(lambda: "partition 2 acknowledged again" in capsys.readouterr().out)
        finally:
            watch.stop()
    assert len(watch.stalls) == 1


def test_the_producer_knows_per_partition_how_long_it_has_sent_without_an_acknowledgement():
    producer = VerifyingProducer("unused:0", TOPIC, partitions=3)
    assert producer.partition_waits(now=100.0) == {}  # sent nowhere yet
    for at in (10.0, 11.0, 12.0):
        producer.note_sent(0, now=at)
    producer.note_sent(1, now=11.0)
    producer.note_answer(0, acked=False)
    assert producer.partition_waits(now=50.0) == {0: PartitionWait(40.0, 3, 1), 1: PartitionWait(39.0, 1, 0)}
    producer.note_answer(1, acked=True)
    producer.note_answer(2, acked=False)  # nothing sent there since an acknowledgement: nothing waits
    producer.note_sent(1, now=49.0)
    assert producer.partition_waits(now=50.0) == {0: PartitionWait(40.0, 3, 1), 1: PartitionWait(1.0, 1, 0)}


def test_the_producer_names_the_partition_librdkafka_would_pick_for_the_key():
    # librdkafka's consistent_random: rd_crc32(key) % partition count (its test vector "123456789" -> 0xcbf43926).
    assert partition_of(b"123456789", 1 << 32) == 0xCBF43926
    assert {partition_of(f"chaos7-{i}".encode(), 6) for i in range(200)} == set(range(6))


def test_a_fatal_producer_error_fails_the_run_and_is_printed():
    """producer.fatal was set (librdkafka's idempotent producer refusing every produce) and
    nothing in bin/chaos read it."""
    producer = VerifyingProducer("unused:0", TOPIC, partitions=3)
    assert chaos.producer_problems(producer) == []
    producer.fatal = "OUT_OF_ORDER_SEQUENCE_NUMBER: Broker: Broker received an out of order sequence number"
    assert chaos.producer_problems(producer) == [
        "PRODUCER FATAL: OUT_OF_ORDER_SEQUENCE_NUMBER: Broker: Broker received an out of order sequence number "
        "(no record could be produced after it)"]


def test_the_stall_watch_says_when_the_producer_hit_a_fatal_error(capsys):
    producer = PartlyStrandedProducer()
    producer.waits = {}
    producer.fatal = "_FENCED: fenced"
    watch = chaos.StallWatch(FakeCluster({}), producer, TOPIC, 6, stall_s=30, interval_s=0.01)
    watch.start()
    try:
        wait_for(lambda: "PRODUCER FATAL: _FENCED: fenced" in capsys.readouterr().out)
        time.sleep(0.1)
        assert "PRODUCER FATAL" not in capsys.readouterr().out  # once
    finally:
        watch.stop()


def _batch(base: int, count: int, payload: bytes) -> bytes:
    """Enough of a record batch for verify._batches: base offset, length, last offset delta."""
    b = bytearray(61) + payload
    struct.pack_into(">qi", b, 0, base, len(b) - 12)
    struct.pack_into(">i", b, 23, count - 1)
    return bytes(b)


def _replicas(tmp_path, logs: dict[int, list[bytes]]) -> dict[int, list[str]]:
    """Broker id -> its log dirs, each holding chaos-0 with the given batches."""
    dirs = {}
    for b, batches in logs.items():
        d = tmp_path / f"broker-{b}"
        (d / f"{TOPIC}-0").mkdir(parents=True)
        (d / f"{TOPIC}-0" / "00000000000000000000.log").write_bytes(b"".join(batches))
        dirs[b] = [str(d)]
    return dirs


@contextlib.contextmanager
def two_brokers(leos: dict[int, int], hw: int) -> Iterator[dict[int, int]]:
    """Brokers 1 (leading chaos-0 with HW `hw`) and 2, each reporting its replica's LEO."""
    def doc(b: int) -> dict:
        return broker_state_doc({0: 1}, {f"{TOPIC}-0": {"hw": hw if b == 1 else 0, "leo": leos[b]}})

    with admin_server(lambda n: doc(1)) as one, admin_server(lambda n: doc(2)) as two:
        yield {1: one, 2: two}


def test_replicas_that_differ_below_the_hw_are_found_and_above_it_do_not_matter(tmp_path):
    """bin/chaos never compared replicas (guarantee 2), even after --disk bitflip."""
    a, b, c = _batch(0, 2, b"first"), _batch(2, 1, b"second"), _batch(3, 1, b"third")
    flipped = _batch(2, 1, b"secOnd")
    same = _replicas(tmp_path / "same", {1: [a, b, c], 2: [a, b, _batch(3, 1, b"other")]})
    with two_brokers({1: 4, 2: 4}, hw=3) as ports:
        assert replicas_identical_below_hw(FakeCluster(ports, same), TOPIC, 1, timeout_s=5, interval_s=0.01) == []
    differ = _replicas(tmp_path / "differ", {1: [a, b, c], 2: [a, flipped, c]})
    with two_brokers({1: 4, 2: 4}, hw=3) as ports:
        problems = replicas_identical_below_hw(FakeCluster(ports, differ), TOPIC, 1, timeout_s=5, interval_s=0.01)
    assert problems == [f"{TOPIC}-0: {differ[2][0]}/{TOPIC}-0 differs from {differ[1][0]}/{TOPIC}-0 below HW 3 at batch #1"]


def test_a_replica_that_never_reaches_the_hw_is_reported_not_compared(tmp_path):
    logs = _replicas(tmp_path, {1: [_batch(0, 3, b"x")], 2: []})
    with two_brokers({1: 3, 2: 1}, hw=3) as ports:
        problems = replicas_identical_below_hw(FakeCluster(ports, logs), TOPIC, 1, timeout_s=0.2, interval_s=0.01)
    assert problems == [f"{TOPIC}-0: replicas did not reach the HW 3 within 0 s (LEO 2: 1); its replicas were not compared"]


def test_the_final_log_is_read_with_the_clients_crc_check(monkeypatch):
    seen = {}

    class Refused(Exception):
        pass

    def consumer(config: dict):
        seen.update(config)
        raise Refused

    monkeypatch.setattr(verify, "Consumer", consumer)
    with pytest.raises(Refused):
        verify.read_partition("unused:0", TOPIC, 0)
    assert seen["check.crcs"] is True


class SilentClient:
    """A confluent_kafka.Producer that accepts records (or, full, refuses them all) and
    never answers any."""

    full = False

    def __init__(self, conf: dict) -> None:
        self.pending: list[bytes] = []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery, partition: int = -1) -> None:
        if self.full:
            raise BufferError("Local: Queue full")
        self.pending.append(value)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return len(self.pending)


def test_records_unanswered_after_the_final_flush_fail_the_run_and_are_named(monkeypatch):
    """flush(120)'s result was discarded and unanswered invocations only counted."""
    monkeypatch.setattr(verify, "Producer", SilentClient)
    history = History()
    producer = VerifyingProducer("unused:0", TOPIC, count_max=3, rate_per_s=1000, prefix="chaos9", history=history,
                                 partitions=3)
    producer.start()
    producer.join(10)
    assert producer.unflushed == 3
    assert chaos.producer_problems(producer) == [
        "UNANSWERED: 3 records were neither acknowledged nor failed after the producer's final 120 s flush"]
    verdict = check(history.events(), FinalLog({}))
    assert rules_of(verdict) == {"unanswered"} and verdict.counts["unanswered"] == 3
    assert verdict.violations[0].message == ("producer-1: 3 values invoked were never acknowledged nor failed: "
                                             "b'chaos9-0', b'chaos9-1', b'chaos9-2'")
    assert "3 unanswered" in verdict.summary()
    assert check(history.events(), FinalLog({}), producers_done=False).ok  # a history cut short: counted only


def test_a_record_the_client_never_took_is_failed_not_left_unanswered(monkeypatch):
    class FullClient(SilentClient):
        full = True

    monkeypatch.setattr(verify, "Producer", FullClient)
    history = History()
    producer = VerifyingProducer("unused:0", TOPIC, rate_per_s=1000, prefix="chaos9", history=history)
    producer.start()
    time.sleep(0.2)
    producer.stop()
    producer.join(10)
    assert producer.unflushed == 0 and chaos.producer_problems(producer) == []
    assert [(e.kind, e.value) for e in history.events()] == [("invoke", b"chaos9-0"), ("fail", b"chaos9-0")]
    assert check(history.events(), FinalLog({})).ok


def test_a_producer_still_running_after_the_end_fails_the_run():
    class Stuck(VerifyingProducer):
        def is_alive(self) -> bool:
            return True

    assert chaos.producer_problems(Stuck("unused:0", TOPIC)) == [
        "PRODUCER UNFINISHED: it was still running 180 s after it was stopped (its final flush did not end)"]


class FakeAdmin:
    """confluent_kafka.admin.AdminClient with one existing topic `chaos`, partitions x replicas."""

    topic_partitions = 6
    replicas = (1, 2, 3)
    min_isr = "2"
    created: list = []

    def __init__(self, conf: dict) -> None:
        pass

    def list_topics(self, timeout: float):
        partitions = {p: SimpleNamespace(replicas=list(self.replicas)) for p in range(self.topic_partitions)}
        return SimpleNamespace(topics={TOPIC: SimpleNamespace(error=None, partitions=partitions)})

    def describe_configs(self, resources: list) -> dict:
        done: Future = Future()
        done.set_result({"min.insync.replicas": SimpleNamespace(value=self.min_isr)})
        return {resources[0]: done}

    def create_topics(self, topics: list) -> dict:
        FakeAdmin.created.extend(topics)
        return {}


def test_an_existing_topic_that_does_not_fit_the_run_is_refused(monkeypatch):
    """ensure_topic took any existing topic: with 3 partitions where the run covers 6, RF 1 or
    min.insync.replicas 1 the checks would hold the cluster to a guarantee it never gave."""
    import confluent_kafka.admin

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", FakeAdmin)
    chaos.ensure_topic("unused:0", TOPIC, 6, 3, 2)  # fits
    assert FakeAdmin.created == []
    monkeypatch.setattr(FakeAdmin, "topic_partitions", 3)
    monkeypatch.setattr(FakeAdmin, "replicas", (1,))
    monkeypatch.setattr(FakeAdmin, "min_isr", "1")
    with pytest.raises(chaos.TopicMismatch) as refused:
        chaos.ensure_topic("unused:0", TOPIC, 6, 3, 2)
    assert str(refused.value) == (
        "topic chaos exists and does not fit this run: it has 3 partitions, not 6 (--partitions); its replication factor "
        "is 1, not 3; its min.insync.replicas is 1, below 2: an acknowledged write may then be lost with one broker down. "
        "Use another --topic, or delete chaos first")


def test_a_stricter_min_insync_replicas_is_accepted_with_a_note_and_one_above_the_rf_refused(monkeypatch, capsys):
    import confluent_kafka.admin

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", FakeAdmin)
    monkeypatch.setattr(FakeAdmin, "min_isr", "3")  # tests/chaos makes a producer stall so
    chaos.ensure_topic("unused:0", TOPIC, 6, 3, 2)
    assert "exists with min.insync.replicas 3" in capsys.readouterr().out
    assert chaos.topic_mismatches(6, {3}, 4, 6, 3, 2) == [
        "its min.insync.replicas is 4, above its replication factor 3: no write can succeed"]
    assert chaos.topic_mismatches(6, {3, 2}, 2, 6, 3, 2) == ["its replication factor is 2/3, not 3"]


def test_only_the_tracebacks_a_broker_logged_during_the_run_are_reported(tmp_path):
    log = tmp_path / "broker-2" / "broker.log"
    log.parent.mkdir()
    earlier = ("2026-11-28 10:00:00,000 ERROR [broker 2] kafkalite.x: an old failure\n"
               "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\nValueError: old\n")
    log.write_text(earlier)
    marks = chaos.log_marks({"brokers": [{"log": str(log)}, {"log": str(tmp_path / "never-written.log")}]})
    assert marks == {str(log): len(earlier), str(tmp_path / "never-written.log"): 0}
    assert chaos.tracebacks_since(marks) == []
    with open(log, "a") as f:
        f.write("2026-11-28 11:00:00,000 ERROR [broker 2] kafkalite.broker.server: log dir /d failed (No space left): "
                "3 partitions in it are offline\n"  # an operating error: one line, not reported
                "2026-11-28 11:00:01,000 ERROR [broker 2] kafkalite.rpc.transport: rpc handler failed for LeaderAndIsr\n"
                "Traceback (most recent call last):\n"
                "  File \"a.py\", line 3, in handle\n    return serve(request)\n"
                "  File \"b.py\", line 9, in serve\n    x = d[key]\n"
                "KeyError: 'partition'\n"
                "2026-11-28 11:00:02,000 INFO [broker 2] kafkalite.broker.server: went on\n")
    (found,) = chaos.tracebacks_since(marks)
    assert found.startswith("broker-2: ") and "rpc handler failed for LeaderAndIsr" in found
    assert found.endswith("KeyError: 'partition'") and "went on" not in found
