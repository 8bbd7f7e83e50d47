"""Placement for `kafkalite reassign generate` (core.placement.reassign_replicas): fewest
replicas moved, rack spread, balance; Hypothesis properties plus the named scenarios
(decommission a broker, grow the cluster by one)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kafkalite.core.codes import InvalidReplicaAssignmentError, InvalidReplicationFactorError
from kafkalite.core.placement import assign_replicas, reassign_replicas


@st.composite
def scenario(draw, racks: bool = False, equal_racks: bool = False):
    """A current placement over some brokers, and the brokers allowed by the plan (which
    may add new brokers and drop old ones)."""
    old = draw(st.lists(st.integers(1, 12), min_size=1, max_size=7, unique=True))
    allowed = draw(st.lists(st.integers(1, 12), min_size=1, max_size=8, unique=True))
    rf = draw(st.integers(1, min(len(old), len(allowed))))
    topics = draw(st.integers(1, 3))
    current = {}
    for t in range(topics):
        partitions = draw(st.integers(1, 12))
        placed = assign_replicas(partitions, rf, old, None, draw(st.integers(0, 20)), draw(st.integers(0, 20)))
        for p, replicas in placed.items():
            current[(f"t{t}", p)] = replicas
    rack_of = {}
    if racks:
        every = sorted(set(old) | set(allowed))
        if equal_racks:
            count = draw(st.integers(1, 4))
            order = draw(st.permutations(every))
            rack_of = {b: f"r{i % count}" for i, b in enumerate(order)}
        else:
            count = draw(st.integers(1, 4))
            rack_of = {b: f"r{draw(st.integers(0, count - 1))}" for b in every}
    return current, allowed, rack_of


def _moved(current, proposed) -> int:
    return sum(len(set(current[k]) - set(proposed[k])) for k in current)


def _spread_target(replicas, allowed, rack_of) -> int:
    if rack_of and all(b in rack_of for b in allowed):
        return min(len(replicas), len({rack_of[b] for b in allowed}))
    return len(replicas)


def _spread(replicas, rack_of) -> int:
    return len({rack_of[b] for b in replicas}) if rack_of else len(set(replicas))


def _loads(proposed, allowed) -> list[int]:
    counts = Counter(b for replicas in proposed.values() for b in replicas)
    return [counts.get(b, 0) for b in allowed]


@settings(max_examples=300, deadline=None)
@given(scenario(racks=True), st.booleans())
def test_plan_keeps_rf_uses_only_allowed_brokers_without_duplicates_and_spreads_racks_maximally(params, rebalance):
    current, allowed, rack_of = params
    proposed = reassign_replicas(current, allowed, rack_of, rebalance=rebalance)
    assert set(proposed) == set(current)
    for k, replicas in proposed.items():
        assert len(replicas) == len(current[k])
        assert len(set(replicas)) == len(replicas)
        assert set(replicas) <= set(allowed)
        assert _spread(replicas, rack_of) == _spread_target(replicas, allowed, rack_of)


@settings(max_examples=300, deadline=None)
@given(scenario(racks=True))
def test_plan_moves_exactly_the_replicas_that_must_move(params):
    """A replica moves only if its broker is not allowed, or it duplicates a rack beyond
    what RF minus the rack target leaves room for: an independent count of the minimum."""
    current, allowed, rack_of = params
    proposed = reassign_replicas(current, allowed, rack_of)
    rack_aware = all(b in rack_of for b in allowed)
    for k, replicas in current.items():
        valid = [b for b in replicas if b in allowed]
        racks = {rack_of[b] for b in valid} if rack_aware else set(valid)
        slack = len(replicas) - _spread_target(replicas, allowed, rack_of)
        must_keep_at_most = min(len(valid), len(racks) + slack)
        assert len(set(replicas) - set(proposed[k])) == len(replicas) - must_keep_at_most, (k, replicas, proposed[k])


@settings(max_examples=300, deadline=None)
@given(scenario(racks=True))
def test_a_placement_already_on_allowed_brokers_and_rack_valid_does_not_move(params):
    current, allowed, rack_of = params
    allowed = sorted(set(allowed) | {b for replicas in current.values() for b in replicas})
    assume(all(_spread(r, rack_of) == _spread_target(r, allowed, rack_of) for r in current.values()))
    assert reassign_replicas(current, allowed, rack_of) == current


@settings(max_examples=300, deadline=None)
@given(scenario(racks=True), st.booleans())
def test_the_preferred_leader_stays_first_if_it_stays(params, rebalance):
    current, allowed, rack_of = params
    proposed = reassign_replicas(current, allowed, rack_of, rebalance=rebalance)
    for k, replicas in current.items():
        if replicas[0] in proposed[k]:
            assert proposed[k][0] == replicas[0]


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_replicas_moved_off_every_old_broker_are_balanced_within_one(params):
    current, allowed, _ = params
    old = {b for replicas in current.values() for b in replicas}
    allowed = [b for b in allowed if b not in old]
    assume(allowed and all(len(r) <= len(allowed) for r in current.values()))
    proposed = reassign_replicas(current, allowed)
    loads = _loads(proposed, allowed)
    assert max(loads) - min(loads) <= 1
    leaders = Counter(replicas[0] for replicas in proposed.values())
    leader_counts = [leaders.get(b, 0) for b in allowed]
    assert max(leader_counts) - min(leader_counts) <= 1


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_rebalance_without_racks_balances_replica_counts_within_one(params):
    current, allowed, _ = params
    proposed = reassign_replicas(current, allowed, rebalance=True)
    loads = _loads(proposed, allowed)
    assert max(loads) - min(loads) <= 1
    # and it moves no more than the minimal plan plus the fewest moves that balance it:
    # the r = total mod n most loaded brokers may keep one above the floor
    minimal = reassign_replicas(current, allowed)
    by_load = sorted(_loads(minimal, allowed), reverse=True)
    floor, r = divmod(sum(by_load), len(allowed))
    balancing = sum(max(0, n - floor - (1 if i < r else 0)) for i, n in enumerate(by_load))
    assert _moved(current, proposed) <= _moved(current, minimal) + balancing


@settings(max_examples=300, deadline=None)
@given(scenario(racks=True, equal_racks=True))
def test_rebalance_with_one_replica_per_rack_balances_within_one(params):
    """Racks of equal size and RF = number of racks: each rack holds one replica of every
    partition, so balance within one is possible and must be reached."""
    current, allowed, rack_of = params
    rack_count = len({rack_of[b] for b in allowed})
    sizes = Counter(rack_of[b] for b in allowed)
    assume(len(set(sizes.values())) == 1)
    assume(all(len(r) == rack_count for r in current.values()))
    proposed = reassign_replicas(current, allowed, rack_of, rebalance=True)
    loads = _loads(proposed, allowed)
    assert max(loads) - min(loads) <= 1


@settings(max_examples=200, deadline=None)
@given(scenario(racks=True), st.booleans())
def test_plan_is_deterministic(params, rebalance):
    current, allowed, rack_of = params
    first = reassign_replicas(current, allowed, rack_of, rebalance=rebalance)
    again = reassign_replicas(dict(reversed(list(current.items()))), list(reversed(allowed)), rack_of, rebalance=rebalance)
    assert first == again


def _round_robin(partitions: int, brokers: list[int], rf: int = 3) -> dict[tuple[str, int], list[int]]:
    return {("t", p): r for p, r in assign_replicas(partitions, rf, brokers).items()}


def test_decommissioning_broker_3_moves_exactly_its_replicas_and_nothing_else():
    current = _round_robin(12, [1, 2, 3, 4])
    proposed = reassign_replicas(current, [1, 2, 4])
    for k, replicas in current.items():
        if 3 in replicas:
            assert 3 not in proposed[k]
            assert len(set(replicas) - set(proposed[k])) == 1
            slot = replicas.index(3)
            if slot > 0:  # a follower: its replacement takes its slot, the rest keep theirs
                assert proposed[k][slot] not in replicas
                assert [b for i, b in enumerate(proposed[k]) if i != slot] == [b for b in replicas if b != 3]
        else:
            assert proposed[k] == replicas
    assert all(3 not in replicas for replicas in proposed.values())
    loads = _loads(proposed, [1, 2, 4])
    assert max(loads) - min(loads) <= 1
    assert sum(loads) == 36


def test_decommissioning_keeps_rack_spread():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    current = {("t", p): r for p, r in assign_replicas(18, 3, list(racks), racks).items()}
    proposed = reassign_replicas(current, [1, 2, 4, 5, 6], racks)
    for k, replicas in proposed.items():
        assert 3 not in replicas
        assert {racks[b] for b in replicas} == {"a", "b", "c"}
        if 3 in current[k]:
            assert set(replicas) - set(current[k]) == {4}  # broker 3's rack b has only 4 left
        else:
            assert replicas == current[k]


def test_growing_the_cluster_by_one_broker_moves_a_quarter_onto_it_with_rebalance():
    current = _round_robin(12, [1, 2, 3])
    assert reassign_replicas(current, [1, 2, 3, 4]) == current  # the minimal plan: nothing must move
    proposed = reassign_replicas(current, [1, 2, 3, 4], rebalance=True)
    assert _loads(proposed, [1, 2, 3, 4]) == [9, 9, 9, 9]
    assert _moved(current, proposed) == 9
    for k, replicas in proposed.items():
        assert set(replicas) - set(current[k]) <= {4}
        assert replicas[0] == current[k][0]  # followers moved, preferred leaders kept


def test_a_new_leader_goes_to_the_replica_leading_fewest():
    current = {("t", 0): [3, 1, 2], ("t", 1): [4, 1, 2], ("t", 2): [1, 2, 4]}
    proposed = reassign_replicas(current, [1, 2, 4])
    # broker 3's slot goes to 4 (the only broker left); 4 and 1 already lead one partition
    # each, 2 none: 2 becomes the preferred leader, the others keep their order
    assert proposed[("t", 0)] == [2, 4, 1]
    assert proposed[("t", 1)] == current[("t", 1)]
    assert proposed[("t", 2)] == current[("t", 2)]


def test_bad_inputs_are_refused():
    with pytest.raises(InvalidReplicationFactorError, match="t-0 has replication factor 3"):
        reassign_replicas({("t", 0): [1, 2, 3]}, [1, 2])
    with pytest.raises(InvalidReplicaAssignmentError):
        reassign_replicas({("t", 0): [1]}, [1, 1])
    with pytest.raises(InvalidReplicaAssignmentError):
        reassign_replicas({("t", 0): [1]}, [])
    with pytest.raises(InvalidReplicaAssignmentError):
        reassign_replicas({("t", 0): []}, [1])
