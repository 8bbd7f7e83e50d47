"""The status page (admin HTTP `/`) in a real headless Chromium, on a real cluster.

Screenshots are kept under test-artifacts/status-page/ (gitignored; KAFKALITE_TEST_ARTIFACTS
moves it). The browser loads the page once; everything after that is the page refreshing
itself, so the kill -9 check also proves the refresh.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.chromium import Chromium, find_chromium
from kafkalite.testing.fixtures import TEST_BROKER_OVERRIDES
from kafkalite.testing.probes import wait_until

ROOT = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_S = TEST_BROKER_OVERRIDES["zookeeper.session.timeout.ms"] / 1000
REFRESH_S = 0.5
# The page must show a killed broker down within the ZooKeeper session timeout, plus the
# controller's UpdateMetadata, one page refresh and slack for a loaded 2-core machine.
DOWN_SHOWN_WITHIN_S = SESSION_TIMEOUT_S + REFRESH_S + 6.0
TOPIC = "orders"
GROUP = "status-readers"


def _artifacts() -> Path:
    d = Path(os.environ.get("KAFKALITE_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "status-page"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _get(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def _status_json(admin_port: int) -> dict:
    return json.loads(_get(f"http://127.0.0.1:{admin_port}/status.json")[2])


async def _until(page, expression: str, timeout_s: float, what: str):
    import asyncio

    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = await page.evaluate(expression)
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"the page did not show {what} within {timeout_s:.0f} s (last: {last!r})")


def _load(boot: str) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3)]).values():
        f.result(timeout=30)
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5})
    for i in range(300):
        producer.produce(TOPIC, key=str(i % 7).encode(), value=f"order-{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": boot, "group.id": GROUP, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        got = 0
        deadline = time.monotonic() + 30
        while got < 150 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got += 1
        assert got >= 150
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


async def test_status_page_in_chromium_shows_a_killed_broker_down_and_its_partitions_under_replicated(cluster_factory):
    chromium, reason = find_chromium()
    if chromium is None:
        pytest.skip(f"no headless browser: {reason}")
    c = cluster_factory(3, racks=["a", "b", "c"])
    boot = c.status()["bootstrap"]
    _load(boot)
    ctrl = c.status()["controller"]
    viewer = c.broker(ctrl)
    victim = next(b for b in (1, 2, 3) if b != ctrl)
    url = f"http://127.0.0.1:{viewer['admin_port']}/?refresh={REFRESH_S}"

    # Plain HTTP first: headers, assets, bad input.
    status, headers, body = _get(url)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    for asset, kind in (("/status.css", "text/css"), ("/status.js", "text/javascript")):
        st, h, _ = _get(f"http://127.0.0.1:{viewer['admin_port']}{asset}")
        assert st == 200 and h["Content-Type"].startswith(kind)
    st, _, text = _get(f"http://127.0.0.1:{viewer['admin_port']}/?refresh=banana")
    assert st == 400 and "refresh must be a number of seconds" in text
    # The group's coordinator reports its lag (refreshed every few seconds).
    groups = wait_until(lambda: [g for b in (1, 2, 3) for g in _status_json(c.broker(b)["admin_port"])["groups"]
                            if g["group"] == GROUP and g["total_lag"] is not None], 30, "the group's lag")
    # Only partitions it consumed from have commits: their lag is what it left behind.
    assert groups[0]["total_lag"] > 0
    assert groups[0]["total_lag"] == sum(r["end"] - r["committed"] for r in groups[0]["partitions"])

    artifacts = _artifacts()
    with Chromium(chromium, log_path=artifacts / "chromium.log") as browser:
        page = await browser.open(url)
        try:
            # The DOM as the browser built it: three brokers up with racks, the controller
            # marked, three healthy partitions with three replicas' offsets on the leader.
            brokers = await page.evaluate("""JSON.stringify([...document.querySelectorAll('tr.broker')].map(r => ({
                id: r.dataset.brokerId, alive: r.dataset.alive, text: r.innerText})))""")
            brokers = json.loads(brokers)
            assert [b["id"] for b in brokers] == ["1", "2", "3"]
            assert all(b["alive"] == "true" for b in brokers)
            assert [b["text"].split("\t")[2] for b in brokers] == ["a", "b", "c"]
            assert "controller" in brokers[ctrl - 1]["text"]
            statuses = await page.evaluate(
                "JSON.stringify([...document.querySelectorAll('tr.partition')].map(r => [r.dataset.topic, r.dataset.status]))")
            assert [s for s in json.loads(statuses) if s[0] == TOPIC] == [[TOPIC, "ok"]] * 3
            assert await page.evaluate("document.querySelectorAll('tr.partition[data-topic=orders] .offsets').length") >= 3
            # Refreshed by its script: the rates get measured (two samples).
            await _until(page, "document.querySelector('#rates table') !== null", 15, "the rates")
            assert "produce requests" in await page.evaluate("document.querySelector('#rates').innerText")
            await page.screenshot(artifacts / "healthy.png")

            killed_at = time.monotonic()
            c.kill(victim, "KILL")
            await _until(page, f"document.querySelector('tr.broker[data-broker-id=\"{victim}\"]').dataset.alive === 'false'",
                         DOWN_SHOWN_WITHIN_S, f"broker {victim} down")
            await _until(page, "[...document.querySelectorAll('tr.partition[data-topic=orders]')]"
                               ".every(r => r.dataset.status === 'under_replicated' && r.classList.contains('under-replicated'))",
                         DOWN_SHOWN_WITHIN_S - (time.monotonic() - killed_at), "every orders partition under-replicated")
            shown_s = time.monotonic() - killed_at
            print(f"status page showed broker {victim} down and its partitions under-replicated {shown_s:.1f} s after kill -9 "
                  f"(session timeout {SESSION_TIMEOUT_S:.0f} s)")
            # orders, and the __consumer_offsets partitions it had replicas of
            assert int(await page.evaluate("document.getElementById('under-replicated-count').innerText")) >= 3
            victim_row = await page.evaluate(f"document.querySelector('tr.broker[data-broker-id=\"{victim}\"]').innerText")
            assert "down" in victim_row and ["a", "b", "c"][victim - 1] in victim_row
            await page.screenshot(artifacts / "broker-killed.png")
            # Everything the page loaded came from this broker; nothing was refused or thrown.
            origin = f"http://127.0.0.1:{viewer['admin_port']}/"
            assert page.requested_urls and all(u.startswith(origin) or u.startswith("data:") for u in page.requested_urls), page.requested_urls
            assert not [m for m in page.console if "error" in m.lower() or "exception" in m.lower()], page.console
        finally:
            await page.close()
    assert (artifacts / "healthy.png").stat().st_size > 10_000
    assert (artifacts / "broker-killed.png").stat().st_size > 10_000
