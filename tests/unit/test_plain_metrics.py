"""The plain counters and histograms export what prometheus_client's would have."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from kafkalite.broker.metrics import LATENCY_BUCKETS_S, BrokerMetrics
from kafkalite.broker.plain_metrics import PlainCounter, PlainHistogram, PlainMetricsCollector


def _exposition(registry: CollectorRegistry) -> list[str]:
    """Sample lines, without the _created series prometheus_client adds (the plain families
    have none) and in a stable order."""
    return sorted(line for line in generate_latest(registry).decode().splitlines()
                  if line and not line.startswith("#") and "_created" not in line)


def _plain_registry(*families) -> CollectorRegistry:
    r = CollectorRegistry()
    r.register(PlainMetricsCollector(families))
    return r


# Values on, just under and just over the bounds, far past the last one, zero and below.
_edges = [b for bound in LATENCY_BUCKETS_S for b in (bound, bound * 0.999, bound * 1.001)] + [0.0, -1.0, 1e9]
observation = st.one_of(st.sampled_from(_edges), st.floats(min_value=-1, max_value=100, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Produce", "Fetch", "Metadata"]), observation), max_size=60))
def test_a_histogram_exports_the_buckets_count_and_sum_prometheus_client_would(observations):
    theirs = CollectorRegistry()
    hist = Histogram("x_seconds", "doc", ["api"], buckets=LATENCY_BUCKETS_S, registry=theirs)
    ours = PlainHistogram("x_seconds", "doc", ["api"], buckets=LATENCY_BUCKETS_S)
    for api, value in observations:
        hist.labels(api).observe(value)
        ours.observe(api, value)
    assert _exposition(_plain_registry(ours)) == _exposition(theirs)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["leader", "follower"]),
                          st.integers(min_value=0, max_value=10**12)), max_size=40))
def test_a_counter_with_several_labels_exports_what_prometheus_client_would(increments):
    theirs = CollectorRegistry()
    counter = Counter("y_bytes", "doc", ["topic", "served_as"], registry=theirs)
    ours = PlainCounter("y_bytes", "doc", ["topic", "served_as"])
    for topic, served_as, n in increments:
        counter.labels(topic, served_as).inc(n)
        ours.inc((topic, served_as), n)
    assert _exposition(_plain_registry(ours)) == _exposition(theirs)


def test_families_without_labels_and_children_exported_before_their_first_update():
    theirs = CollectorRegistry()
    Histogram("t_seconds", "doc", buckets=(0.1, 1.0), registry=theirs)
    Counter("c", "doc", ["api"], registry=theirs).labels("PRODUCE")
    hist = PlainHistogram("t_seconds", "doc", buckets=(0.1, 1.0))
    hist.touch()
    counter = PlainCounter("c", "doc", ["api"])
    counter.touch("PRODUCE")
    assert _exposition(_plain_registry(hist, counter)) == _exposition(theirs)
    hist.observe((), 0.5)
    counter.inc("PRODUCE")
    text = _exposition(_plain_registry(hist, counter))
    assert 't_seconds_bucket{le="0.1"} 0.0' in text and 't_seconds_bucket{le="1.0"} 1.0' in text
    assert 'c_total{api="PRODUCE"} 1.0' in text


def test_a_counter_never_goes_down_and_a_key_must_match_the_labels_where_it_is_used():
    counter = PlainCounter("c", "doc", ["topic", "served_as"])
    with pytest.raises(AssertionError):
        counter.inc(("t", "leader"), -1)
    for bad in ("t", ("t",), ("t", 2), ()):  # one value where two labels are declared, a number, none
        with pytest.raises(AssertionError):
            counter.inc(bad, 1)
        with pytest.raises(AssertionError):
            counter.touch(bad)
    hist = PlainHistogram("h", "doc", ["api"], buckets=(1.0,))
    for bad in (("PRODUCE",), 3, ()):
        with pytest.raises(AssertionError):
            hist.observe(bad, 0.5)
    assert counter.values == {} and hist.children == {}  # nothing kept that would break a scrape
    with pytest.raises(AssertionError):
        PlainHistogram("h", "doc", buckets=(1.0, 0.5))  # bounds out of order


def test_the_registry_knows_the_plain_families_by_name():
    from prometheus_client.registry import RestrictedRegistry

    metrics = BrokerMetrics()
    metrics.request("PRODUCE")
    with pytest.raises(ValueError, match="Duplicated"):  # a name registered twice is refused, as for any metric
        metrics.registry.register(PlainMetricsCollector([PlainCounter("kafkalite_requests", "again", ["api"])]))
    restricted = generate_latest(RestrictedRegistry(["kafkalite_requests_total"], metrics.registry)).decode()
    assert 'kafkalite_requests_total{api="PRODUCE"} 1.0' in restricted
    assert "kafkalite_messages_in" not in restricted


def test_the_broker_exports_its_request_path_metrics_under_their_old_names():
    metrics = BrokerMetrics()
    metrics.request("PRODUCE")
    metrics.request_latency("Produce", 0.002)
    metrics.request_total("PRODUCE", 0.003)
    metrics.messages_in("t", 3, 300)
    metrics.fetch_bytes_served("t", "replication", 100)
    metrics.fetch_bytes_served("t", "follower", 50, "same_rack")
    metrics.preferred_read_replica_redirect("t")
    metrics.replication_catch_up(2, 0.001)
    metrics.replica_fetch_turnaround.observe((), 0.0002)
    text = _exposition(metrics.registry)
    for line in ('kafkalite_requests_total{api="PRODUCE"} 1.0', 'kafkalite_requests_total{api="FETCH"} 0.0',
                 'kafkalite_request_latency_seconds_count{api="Produce"} 1.0', 'kafkalite_request_latency_seconds_count{api="Fetch"} 0.0',
                 'kafkalite_request_total_seconds_sum{api="PRODUCE"} 0.003', 'kafkalite_messages_in_total{topic="t"} 3.0',
                 'kafkalite_bytes_in_total{topic="t"} 300.0', 'kafkalite_replica_fetch_bytes_total{topic="t"} 100.0',
                 'kafkalite_consumer_fetch_bytes_total{locality="same_rack",served_as="follower",topic="t"} 50.0',
                 'kafkalite_preferred_read_replica_redirects_total{topic="t"} 1.0',
                 'kafkalite_replication_catch_up_seconds_count{follower="2"} 1.0',
                 'kafkalite_replica_fetch_turnaround_seconds_bucket{le="0.00025"} 1.0'):
        assert line in text, line
