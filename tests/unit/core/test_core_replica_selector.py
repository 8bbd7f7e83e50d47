"""The replica selectors of KIP-392 (kafkalite.core.replica_selector): the leader-only
default and the rack-aware one, as Kafka's RackAwareReplicaSelector chooses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kafkalite.core.replica_selector import (
    BUILTIN_SELECTORS,
    ClientMetadata,
    LeaderSelector,
    PartitionView,
    RackAwareReplicaSelector,
    ReplicaSelector,
    ReplicaView,
    most_caught_up,
)
from kafkalite.testing.replica_selectors import PinnedReplicaSelector

TP = ("t", 0)


def client(rack: str = "", client_id: str = "c") -> ClientMetadata:
    return ClientMetadata(rack_id=rack, client_id=client_id, client_address="127.0.0.1")


def view(*replicas: ReplicaView, leader: int = 1) -> PartitionView:
    ordered = tuple(sorted(replicas, key=lambda r: r.broker_id))
    return PartitionView(ordered, next(r for r in ordered if r.broker_id == leader))


LEADER_A = ReplicaView(1, "a", 100, 0)
B_BEHIND = ReplicaView(2, "b", 90, 10)
B_AHEAD = ReplicaView(4, "b", 95, 500)
C = ReplicaView(3, "c", 100, 0)


def test_leader_selector_always_names_the_leader():
    v = view(LEADER_A, B_BEHIND, C)
    assert LeaderSelector().select(TP, client("b"), v) == LEADER_A


def test_rack_aware_without_a_client_rack_or_a_replica_in_it_names_the_leader():
    v = view(LEADER_A, B_BEHIND, C)
    selector = RackAwareReplicaSelector()
    assert selector.select(TP, client(""), v) == LEADER_A
    assert selector.select(TP, client("z"), v) == LEADER_A


def test_rack_aware_prefers_the_leader_in_the_clients_rack():
    v = view(LEADER_A, ReplicaView(2, "a", 100, 0), C)
    assert RackAwareReplicaSelector().select(TP, client("a"), v) == LEADER_A


def test_rack_aware_chooses_the_most_caught_up_replica_of_the_clients_rack():
    v = view(LEADER_A, B_BEHIND, B_AHEAD, C)
    assert RackAwareReplicaSelector().select(TP, client("b"), v) == B_AHEAD
    assert RackAwareReplicaSelector().select(TP, client("c"), v) == C


def test_most_caught_up_breaks_ties_by_recency_then_lowest_broker_id():
    recent, stale = ReplicaView(5, "b", 90, 5), ReplicaView(2, "b", 90, 50)
    assert most_caught_up([stale, recent]) == recent
    twin_a, twin_b = ReplicaView(7, "b", 90, 5), ReplicaView(6, "b", 90, 5)
    assert most_caught_up([twin_a, twin_b]) == twin_b


def test_builtins_and_the_test_plug_in_fit_the_interface():
    for selector in (LeaderSelector(), RackAwareReplicaSelector(), PinnedReplicaSelector()):
        assert isinstance(selector, ReplicaSelector)
    assert BUILTIN_SELECTORS["org.apache.kafka.common.replica.RackAwareReplicaSelector"] is RackAwareReplicaSelector


def test_the_pinned_test_selector_follows_the_client_id():
    selector = PinnedReplicaSelector()
    selector.configure({"broker.id": 1})
    v = view(LEADER_A, B_BEHIND, C)
    assert selector.select(TP, client("b", "reader@3"), v) == C
    assert selector.select(TP, client("b", "reader@9"), v) == LEADER_A  # not in the view
    assert selector.select(TP, client("b", "reader"), v) == LEADER_A


racks = st.sampled_from(["a", "b", "c", None])


@st.composite
def views(draw) -> PartitionView:
    ids = draw(st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True))
    replicas = [ReplicaView(i, draw(racks), draw(st.integers(0, 50)), draw(st.integers(0, 1000))) for i in sorted(ids)]
    leader = draw(st.sampled_from(replicas))
    return PartitionView(tuple(replicas), leader)


@given(views(), st.sampled_from(["", "a", "b", "c"]))
def test_rack_aware_choice_is_the_leader_or_the_best_replica_of_the_clients_rack(v, rack):
    chosen = RackAwareReplicaSelector().select(TP, client(rack), v)
    assert chosen in v.replicas
    same_rack = [r for r in v.replicas if rack and r.rack == rack]
    if not same_rack or v.leader in same_rack:
        assert chosen == v.leader
    else:
        assert chosen.rack == rack
        best = (chosen.log_end_offset, -chosen.time_since_last_caught_up_ms)
        assert all((r.log_end_offset, -r.time_since_last_caught_up_ms) <= best for r in same_rack)
