"""Compat-test diagnostics: when a test fails, print the tail of every broker log of the
clusters it started, so a client/broker disagreement can be read from the report alone
(the cluster directories live under pytest's rotating basetemp and are soon gone)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

LOG_TAIL_BYTES = 6000


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"compat_report_{report.when}", report)


@pytest.fixture
def cluster_factory(cluster_factory, request) -> Iterator[Callable]:
    """The shared fixture (kafkalite.testing.fixtures), remembering what it started."""
    made = []

    def make(*args, **kwargs):
        cluster = cluster_factory(*args, **kwargs)
        made.append(cluster)
        return cluster

    yield make
    report = getattr(request.node, "compat_report_call", None)
    if report is not None and report.failed:
        for cluster in made:
            for broker in cluster.state["brokers"]:
                print(f"==== broker {broker['id']} log tail ({broker['log']}) ====")
                print(_tail(broker["log"]))


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(f.tell() - LOG_TAIL_BYTES, 0))
            return f.read().decode(errors="replace")
    except OSError as e:
        return f"(cannot read: {e})"
