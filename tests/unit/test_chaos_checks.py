"""bin/chaos's own checks (kafkalite.cli.chaos) without a cluster: brokers are stub admin
HTTP servers on 127.0.0.1 answering /state, the producer a fake."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kafkalite.cli import chaos

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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class FakeCluster:
    def __init__(self, ports: dict[int, int]) -> None:
        self.ports = ports

    def status(self) -> dict:
        return {"brokers": [{"id": b, "alive": True, "pid": None, "admin_port": port, "host": "127.0.0.1", "log_dirs": []}
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
