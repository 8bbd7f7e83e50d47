"""The one translation both drivers use from the replica manager's role changes to the
coordinator's leadership events (kafkalite.core.group_coordinator.leadership_events)."""

from __future__ import annotations

from dataclasses import dataclass

from kafkalite.core.group_coordinator import leadership_events
from kafkalite.core.group_messages import OFFSETS_TOPIC, BecameFollower, BecameLeader
from kafkalite.core.replica_manager import RoleChanges


@dataclass
class _Rep:
    is_leader: bool
    leader_epoch: int


def test_offsets_partitions_named_by_a_change_become_leader_or_follower_events():
    replicas = {(OFFSETS_TOPIC, 0): _Rep(True, 4), (OFFSETS_TOPIC, 2): _Rep(False, 7), ("orders", 0): _Rep(True, 1)}
    changes = RoleChanges(codes=[((OFFSETS_TOPIC, 2), 0), ((OFFSETS_TOPIC, 0), 0), (("orders", 0), 0),
                                 ((OFFSETS_TOPIC, 9), 0)],  # beyond the coordinator's partitions: ignored
                          removed=[(OFFSETS_TOPIC, 1)])
    assert leadership_events(changes, replicas.get, 3) == [BecameLeader(0, 4), BecameFollower(1, None), BecameFollower(2, 7)]
    assert leadership_events(RoleChanges(), replicas.get, 3) == []
