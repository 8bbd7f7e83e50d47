"""The status page's snapshot: the cluster as this broker sees it, as plain JSON data.

`collect_status` reads the broker (metadata cache, local replicas, controller, group
coordinator, metrics) and returns a dict that `kafkalite.broker.status_page` renders; it
does no I/O itself (the admin HTTP handler reads ZooKeeper for the reassignment in
progress and passes it in). `RateMeter` turns the metrics' counters into rates from
samples taken at the times it is given.

What a broker knows decides what the page can show: every partition's leader, epoch,
replicas and ISR (the controller's UpdateMetadata); the HW and LEO of its own replicas;
as a leader, each follower's LEO (its last fetch offset) and the HW last sent to it;
the consumer groups coordinated here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkalite.core.replica_types import UNKNOWN_OFFSET

if TYPE_CHECKING:
    from kafkalite.broker.metrics import BrokerMetrics
    from kafkalite.broker.server import Broker

# Rates are averaged over the samples of the last RATE_WINDOW_S seconds; a sample is kept
# at most every RATE_SAMPLE_S (several browsers refreshing add no samples).
RATE_WINDOW_S = 10.0
RATE_SAMPLE_S = 0.5
RATE_SAMPLES_MAX = int(RATE_WINDOW_S / RATE_SAMPLE_S) + 2

PARTITION_OK = "ok"
PARTITION_UNDER_REPLICATED = "under_replicated"
PARTITION_OFFLINE = "offline"


def metric_totals(metrics: BrokerMetrics) -> dict[str, float]:
    """The counters the page turns into rates, summed over their labels."""
    requests = _by_label(metrics.requests, "api")
    return {
        "produce_requests": requests.get("PRODUCE", 0.0),
        "fetch_requests": requests.get("FETCH", 0.0),
        "messages_in": _total(metrics.messages),
        "bytes_in": _total(metrics.bytes_in),
        "consumer_fetch_bytes": _total(metrics.consumer_fetch_bytes),
        "replica_fetch_bytes": _total(metrics.replica_fetch_bytes),
    }


def _total(counter: Any) -> float:
    return sum(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))


def _by_label(counter: Any, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in counter.collect():
        for s in m.samples:
            if s.name.endswith("_total"):
                out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out


@dataclass(frozen=True)
class _Sample:
    at_s: float
    totals: dict[str, float]


class RateMeter:
    """Per-second rates of monotonic totals over a sliding window; time is an argument."""

    def __init__(self, window_s: float = RATE_WINDOW_S, sample_s: float = RATE_SAMPLE_S):
        assert window_s > sample_s > 0
        self.window_s = window_s
        self.sample_s = sample_s
        self._samples: deque[_Sample] = deque(maxlen=int(window_s / sample_s) + 2)

    def observe(self, now_s: float, totals: dict[str, float]) -> dict[str, float] | None:
        """Record `totals` at `now_s` (unless a sample is fresher than `sample_s`) and return
        the rates over the window, or None until two samples are `sample_s` apart."""
        if not self._samples or now_s - self._samples[-1].at_s >= self.sample_s:
            self._samples.append(_Sample(now_s, dict(totals)))
        while len(self._samples) > 2 and now_s - self._samples[1].at_s >= self.window_s:
            self._samples.popleft()
        first, last = self._samples[0], self._samples[-1]
        span_s = last.at_s - first.at_s
        if span_s < self.sample_s:
            return None
        # A counter never goes down; a restarted registry (it cannot here) would read as 0.
        return {k: max(0.0, last.totals[k] - first.totals.get(k, 0.0)) / span_s for k in last.totals}


def partition_status(leader: int, isr: list[int], replicas: list[int], live: set[int]) -> str:
    """Offline: no live leader. Under-replicated: fewer in the ISR than assigned."""
    if leader < 0 or leader not in live:
        return PARTITION_OFFLINE
    if len(isr) < len(replicas):
        return PARTITION_UNDER_REPLICATED
    return PARTITION_OK


def _replica_offsets(part: Any, broker_id: int) -> dict[str, dict[str, int | None]]:
    """Replica id -> {"hw", "leo", "lag"} for what this broker knows: its own replica; as
    the leader, each follower's LEO (its last fetch offset) and the HW last sent to it."""
    state = part.state
    own_leo, own_hw = part.leo, part.hw
    out: dict[str, dict[str, int | None]] = {}
    if not part.is_leader:
        out[str(broker_id)] = {"hw": own_hw, "leo": own_leo, "lag": None}
        return out
    out[str(broker_id)] = {"hw": own_hw, "leo": own_leo, "lag": 0}
    for rid in state.replicas:
        if rid == broker_id:
            continue
        try:
            follower = state.follower_state(rid)
        except KeyError:  # not a follower of this epoch (yet)
            continue
        leo = None if follower.leo == UNKNOWN_OFFSET else follower.leo
        # A follower's HW is min(the HW it was sent, its LEO) (DESIGN.md section 5).
        hw = None if follower.last_sent_hw == UNKNOWN_OFFSET or leo is None else min(follower.last_sent_hw, leo)
        out[str(rid)] = {"hw": hw, "leo": leo, "lag": None if leo is None else max(0, own_leo - leo)}
    return out


def collect_status(broker: Broker, *, now_ms: int, rates: dict[str, float] | None,
                   reassignment: dict[tuple[str, int], list[int]] | None) -> dict[str, Any]:
    """The snapshot the status page renders (JSON-serialisable). `reassignment`: the
    partitions /admin/reassign_partitions asks to move and their target replicas (None if
    it could not be read)."""
    cache = broker.metadata_cache
    live = set(cache.brokers)
    brokers = []
    for info in list(cache.brokers.values()) + [b for i, b in cache.departed.items() if i not in live]:
        brokers.append({"id": info.id, "host": info.host, "port": info.port, "admin_port": info.admin_port, "rack": info.rack,
                        "alive": info.id in live, "controller": info.id == cache.controller_id})
    known = {b["id"] for b in brokers}
    for rid in sorted({r for parts in cache.topics.values() for m in parts.values() for r in m.replicas} - known):
        brokers.append({"id": rid, "host": None, "port": None, "admin_port": None, "rack": None, "alive": False, "controller": False})
    brokers.sort(key=lambda b: b["id"])

    local = broker.replica_manager.partitions
    partitions = []
    for topic, parts in sorted(cache.topics.items()):
        # A topic's own min.insync.replicas is known here only if this broker has replicas
        # of it (LeaderAndIsr carries it); otherwise the broker's default counts.
        min_isr = broker.replica_manager.min_isr(topic)
        for p, m in sorted(parts.items()):
            part = local.get((topic, p))
            partitions.append({
                "topic": topic, "partition": p, "leader": m.leader, "leader_epoch": m.leader_epoch,
                "replicas": list(m.replicas), "isr": list(m.isr), "offline_replicas": list(m.offline_replicas),
                "status": partition_status(m.leader, list(m.isr), list(m.replicas), live),
                "under_min_isr": len(m.isr) < min_isr,  # (as kafkalite_under_min_isr_partitions counts it)
                "replica_offsets": _replica_offsets(part, broker.broker_id) if part is not None else {},
            })

    reassignments = []
    for (topic, p), target in sorted((reassignment or {}).items()):
        meta = cache.partition(topic, p)
        reassignments.append({"topic": topic, "partition": p, "target": list(target),
                              "replicas": list(meta.replicas) if meta else [], "isr": list(meta.isr) if meta else []})

    groups = []
    coordinator = broker.groups
    if coordinator is not None:
        lags = {(g, tp): lag for g, tp, lag in coordinator.lags()}
        committed = coordinator.committed()
        for g in sorted(coordinator.core.groups.values(), key=lambda g: g.group_id):
            offsets = committed.get(g.group_id, {})
            rows = [{"topic": t, "partition": p, "committed": off, "end": coordinator.end_offsets.get((t, p)),
                     "lag": lags.get((g.group_id, (t, p)))} for (t, p), off in sorted(offsets.items())]
            known_lags = [r["lag"] for r in rows if r["lag"] is not None]
            groups.append({"group": g.group_id, "state": g.state.value, "members": len(g.members), "partitions": rows,
                           "total_lag": sum(known_lags) if known_lags else None})

    return {
        "broker_id": broker.broker_id, "cluster_id": broker.cluster_id, "generated_ms": now_ms,
        "controller_id": cache.controller_id, "controller_epoch": cache.controller_epoch,
        "serving_clients": broker.client_listener is not None and broker.client_listener.serving,
        "brokers": brokers, "partitions": partitions, "rates": rates, "reassignments": reassignments,
        "reassignment_known": reassignment is not None, "groups": groups,
    }
