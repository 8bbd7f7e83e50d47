"""A steady acks=all producer whose delivery latencies a benchmark reads while something else
loads the cluster (a partition move, the log cleaner), and their percentiles."""

from __future__ import annotations

import statistics
import threading
import time

DEADLINE_S = 3600  # a probe never runs longer, whatever its caller does


class Probe(threading.Thread):
    """acks=all records of 100 bytes to `topic` at `rate`/s; (send time, latency) per delivery."""

    def __init__(self, boot: str, rate: float, topic: str) -> None:
        super().__init__(daemon=True)
        self.boot, self.rate, self.topic = boot, rate, topic
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.boot, "acks": "all", "linger.ms": 0})
        start = time.monotonic()
        n = 0
        while not self.halt.is_set() and time.monotonic() - start < DEADLINE_S:
            sent = time.monotonic()
            p.produce(self.topic, value=b"p" * 100, on_delivery=lambda err, msg, t=sent: err is None and self.samples.append(
                (t, time.monotonic() - t)))
            p.poll(0)
            n += 1
            delay = start + n / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        p.flush(30)


def percentiles(latencies: list[float]) -> str:
    if len(latencies) < 2:
        return "n/a"
    q = statistics.quantiles(latencies, n=100)
    return f"p50 {q[49] * 1000:.1f} ms, p99 {q[98] * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms ({len(latencies)} records)"
