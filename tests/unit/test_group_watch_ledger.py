"""kafkalite.testing.group_watch without a cluster: what the group consumed is held offset by
offset (not by the highest offset consumed), and a member's rebalances are recorded in the
history for the checker's position rule."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from kafkalite.testing.group_watch import GroupLedger, GroupMember, GroupWatch, OffsetRanges
from kafkalite.testing.history import History


def _watch(consumed: dict[int, list[int]]) -> GroupWatch:
    watch = GroupWatch("unused:0", "t", "g", members=0)
    for p, offsets in consumed.items():
        for o in offsets:
            watch.ledger.consumed_max[p] = max(watch.ledger.consumed_max.get(p, -1), o)
            watch.ledger.consumed_offsets.setdefault(p, OffsetRanges()).add(o)
    return watch


def test_offset_ranges_merge_runs_in_any_order():
    r = OffsetRanges()
    for o in (5, 3, 4, 9, 4, 0, 1, 2, 7):
        r.add(o)
    assert r.runs() == [(0, 5), (7, 7), (9, 9)]
    assert r.holes_up_to(8) == [(6, 6), (8, 8)]
    assert r.holes_up_to(6) == [(6, 6)]
    r.add(6)
    r.add(8)
    assert r.runs() == [(0, 9)] and r.holes_up_to(100) == []


def test_a_group_that_skipped_acknowledged_records_has_not_caught_up():
    """The highest offset consumed reached the highest acknowledged one, but 40 records
    between were consumed by nobody: caught_up said yes before."""
    watch = _watch({0: [*range(0, 10), *range(50, 100)], 1: list(range(0, 5))})
    assert not watch.caught_up({0: 99, 1: 4})
    assert watch.unconsumed({0: 99, 1: 4}) == ["partition 0: 40 offsets not consumed between 0 and the highest acknowledged "
                                              "offset 99: 10..49"]


def test_a_group_behind_or_absent_from_a_partition_has_not_caught_up_and_one_that_read_all_has():
    watch = _watch({0: list(range(3, 8)), 1: [0, 2, 1, 1]})
    assert watch.unconsumed({0: 9, 1: 2, 2: 0, 3: -1}) == [
        "partition 0: consumed up to 7, below the highest acknowledged offset 9",
        "partition 2: nothing consumed (highest acknowledged offset 0)",
    ]
    assert watch.caught_up({0: 7, 1: 2, 3: -1})  # from where it started (3): an offset acknowledged without offset asks nothing


class _Committed:
    def commit(self, asynchronous: bool):
        return []


def test_a_member_records_its_assignments_and_revocations_in_the_history():
    history = History()
    member = GroupMember(GroupLedger(), "unused:0", "t", "g", "g-member-0", 10, 60, history)
    member._consumer = _Committed()
    member._on_assign(None, [TopicPartition("t", 0), TopicPartition("t", 2)])
    member._on_revoke(None, [TopicPartition("t", 2)])
    assert [(e.process, e.kind, e.partition) for e in history.events()] == [
        ("g-member-0", "assign", 0), ("g-member-0", "assign", 2), ("g-member-0", "revoke", 2)]
