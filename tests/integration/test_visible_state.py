"""What operators see: Prometheus metrics, automatic preferred-leader rebalancing."""

from __future__ import annotations

import re

from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.probes import metrics_text, partition_view, wait_until


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    assert m is not None, f"{name} not exported"
    return float(m.group(1))


def test_metrics_follow_isr_shrink_and_expand_and_the_controller(cluster):
    boot = cluster.status()["bootstrap"]
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic("watched", num_partitions=3, replication_factor=3)]).values():
        f.result(timeout=30)
    ctrl = cluster.status()["controller"]
    texts = {b["id"]: metrics_text(b["admin_port"]) for b in cluster.status()["brokers"]}
    assert [_metric(texts[b], "kafkalite_active_controller") for b in (1, 2, 3)].count(1.0) == 1
    assert _metric(texts[ctrl], "kafkalite_active_controller") == 1.0
    assert sum(_metric(t, "kafkalite_partitions") for t in texts.values()) == 9
    assert sum(_metric(t, "kafkalite_leader_partitions") for t in texts.values()) == 3
    for name in ("kafkalite_under_replicated_partitions", "kafkalite_offline_partitions", "kafkalite_unclean_leader_elections_total",
                 "kafkalite_purgatory_produce_size", "kafkalite_purgatory_fetch_size"):
        _metric(texts[ctrl], name)
    assert "kafkalite_request_latency_seconds_bucket" in texts[ctrl]
    assert "kafkalite_requests_total" in texts[ctrl]
    # A follower dies: the leaders shrink their ISRs (under-replicated > 0, shrinks counted).
    victim = next(b for b in (1, 2, 3) if b != ctrl)
    cluster.kill(victim, "KILL")
    others = [b for b in (1, 2, 3) if b != victim]
    wait_until(lambda: sum(_metric(metrics_text(cluster.broker(b)["admin_port"]), "kafkalite_under_replicated_partitions") for b in others) == 3,
               30, "three under-replicated partitions")
    cluster.start(victim)
    wait_until(lambda: all(len(partition_view(cluster, "watched", p)["isr"]) == 3 for p in range(3)), 60, "ISRs whole again")
    wait_until(lambda: sum(_metric(metrics_text(cluster.broker(b)["admin_port"]), "kafkalite_isr_expands_total") for b in (1, 2, 3)) >= 1,
               30, "ISR expansions counted")
    assert sum(_metric(metrics_text(cluster.broker(b)["admin_port"]), "kafkalite_under_replicated_partitions") for b in (1, 2, 3)) == 0


def test_auto_leader_rebalance_moves_leadership_back_to_preferred_replicas(cluster_factory):
    c = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": 1,
                                      "leader.imbalance.per.broker.percentage": 0})
    boot = c.status()["bootstrap"]
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic("balanced", num_partitions=3, replication_factor=3)]).values():
        f.result(timeout=30)
    preferred = {p: partition_view(c, "balanced", p)["replicas"][0] for p in range(3)}
    assert sorted(preferred.values()) == [1, 2, 3]
    victim = preferred[0]
    c.stop_broker(victim)  # controlled shutdown moves its leadership away
    wait_until(lambda: partition_view(c, "balanced", 0)["leader"] not in (-1, victim), 30, "leadership moved away")
    c.start(victim)
    # No elect-leaders call: the controller's periodic check moves it back.
    wait_until(lambda: all(partition_view(c, "balanced", p)["leader"] == preferred[p] for p in range(3)), 60,
               "preferred leaders restored automatically")
