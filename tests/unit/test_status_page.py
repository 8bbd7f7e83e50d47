"""The status page's rendering (a pure function of a snapshot) and its rate meter."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest

from kafkalite.broker.metadata_cache import MetadataCache
from kafkalite.broker.status_page import (
    CONTENT_SECURITY_POLICY,
    PARTITION_ROWS_MAX,
    TOPIC_BLOCKS_MAX,
    human_bytes,
    render_body,
    render_page,
)
from kafkalite.broker.status_snapshot import (
    PARTITION_OFFLINE,
    PARTITION_OK,
    PARTITION_UNDER_REPLICATED,
    RateMeter,
    partition_status,
)
from kafkalite.core.messages import UpdateMetadata


def _snapshot(**changes) -> dict:
    snap = {
        "broker_id": 1, "cluster_id": "abc", "generated_ms": 1_700_000_000_000, "controller_id": 1, "controller_epoch": 4,
        "serving_clients": True,
        "brokers": [
            {"id": 1, "host": "127.0.0.1", "port": 9092, "admin_port": 9292, "rack": "a", "alive": True, "controller": True},
            {"id": 2, "host": "127.0.0.1", "port": 9093, "admin_port": 9293, "rack": "b", "alive": False, "controller": False},
            {"id": 3, "host": "127.0.0.1", "port": 9094, "admin_port": 9294, "rack": "c", "alive": True, "controller": False},
        ],
        "partitions": [
            {"topic": "orders", "partition": 0, "leader": 1, "leader_epoch": 3, "replicas": [1, 2, 3], "isr": [1, 3],
             "offline_replicas": [2], "status": PARTITION_UNDER_REPLICATED,
             "replica_offsets": {"1": {"hw": 10, "leo": 12, "lag": 0}, "3": {"hw": 10, "leo": 12, "lag": 0}}},
            {"topic": "orders", "partition": 1, "leader": 3, "leader_epoch": 1, "replicas": [3, 1], "isr": [3, 1],
             "offline_replicas": [], "status": PARTITION_OK, "replica_offsets": {"1": {"hw": 5, "leo": 5, "lag": None}}},
            {"topic": "<script>", "partition": 0, "leader": -1, "leader_epoch": 2, "replicas": [2], "isr": [2],
             "offline_replicas": [2], "status": PARTITION_OFFLINE, "replica_offsets": {}},
        ],
        "rates": {"produce_requests": 2.5, "fetch_requests": 10.0, "messages_in": 100.0, "bytes_in": 2048.0,
                  "consumer_fetch_bytes": 0.0, "replica_fetch_bytes": 4096.0},
        "reassignments": [{"topic": "orders", "partition": 1, "target": [3, 2], "replicas": [3, 1, 2], "isr": [3, 1]}],
        "reassignment_known": True,
        "groups": [{"group": "billing", "state": "Stable", "members": 2, "total_lag": 7,
                    "partitions": [{"topic": "orders", "partition": 0, "committed": 5, "end": 12, "lag": 7}]}],
    }
    snap.update(changes)
    return snap


class _Rows(HTMLParser):
    """Collects the attributes of every <tr> and every element with an id, and the URLs the
    page would load (src, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.ids: set[str] = set()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "tr":
            self.rows.append(a)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("src", "href"):
            if key in a:
                self.urls.append(a[key])


def _parse(html: str) -> _Rows:
    p = _Rows()
    p.feed(html)
    return p


def test_page_marks_dead_brokers_and_unhealthy_partitions():
    page = _parse(render_page(_snapshot()))
    brokers = {r["data-broker-id"]: r for r in page.rows if "data-broker-id" in r}
    assert brokers["2"]["data-alive"] == "false"
    assert "down" in brokers["2"]["class"].split()
    assert brokers["1"]["data-alive"] == "true"
    parts = {(r["data-topic"], r["data-partition"]): r for r in page.rows if "data-status" in r}
    assert "under-replicated" in parts[("orders", "0")]["class"].split()
    assert parts[("orders", "1")]["data-status"] == "ok"
    assert "offline" in parts[("<script>", "0")]["class"].split()
    assert {"summary", "rates", "brokers", "partitions", "reassignments", "groups", "refresh", "status"} <= page.ids


def test_page_escapes_names_and_loads_only_its_own_assets():
    html = render_page(_snapshot())
    assert "<script>" not in html.replace('<script src="/status.js" defer></script>', "")
    assert "&lt;script&gt;" in html
    urls = _parse(html).urls
    assert sorted(urls) == ["/status.css", "/status.js", "data:,"]
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY


def test_body_shows_offsets_rates_reassignments_and_group_lag():
    body = render_body(_snapshot())
    assert "HW 10 · LEO 12 · lag 0" in body
    assert re.search(r'id="under-replicated-count" class="bad">1<', body)
    assert re.search(r'id="offline-count" class="bad">1<', body)
    assert "2.0 KiB/s" in body and "4.0 KiB/s" in body
    assert "billing" in body and "committed 5, end 12, lag 7" in body
    assert "<td>3, 2</td>" in body  # the reassignment's target
    assert 'id="brokers-alive">2 of 3<' in body


def test_body_says_what_it_does_not_know():
    body = render_body(_snapshot(rates=None, reassignments=[], reassignment_known=False, groups=[], partitions=[]))
    assert "measuring" in body
    assert "ZooKeeper could not be read" in body
    assert "no topics" in body


def test_refresh_interval_is_bounded():
    assert 'data-refresh-ms="500"' in render_page(_snapshot(), 0.5)
    with pytest.raises(AssertionError):
        render_page(_snapshot(), 0.01)


def test_partition_status():
    assert partition_status(1, [1, 2], [1, 2], {1, 2}) == PARTITION_OK
    assert partition_status(1, [1], [1, 2], {1, 2}) == PARTITION_UNDER_REPLICATED
    assert partition_status(-1, [2], [2], {1}) == PARTITION_OFFLINE
    assert partition_status(2, [2], [2], {1}) == PARTITION_OFFLINE


def test_rate_meter_averages_over_its_window():
    meter = RateMeter(window_s=10, sample_s=1)
    assert meter.observe(0.0, {"x": 0}) is None
    assert meter.observe(0.5, {"x": 50}) is None  # too soon: no second sample yet
    assert meter.observe(2.0, {"x": 200}) == {"x": 100.0}
    for t in range(3, 30):
        rates = meter.observe(float(t), {"x": 200 + 10 * (t - 2)})
    assert rates == pytest.approx({"x": 10.0})  # the burst at the start left the window


def test_human_bytes():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(5 * 1024**3) == "5.0 GiB"


def test_metadata_cache_remembers_departed_brokers():
    cache = MetadataCache()

    def update(ids):
        return UpdateMetadata.from_wire({
            "controller_id": 1, "controller_epoch": 1, "full": True, "partitions": [], "deleted_topics": [],
            "brokers": [{"id": i, "host": "h", "port": 1, "inter_broker_port": 2, "admin_port": 3, "rack": f"r{i}", "epoch": 5}
                        for i in ids]})

    cache.apply_update(update([1, 2, 3]))
    cache.apply_update(update([1, 3]))
    assert set(cache.departed) == {2}
    assert cache.departed[2].rack == "r2"
    cache.apply_update(update([1, 2, 3]))
    assert cache.departed == {}


def test_metadata_lists_a_departed_broker_for_a_grace_period_but_never_as_a_leader():
    """Issue 13: a Metadata answer that moves a partition away from a dead broker and also
    drops that broker sends librdkafka's partition back to "no leader" for a second."""
    cache = MetadataCache()

    def update(ids, leader):
        return UpdateMetadata.from_wire({
            "controller_id": 1, "controller_epoch": 1, "full": True, "deleted_topics": [],
            "partitions": {"t": {0: [leader, 1, ids, [1, 2, 3], []]}},
            "brokers": [{"id": i, "host": "h", "port": 1, "inter_broker_port": 2, "admin_port": 3, "rack": None, "epoch": 5}
                        for i in ids]})

    cache.apply_update(update([1, 2, 3], 2))
    assert cache.mark_gone(2, 5)  # this broker's own watch found it gone
    t = time.monotonic()
    assert [b.id for b in cache.listed_brokers(5.0, t)] == [1, 2, 3] and not cache.alive(2)
    cache.apply_update(update([1, 3], 3))  # the controller's update: a new leader
    assert [b.id for b in cache.listed_brokers(5.0, t + 4.9)] == [1, 2, 3]
    assert [b.id for b in cache.listed_brokers(5.0, t + 5.1)] == [1, 3]
    cache.apply_update(update([1, 2, 3], 3))  # restarted
    assert cache.departed_at == {} and [b.id for b in cache.listed_brokers(5.0, t + 5.1)] == [1, 2, 3]


def test_internal_topics_start_folded_unless_unhealthy():
    healthy = {"topic": "__consumer_offsets", "partition": 0, "leader": 1, "leader_epoch": 1, "replicas": [1], "isr": [1],
               "offline_replicas": [], "status": PARTITION_OK, "replica_offsets": {}}
    body = render_body(_snapshot(partitions=[healthy]))
    assert 'id="topic-__consumer_offsets" data-topic="__consumer_offsets"><summary>' in body
    sick = dict(healthy, isr=[], status=PARTITION_OFFLINE, leader=-1)
    assert 'data-topic="__consumer_offsets" open>' in render_body(_snapshot(partitions=[sick]))
    assert 'data-topic="orders" open>' in render_body(_snapshot())


def _healthy(topic: str, partition: int) -> dict:
    return {"topic": topic, "partition": partition, "leader": 1, "leader_epoch": 1, "replicas": [1, 3], "isr": [1, 3],
            "offline_replicas": [], "status": PARTITION_OK, "under_min_isr": False,
            "replica_offsets": {"1": {"hw": 10**6, "leo": 10**6, "lag": 0}, "3": {"hw": 10**6, "leo": 10**6, "lag": 0}}}


def test_a_large_cluster_lists_problem_partitions_first_and_counts_the_healthy_ones_per_topic():
    """10,000 partitions made a 4.8 MB page that took 243 ms to render on the event loop
    each refresh; the page now lists at most PARTITION_ROWS_MAX, the sick ones first."""
    parts = [_healthy(f"topic-{i // 100:03d}", i % 100) for i in range(10_000)]
    # Problems at the end of the snapshot's order: listed anyway, offline first.
    parts[-1].update(status=PARTITION_UNDER_REPLICATED, isr=[1])
    parts[-2].update(status=PARTITION_UNDER_REPLICATED, isr=[1], under_min_isr=True)
    parts[-3].update(status=PARTITION_OFFLINE, leader=-1)
    html = render_page(_snapshot(partitions=parts))
    assert len(html) < 400_000
    page = _parse(html)
    rows = [r for r in page.rows if "data-status" in r]
    assert len(rows) == PARTITION_ROWS_MAX
    listed = {(r["data-topic"], r["data-partition"]): r for r in rows}
    assert listed[("topic-099", "97")]["data-status"] == PARTITION_OFFLINE
    assert "under-min-isr" in listed[("topic-099", "98")]["class"].split()
    assert listed[("topic-099", "99")]["data-status"] == PARTITION_UNDER_REPLICATED
    assert "partitions-folded" in page.ids
    assert "Listing 300 of 10,000 partitions" in html and "the other 9,700 are counted per topic" in html
    assert re.search(r'id="under-replicated-count" class="bad">2<', html)  # the counts are over all partitions
    assert re.search(r'id="offline-count" class="bad">1<', html)
    # Every topic keeps its block (its counts), with the partitions it does not list counted.
    assert html.count('<details class="topic"') == 100
    assert '<b>topic-099</b> <span class="muted">100 partitions × 2 replicas</span> <span class="pill bad">2 under-replicated, 1 offline</span>' in html
    assert 'data-folded="97">97 more partitions not listed<' in html  # topic-099: its 3 sick ones listed
    assert 'data-folded="100">100 partitions not listed<' in html  # a topic none of whose partitions is listed


def test_a_cluster_of_many_topics_shows_a_bounded_number_of_topic_blocks():
    parts = [_healthy(f"t{i:05d}", 0) for i in range(5_000)]
    parts[-1].update(status=PARTITION_OFFLINE, leader=-1)
    html = render_body(_snapshot(partitions=parts))
    assert html.count('<details class="topic"') == TOPIC_BLOCKS_MAX
    assert 'data-topic="t04999" data-partition="0" data-status="offline"' in html  # a listed one always has its block
    left = 5_000 - TOPIC_BLOCKS_MAX
    assert f'data-topics="{left}">and {left:,} more topics ({left:,} partitions, all healthy) not shown<' in html


def test_a_small_cluster_is_listed_whole_without_a_note():
    parts = [_healthy("orders", i) for i in range(PARTITION_ROWS_MAX)]
    page = _parse(render_body(_snapshot(partitions=parts)))
    assert len([r for r in page.rows if "data-status" in r]) == PARTITION_ROWS_MAX
    assert "partitions-folded" not in page.ids
