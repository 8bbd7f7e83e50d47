"""Small helpers tests and chaos scripts use to look at a live cluster."""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any


def process_state(pid: int | None) -> str | None:
    """The state letter of /proc/<pid>/stat ("R", "S", "T" stopped, "Z" zombie, ...), None if
    there is no such process (or no /proc)."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None


# What asking a broker's admin HTTP server can raise when the broker is not there or dies
# while answering: refused or reset (OSError), a body cut short (http.client.IncompleteRead)
# or a reply that is not JSON (ValueError). A probe over several brokers skips such a one.
UNANSWERED = (OSError, http.client.HTTPException, ValueError)


def broker_state(admin_port: int, host: str = "127.0.0.1", timeout_s: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{host}:{admin_port}/state", timeout=timeout_s) as r:
        return json.loads(r.read())


def metrics_text(admin_port: int, host: str = "127.0.0.1", timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(f"http://{host}:{admin_port}/metrics", timeout=timeout_s) as r:
        return r.read().decode()


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    """Poll until predicate() is truthy (exceptions count as not yet); returns its value."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - the system is still converging
            last_error = e
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def partition_view(cluster, topic: str, partition: int) -> dict[str, Any] | None:
    """The metadata of one partition as the live broker with the newest controller epoch
    sees it. A broker just back from a pause still holds the metadata of before it and
    would report, say, itself as leader with a full ISR."""
    best: tuple[int, int] | None = None
    view = None
    for b in cluster.status()["brokers"]:
        # A stopped (SIGSTOP) broker accepts connections and answers nothing: asking it would
        # cost the whole timeout for each partition looked at (a wait for six partitions
        # took 30 s of a 30 s allowance in tests/chaos/test_liveness.py).
        if not b["alive"] or process_state(b.get("pid")) in ("T", "t"):
            continue
        try:
            st = broker_state(b["admin_port"], host=b["host"])
        except UNANSWERED:
            continue
        meta = st["metadata"]["topics"].get(topic, {}).get(str(partition))
        rank = (st["metadata"]["controller_epoch"], 1 if st["controller"].get("active") else 0)
        if meta is not None and (best is None or rank > best):
            best, view = rank, meta
    return view


def fully_replicated(cluster, topic: str, partitions: int) -> bool:
    """Every partition has a leader and its whole replica set in the ISR."""
    for p in range(partitions):
        v = partition_view(cluster, topic, p)
        if v is None or v["leader"] < 0 or len(v["isr"]) != len(v["replicas"]):
            return False
    return True


def topic_fully_replicated(cluster, topic: str) -> bool:
    """Every partition of `topic` (however many it has; True if it does not exist) has a
    leader and its whole replica set in the ISR, as the live broker with the newest
    controller epoch sees it (one /state read per broker)."""
    best: tuple[int, int] | None = None
    view: dict[str, Any] = {}
    for b in cluster.status()["brokers"]:
        if not b["alive"]:
            continue
        try:
            st = broker_state(b["admin_port"], host=b["host"])
        except UNANSWERED:
            continue
        rank = (st["metadata"]["controller_epoch"], 1 if st["controller"].get("active") else 0)
        if best is None or rank > best:
            best, view = rank, st["metadata"]["topics"].get(topic, {})
    return best is not None and all(v["leader"] >= 0 and len(v["isr"]) == len(v["replicas"]) for v in view.values())


def wait_fully_replicated(cluster, topic: str, partitions: int, timeout_s: float = 60) -> None:
    wait_until(lambda: fully_replicated(cluster, topic, partitions), timeout_s, f"every {topic} partition to have its full ISR")


def consumer_bytes_served(cluster, broker_id: int, topic: str) -> dict[str, float]:
    """Consumer bytes this broker served for `topic` as leader and as follower, those of
    them served to a client in its own rack, and the fetches it redirected to a preferred
    read replica."""
    out = {"leader": 0.0, "follower": 0.0, "same_rack": 0.0, "redirects": 0.0}
    from prometheus_client.parser import text_string_to_metric_families

    b = cluster.broker(broker_id)
    text = metrics_text(b["admin_port"], host=b["host"])
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("topic") != topic:
                continue
            if sample.name == "kafkalite_consumer_fetch_bytes_total":
                out[sample.labels["served_as"]] += sample.value
                if sample.labels["locality"] == "same_rack":
                    out["same_rack"] += sample.value
            elif sample.name == "kafkalite_preferred_read_replica_redirects_total":
                out["redirects"] += sample.value
    return out
