"""Which metrics a Grafana dashboard queries, and whether a broker exports them.

Grafana itself is not in Debian nor on PyPI, so tests/compose cannot run it; what can be
checked without it is that every query of docker/grafana/dashboards/*.json names metrics
the brokers really export (tests/unit against the metrics module, tests/compose against a
live broker's /metrics, and there Prometheus also evaluates each query).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

METRIC_NAME = re.compile(r"\b(kafkalite_[A-Za-z0-9_]+)")
# The sample names a metric family of each type shows in PromQL (prometheus_client names a
# counter's family without its _total suffix).
_SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "unknown": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
}


def dashboard_exprs(path: str | Path) -> list[str]:
    """Every PromQL `expr` of the dashboard's panel targets (rows' nested panels too)."""
    exprs: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(json.loads(Path(path).read_text())["panels"])
    return exprs


def metric_names(expr: str) -> set[str]:
    """The kafkalite_* metric names in one PromQL expression."""
    return set(METRIC_NAME.findall(expr))


def exported_names(exposition: str) -> set[str]:
    """Every sample name a /metrics text can show, including metrics with no samples yet
    (a labelled counter no one has incremented still has its HELP and TYPE lines)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.update(family.name + suffix for suffix in _SAMPLE_SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def missing_from(dashboard: str | Path, exposition: str) -> dict[str, set[str]]:
    """expr -> the metric names it uses that the exposition lacks (empty: all exported)."""
    exported = exported_names(exposition)
    return {e: missing for e in dashboard_exprs(dashboard) if (missing := metric_names(e) - exported)}
