"""Replica placement (Kafka AdminUtils.assignReplicasToBrokers) with Hypothesis properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core.codes import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)
from kafkalite.core.placement import assign_replicas, rack_alternated_brokers


@st.composite
def cluster(draw, racks=False):
    n = draw(st.integers(1, 9))
    brokers = draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n, unique=True))
    rf = draw(st.integers(1, n))
    partitions = draw(st.integers(1, 60))
    start = draw(st.integers(0, 20))
    shift = draw(st.integers(0, 20))
    rack_map = {}
    if racks:
        rack_count = draw(st.integers(1, n))
        rack_map = {b: f"r{draw(st.integers(0, rack_count - 1))}" for b in brokers}
    return partitions, rf, brokers, rack_map, start, shift


@settings(max_examples=200, deadline=None)
@given(cluster())
def test_every_partition_has_rf_distinct_replicas_and_leaders_spread(params):
    partitions, rf, brokers, racks, start, shift = params
    result = assign_replicas(partitions, rf, brokers, racks, start, shift)
    assert sorted(result) == list(range(partitions))
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    leaders = Counter(replicas[0] for replicas in result.values())
    # round robin: leader counts differ by at most one
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=200, deadline=None)
@given(cluster(racks=True))
def test_rack_aware_spreads_each_partition_over_racks(params):
    partitions, rf, brokers, racks, start, shift = params
    result = assign_replicas(partitions, rf, brokers, racks, start, shift)
    rack_count = len(set(racks.values()))
    for replicas in result.values():
        assert len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, rack_count)
    leaders = Counter(replicas[0] for replicas in result.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


def test_matches_kafka_round_robin_example():
    # Kafka AdminUtils doc example: 5 brokers, 10 partitions, RF 3, start index 0, shift 0
    result = assign_replicas(10, 3, [0, 1, 2, 3, 4], None, start_index=0, replica_shift=0)
    assert result[0] == [0, 1, 2]
    assert result[1] == [1, 2, 3]
    assert result[4] == [4, 0, 1]
    assert result[5] == [0, 2, 3]
    assert result[9] == [4, 1, 2]


def test_rack_alternated_list():
    racks = {0: "a", 1: "a", 2: "b", 3: "c", 4: "c", 5: "c"}
    assert rack_alternated_brokers(racks) == [0, 2, 3, 1, 4, 5]


def test_errors():
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(3, 4, [1, 2, 3], None)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(3, 0, [1, 2, 3], None)
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(0, 1, [1, 2, 3], None)
    with pytest.raises(InvalidReplicaAssignmentError):
        assign_replicas(1, 1, [1, 1], None)
    with pytest.raises(InvalidReplicaAssignmentError):
        assign_replicas(1, 1, [1, 2], {1: "a", 2: None}, enforce_racks=True)
    # partial racks without enforcement: rack-unaware fallback
    assert assign_replicas(2, 2, [1, 2], {1: "a", 2: None}) == {0: [1, 2], 1: [2, 1]}


def test_adding_partitions_continues_leader_round_robin():
    # Kafka only keeps the leader pattern for added partitions (the follower shift is
    # recomputed from the new partitions alone), so that is what we check.
    full = assign_replicas(8, 2, [1, 2, 3], None, 1, 2)
    added = assign_replicas(3, 2, [1, 2, 3], None, 1, 2, start_partition_id=5)
    assert sorted(added) == [5, 6, 7]
    for partition in (5, 6, 7):
        assert added[partition][0] == full[partition][0]
