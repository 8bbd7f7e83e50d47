"""The provisioned Grafana dashboard queries only metrics a broker exports.

Grafana is not run by any test (no package of it here: not in Debian, not on PyPI), so this
is what proves the dashboard: every kafkalite_* name in its queries is a sample name of the
broker's metrics registry (the counters and histograms of BrokerMetrics and the gauges its
state collector computes at scrape time). tests/compose checks the same against a live
broker's /metrics and has Prometheus evaluate every query.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from prometheus_client import generate_latest

from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.testing.dashboard_metrics import dashboard_exprs, exported_names, metric_names, missing_from

DASHBOARD = Path(__file__).resolve().parents[2] / "docker" / "grafana" / "dashboards" / "kafkalite.json"


def _exposition() -> str:
    """/metrics of a broker with no partitions, a coordinator with no groups, no cleaner."""
    metrics = BrokerMetrics()
    broker = SimpleNamespace(
        replica_manager=SimpleNamespace(partitions={}, delayed=SimpleNamespace(produce_waiting=0, fetch_waiting=0),
                                        min_isr=lambda _topic: 1),
        controller=SimpleNamespace(active=False), client_listeners=[], log_cleaner=None,
        groups=SimpleNamespace(lags=lambda: [], core=SimpleNamespace(groups={})), metrics=metrics)
    metrics.attach(broker)
    return generate_latest(metrics.registry).decode()


def test_every_dashboard_query_names_only_metrics_the_broker_exports():
    exprs = dashboard_exprs(DASHBOARD)
    assert len(exprs) >= 8
    assert all(metric_names(e) for e in exprs), "a query without any kafkalite metric"
    assert missing_from(DASHBOARD, _exposition()) == {}


def test_a_misspelt_metric_is_caught():
    exported = exported_names(_exposition())
    assert "kafkalite_messages_in_total" in exported
    assert "kafkalite_request_latency_seconds_bucket" in exported
    assert "kafkalite_consumer_group_lag" in exported
    assert "kafkalite_messages_in" not in exported  # a counter is queried by its _total sample
    assert metric_names('sum(rate(kafkalite_mesages_in_total[1m])) by (instance)') - exported == {"kafkalite_mesages_in_total"}
