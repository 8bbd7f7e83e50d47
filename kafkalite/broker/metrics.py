"""Prometheus metrics of one broker (served at /metrics by the admin HTTP listener).

Counters and histograms are updated where things happen; gauges that describe state
(under-replicated partitions, leader count, purgatory sizes, ...) are computed at scrape
time from the broker, so they can never drift from the truth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kafkalite.broker.plain_metrics import PlainCounter, PlainHistogram, PlainMetricsCollector
from kafkalite.broker.replication_timing import scheduler_seconds

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

EVENT_LOOP_PROBE_S = 0.01
LOOP_LAG_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
# Fine between 1 and 25 ms, where issue 13's small-batch targets lie (p99 10 ms, p999 25 ms):
# the broker's share of a produce's latency can be read against the client's there.
LATENCY_BUCKETS_S = (0.00025, 0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0065, 0.008, 0.01, 0.0125, 0.015,
                     0.02, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _StateCollector:
    def __init__(self, broker: Broker):
        self.broker = broker

    def collect(self):
        b = self.broker
        rm = b.replica_manager
        leaders = [p for p in rm.partitions.values() if p.is_leader]
        under = sum(1 for p in leaders if len(p.state.isr) < len(p.state.replicas))
        under_min = sum(1 for p in leaders if len(p.state.isr) < rm.min_isr(p.topic))
        yield _g("kafkalite_partitions", "partition replicas on this broker", len(rm.partitions))
        yield _g("kafkalite_leader_partitions", "partitions led by this broker", len(leaders))
        yield _g("kafkalite_under_replicated_partitions", "led partitions whose ISR is smaller than the replica set", under)
        yield _g("kafkalite_under_min_isr_partitions", "led partitions whose ISR is below min.insync.replicas", under_min)
        ctrl = b.controller
        offline = ctrl.describe()["offline_partitions"] if ctrl.active else 0
        yield _g("kafkalite_offline_partitions", "partitions without a live leader (controller only)", offline)
        yield _g("kafkalite_purgatory_produce_size", "acks=all produce requests waiting", rm.delayed.produce_waiting)
        yield _g("kafkalite_purgatory_fetch_size", "fetch requests waiting", rm.delayed.fetch_waiting)
        yield _g("kafkalite_client_connections", "open client connections", sum(c.connections for c in b.client_listeners))
        cleaner = b.log_cleaner
        yield _g("kafkalite_log_cleaner_busy", "cleaning passes running now", cleaner.busy if cleaner else 0)
        yield _g("kafkalite_log_cleaner_uncleanable_partitions", "compacted logs the cleaner skips after a pass failed on bad data",
                 len(cleaner.manager.uncleanable) if cleaner else 0)
        yield _g("kafkalite_log_cleaner_max_dirty_ratio", "dirty ratio of the log the cleaner chose last",
                 cleaner.manager.max_dirty_ratio if cleaner else 0)
        groups = b.groups
        if groups is not None:
            group_lag = GaugeMetricFamily("kafkalite_consumer_group_lag", "a consumer group's lag on a partition: the high "
                                          "watermark minus its committed offset (groups coordinated by this broker)",
                                          labels=["group", "topic", "partition"])
            for group, (t, p), v in groups.lags():
                group_lag.add_metric([group, t, str(p)], v)
            yield group_lag
            members = GaugeMetricFamily("kafkalite_consumer_group_members", "members of each consumer group coordinated by this broker",
                                        labels=["group", "state"])
            for g in groups.core.groups.values():
                members.add_metric([g.group_id, g.state.value], len(g.members))
            yield members
        lag = GaugeMetricFamily("kafkalite_replica_fetcher_lag", "follower lag behind the leader's LEO, in messages", labels=["topic", "partition"])
        for (t, p), v in sorted(b.metrics.lags.items()):
            lag.add_metric([t, str(p)], v)
        yield lag
        sched = scheduler_seconds()
        if sched is not None:
            run_s, wait_s = sched
            yield CounterMetricFamily("kafkalite_event_loop_thread_cpu_seconds", "time the event-loop thread ran on a CPU", value=run_s)
            yield CounterMetricFamily("kafkalite_event_loop_thread_cpu_wait_seconds", "time the event-loop thread was runnable but "
                                      "waited for a CPU (other processes held both): the scheduler's share of every delay", value=wait_s)


def _g(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.active_controller = Gauge("kafkalite_active_controller", "1 on the active controller", registry=r)
        self.offline_log_dirs = Gauge("kafkalite_offline_log_dirs", "log dirs of this broker that failed (KIP-112)", registry=r)
        self.unclean_elections = Counter("kafkalite_unclean_leader_elections", "leaders elected outside the ISR", registry=r)
        self.isr_shrinks = Counter("kafkalite_isr_shrinks", "ISR shrinks accepted by the controller", registry=r)
        self.isr_expands = Counter("kafkalite_isr_expands", "ISR expansions accepted by the controller", registry=r)
        # Updated per request or per replica fetch: plain numbers (kafkalite.broker.plain_metrics).
        self.requests = PlainCounter("kafkalite_requests", "client requests by API", ["api"])
        self.latency = PlainHistogram("kafkalite_request_latency_seconds", "request latency by API", ["api"], buckets=LATENCY_BUCKETS_S)
        # Kafka's TotalTimeMs: from the whole request read off the socket to its response
        # handed to the socket; above `latency` it adds waiting for the handler to start,
        # for earlier responses on the connection (answered in order) and for the write.
        self.total_time = PlainHistogram("kafkalite_request_total_seconds", "request read to response written, by API",
                                         ["api"], buckets=LATENCY_BUCKETS_S)
        self.event_loop_lag = Histogram("kafkalite_event_loop_lag_seconds", "how late the event loop ran a timer due now "
                                        f"(sampled every {EVENT_LOOP_PROBE_S * 1000:.0f} ms): time no other task could run",
                                        buckets=LOOP_LAG_BUCKETS_S, registry=r)
        self.gc_pause = Histogram("kafkalite_gc_pause_seconds", "garbage collections of this process by generation: "
                                  "the event loop stands still meanwhile", ["generation"], buckets=LOOP_LAG_BUCKETS_S, registry=r)
        # The acks=all round trip in parts (issue 13, item 2): on a leader, from appending a
        # batch to the first fetch of each follower that shows it holds it; on a follower,
        # from a ReplicaFetch answer with records to its next ReplicaFetch sent (the append
        # and its own event loop in between).
        self.replication_catch_up_time = PlainHistogram("kafkalite_replication_catch_up_seconds", "leader: a batch appended -> the "
                                                        "follower's fetch that shows it holds it, by follower", ["follower"],
                                                        buckets=LATENCY_BUCKETS_S)
        self.replica_fetch_turnaround = PlainHistogram("kafkalite_replica_fetch_turnaround_seconds", "follower: a ReplicaFetch "
                                                       "answer with records received -> the next ReplicaFetch sent",
                                                       buckets=LATENCY_BUCKETS_S)
        self.replica_fetch_turnaround.touch()
        self.messages = PlainCounter("kafkalite_messages_in", "records appended as leader", ["topic"])
        self.bytes_in = PlainCounter("kafkalite_bytes_in", "bytes appended as leader", ["topic"])
        self.alter_isr_sent = Counter("kafkalite_alter_isr_requests", "AlterIsr requests sent", registry=r)
        # Fetch bytes this broker served, so one can tell which broker served a consumer
        # (KIP-392). Labels: topic; for consumers, whether this broker led the partition or
        # served as a follower, and whether the client's rack (Fetch v11 rack_id) is this
        # broker's: same_rack, other_rack, or unknown (either has none). Cardinality stays
        # at topics x 6, whatever the partitions, clients or rack names.
        self.consumer_fetch_bytes = PlainCounter("kafkalite_consumer_fetch_bytes", "record bytes served to consumers, by topic, "
                                                 "by this broker's role (leader, follower) and by the client's rack (same_rack, "
                                                 "other_rack, unknown)", ["topic", "served_as", "locality"])
        self.replica_fetch_bytes = PlainCounter("kafkalite_replica_fetch_bytes", "record bytes served to follower replicas "
                                                "(replication)", ["topic"])
        self.preferred_read_replica_redirects = PlainCounter("kafkalite_preferred_read_replica_redirects", "consumer fetches this "
                                                             "leader answered with a preferred read replica instead of records",
                                                             ["topic"])
        r.register(PlainMetricsCollector([self.requests, self.latency, self.total_time, self.replication_catch_up_time,
                                          self.replica_fetch_turnaround, self.messages, self.bytes_in, self.consumer_fetch_bytes,
                                          self.replica_fetch_bytes, self.preferred_read_replica_redirects]))
        # The log cleaner (kafkalite.broker.log_cleaner): passes by outcome (swapped: its
        # segments replaced the old ones; discarded: the log changed meanwhile; failed),
        # bytes it read and wrote, records it removed (superseded by a later record of the
        # same key, or tombstones past delete.retention.ms).
        self.cleaner_passes = Counter("kafkalite_log_cleaner_passes", "log cleaner passes by outcome", ["outcome"], registry=r)
        self.cleaner_bytes_read = Counter("kafkalite_log_cleaner_bytes_read", "bytes the log cleaner read", registry=r)
        self.cleaner_bytes_written = Counter("kafkalite_log_cleaner_bytes_written", "bytes the log cleaner wrote", registry=r)
        self.cleaner_records_removed = Counter("kafkalite_log_cleaner_records_removed", "records the log cleaner removed",
                                               ["reason"], registry=r)
        self.cleaner_pass_seconds = Histogram("kafkalite_log_cleaner_pass_seconds", "duration of log cleaner passes", registry=r,
                                              buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800))
        for outcome in ("swapped", "discarded", "failed"):
            self.cleaner_passes.labels(outcome)
        self.lags: dict[tuple[str, int], int] = {}
        for api in ("Produce", "Fetch"):  # exported from the start, as Kafka's request metrics are
            self.latency.touch(api)
        for api in ("PRODUCE", "FETCH", "METADATA"):
            self.requests.touch(api)

    def attach(self, broker: Broker) -> None:
        self.registry.register(_StateCollector(broker))

    def request(self, api: str) -> None:
        self.requests.inc(api)

    def request_total(self, api: str, seconds: float) -> None:
        self.total_time.observe(api, seconds)

    def request_latency(self, api: str, seconds: float) -> None:
        self.latency.observe(api, seconds)

    def replication_catch_up(self, follower: int, seconds: float) -> None:
        self.replication_catch_up_time.observe(str(follower), seconds)

    def messages_in(self, topic: str, count: int, size: int) -> None:
        self.messages.inc(topic, count)
        self.bytes_in.inc(topic, size)

    def fetch_bytes_served(self, topic: str, served_as: str, size: int, locality: str = "unknown") -> None:
        """`served_as`: "leader" or "follower" for a consumer (`locality`: same_rack,
        other_rack or unknown), "replication" for a follower."""
        if served_as == "replication":
            self.replica_fetch_bytes.inc(topic, size)
        else:
            assert served_as in ("leader", "follower")
            assert locality in ("same_rack", "other_rack", "unknown")
            self.consumer_fetch_bytes.inc((topic, served_as, locality), size)

    def preferred_read_replica_redirect(self, topic: str) -> None:
        self.preferred_read_replica_redirects.inc(topic)

    def cleaner_pass(self, outcome: str, seconds: float, stats: Any = None) -> None:
        """One log cleaner pass; `stats` is its CleanerStats (None if it failed)."""
        self.cleaner_passes.labels(outcome).inc()
        self.cleaner_pass_seconds.observe(seconds)
        if stats is not None:
            self.cleaner_bytes_read.inc(stats.bytes_read)
            self.cleaner_bytes_written.inc(stats.bytes_written)
            self.cleaner_records_removed.labels("superseded").inc(stats.records_superseded)
            self.cleaner_records_removed.labels("tombstone_expired").inc(stats.tombstones_removed)

    def replica_lag(self, tp: tuple[str, int], lag: int) -> None:
        self.lags[tp] = lag

    def isr_change(self, delta: int) -> None:
        (self.isr_expands if delta > 0 else self.isr_shrinks).inc()

    def partitions_changed(self, rm: Any) -> None:
        for tp in [tp for tp in self.lags if tp not in rm.partitions or rm.partitions[tp].is_leader]:
            del self.lags[tp]
