"""Counters and histograms of the request path, kept as plain Python numbers and turned
into Prometheus metric families only when /metrics is scraped.

prometheus_client's Counter.inc and Histogram.observe take a lock, check the metric can
be observed and (a histogram) walk its buckets in Python, on every call. A produce request
made five such calls, a replica fetch three or more, and together they cost about 15 us of a
producer's ~90 us per record on one broker at 5,000 records/s (bench/README.md, "Eighteenth
look"). Here an increment is a dict update and an observation one `bisect` and two list
additions. Only the broker's event-loop thread updates these (the request path, the
fetchers, the replica manager) and reads them (the /metrics and status handlers), so no
lock is needed; metrics updated from other threads (a GC callback) stay prometheus_client's.

A family's children are keyed by their label values: the value itself for a one-label
family, a tuple of them for several, () for none. Children are never removed, as with the
prometheus_client metrics they replace.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString


def _label_values(key: Hashable, arity: int) -> list[str]:
    """The label values a child's key stands for; checked when the child is made, so a
    wrong key fails where it is used, not at every scrape after it."""
    if arity == 1:
        assert type(key) is str, key
        return [key]
    assert type(key) is tuple and len(key) == arity and all(type(v) is str for v in key), (key, arity)
    return list(key)


class PlainCounter:
    """A counter family: label values -> a total that only grows."""

    __slots__ = ("name", "doc", "labelnames", "values")

    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = ()):
        assert not name.endswith("_total"), "named without _total, as prometheus_client's Counter"
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self.values: dict[Hashable, float] = {}

    def inc(self, key: Hashable = (), amount: float = 1) -> None:
        assert amount >= 0, amount
        values = self.values
        total = values.get(key)
        if total is None:
            _label_values(key, len(self.labelnames))
            total = 0
        values[key] = total + amount

    def touch(self, key: Hashable = ()) -> None:
        """Export the child at 0 before its first increment."""
        if key not in self.values:
            _label_values(key, len(self.labelnames))
            self.values[key] = 0

    def collect(self) -> list[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for key, value in self.values.items():
            family.add_metric(_label_values(key, len(self.labelnames)), value)
        return [family]


class PlainHistogram:
    """A histogram family with Prometheus' cumulative `le` buckets. Each child is a list:
    the count of observations in each bucket (the last one past every bound, +Inf), then
    their sum."""

    __slots__ = ("name", "doc", "labelnames", "bounds", "children")

    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = (), *, buckets: Iterable[float]):
        bounds = tuple(float(b) for b in buckets)
        assert bounds and list(bounds) == sorted(set(bounds)) and bounds[-1] != float("inf"), bounds
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self.bounds = bounds
        self.children: dict[Hashable, list[float]] = {}

    def observe(self, key: Hashable, value: float) -> None:
        counts = self.children.get(key)
        if counts is None:
            counts = self.touch(key)
        counts[bisect_left(self.bounds, value)] += 1  # the first bound >= value: Prometheus' `le`
        counts[-1] += value

    def touch(self, key: Hashable = ()) -> list[float]:
        """The child of `key`, made (and exported, empty) if it was not there."""
        counts = self.children.get(key)
        if counts is None:
            _label_values(key, len(self.labelnames))
            counts = self.children[key] = [0] * (len(self.bounds) + 1) + [0.0]
        return counts

    def collect(self) -> list[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for key, counts in self.children.items():
            cumulative, buckets = 0.0, []
            for le, n in zip(les, counts):
                cumulative += n
                buckets.append((le, cumulative))
            family.add_metric(_label_values(key, len(self.labelnames)), buckets, sum_value=counts[-1])
        return [family]


class PlainMetricsCollector:
    """Registers a set of plain families with a prometheus_client registry. `describe`
    names them without their samples, as the registry asks (it refuses a name registered
    twice, and a registry restricted to some names serves only those)."""

    def __init__(self, families: Sequence[PlainCounter | PlainHistogram]):
        names = [f.name for f in families]
        assert len(names) == len(set(names)), names
        self.families = tuple(families)

    def describe(self):
        for family in self.families:
            kind = CounterMetricFamily if isinstance(family, PlainCounter) else HistogramMetricFamily
            yield kind(family.name, family.doc, labels=family.labelnames)

    def collect(self):
        for family in self.families:
            yield from family.collect()


__all__ = ["PlainCounter", "PlainHistogram", "PlainMetricsCollector"]
