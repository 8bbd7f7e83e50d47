"""The invariant checkers themselves report what they should."""

from __future__ import annotations

import pytest

from kafkalite.core.invariants import (
    LeaderEpochTracker,
    MonotonicTracker,
    assert_ok,
    check_acked_not_lost,
    check_controller_state,
    check_partition_invariants,
    check_replicas_identical_below_hw,
    check_single_leader_per_epoch,
)
from kafkalite.core.replica_state import LeaderAndIsrState, PartitionReplicaState


def test_partition_invariants_hold_for_a_leader_and_flag_hw_above_leo():
    p = PartitionReplicaState("t", 0, 1)
    p.become_leader(LeaderAndIsrState(1, 1, (1,), 0, (1, 2)), 10, 10, 0)
    assert check_partition_invariants(p, leo=10) == []
    assert check_partition_invariants(p, leo=5) != []


def test_replicas_identical_below_hw():
    assert check_replicas_identical_below_hw({1: "abc", 2: "abd"}, hw=2) == []
    assert check_replicas_identical_below_hw({1: "abc", 2: "abd"}, hw=3) != []
    assert check_replicas_identical_below_hw({1: "abc", 2: "a"}, hw=2) != []  # 2 too short


def test_single_leader_per_epoch():
    assert check_single_leader_per_epoch([("p", 1, 1), ("p", 1, 1), ("p", 2, 2), ("q", 1, 2)]) == []
    assert check_single_leader_per_epoch([("p", 1, 1), ("p", 1, 2)]) != []
    tracker = LeaderEpochTracker()
    assert tracker.observe("p", 3, -1) == []


def test_monotonic_tracker():
    hw = MonotonicTracker("HW")
    assert hw.observe("p", 5) == []
    assert hw.observe("p", 5) == []
    assert hw.observe("p", 4) != []


def test_controller_state_and_acked_checks():
    assignments = {"p": [1, 2]}
    assert check_controller_state({"p": (1, [1, 2])}, assignments) == []
    assert check_controller_state({"p": (3, [1, 2])}, assignments) != []
    assert check_controller_state({"p": (-1, [])}, assignments) != []
    assert check_controller_state({"p": (1, [1, 3])}, assignments) != []
    assert check_acked_not_lost({0: "a", 1: "b"}, "ab") == []
    assert check_acked_not_lost({0: "a", 1: "b"}, "ax") != []
    with pytest.raises(AssertionError):
        assert_ok(["broken"])
