"""The admin side of a reassignment without I/O: plan checks, per-partition move state
(started by the controller or not yet), bytes caught up."""

from __future__ import annotations

from kafkalite.core.reassignment_plan import PartitionMove, catch_up_bytes, partition_moves, plan_problems

TOPICS = {"a": [0, 1, 2], "b": [0]}


def test_a_plan_on_existing_partitions_and_registered_brokers_has_no_problem():
    assert plan_problems({("a", 0): [2, 3, 4], ("b", 0): [4]}, TOPICS, [1, 2, 3, 4]) == []


def test_every_problem_is_named_with_its_partition():
    plan = {
        ("a", 0): [1, 7],
        ("a", 1): [],
        ("a", 2): [1, 1],
        ("a", 9): [1],
        ("b", 0): [7, 8],
        ("nope", 0): [1],
    }
    assert plan_problems(plan, TOPICS, [1, 2, 3]) == [
        "a-0: broker 7 is not registered (registered brokers: 1,2,3)",
        "a-1: no replicas (the replication factor must be at least 1)",
        "a-2: replicas [1, 1] name a broker twice",
        "a-9: topic 'a' has no partition 9",
        "b-0: broker 7, 8 are not registered (registered brokers: 1,2,3)",
        "nope-0: unknown topic 'nope'",
    ]


def test_an_empty_plan_and_a_topic_being_deleted_are_refused():
    assert plan_problems({}, TOPICS, [1]) == ["the plan lists no partitions"]
    assert plan_problems({("b", 0): [1]}, TOPICS, [1], topics_being_deleted={"b"}) == ["b-0: topic 'b' is being deleted"]


def test_a_partition_still_moving_cannot_be_planned_again():
    """A cancelled move that could not go back yet: the controller took a new plan for the
    partition for that move, and it ended on the cancelled target (found by review)."""
    assert plan_problems({("a", 0): [3, 5], ("a", 1): [4]}, TOPICS, [1, 2, 3, 4, 5], still_moving={("a", 0): ([1, 2], [3, 4])}) == [
        "a-0: its previous move (1,2 -> 3,4) has not ended: a cancelled move goes back to 1,2 first; "
        "plan it again once `kafkalite reassign status` no longer lists it",
    ]


def test_a_partition_the_controller_has_not_started_shows_adding_and_removing_from_the_plan():
    [move] = partition_moves({("a", 0): [2, 3, 4]}, {("a", 0): [1, 2, 3]}, {}, {})
    assert move == PartitionMove("a", 0, (1, 2, 3), adding=(4,), removing=(1,), target=(2, 3, 4), done=False)
    assert move.original == (1, 2, 3)
    assert move.to_json() == {"topic": "a", "partition": 0, "replicas": [1, 2, 3], "adding": [4], "removing": [1], "done": False}


def test_a_started_partition_shows_the_topic_znodes_adding_and_removing():
    [move] = partition_moves({("a", 0): [2, 3, 4]}, {("a", 0): [2, 3, 4, 1]}, {("a", 0): [4]}, {("a", 0): [1]})
    assert (move.adding, move.removing, move.done) == ((4,), (1,), False)
    assert move.original == (2, 3, 1)
    assert move.target == (2, 3, 4)


def test_a_partition_is_done_when_it_left_the_admin_znode_and_has_nothing_moving():
    # the controller removed its entry but has not yet written the final assignment
    [pending] = partition_moves({}, {("a", 0): [2, 3, 4, 1]}, {}, {("a", 0): [1]})
    assert not pending.done
    # finished: shown only when it was seen moving before
    assert partition_moves({}, {("a", 0): [2, 3, 4]}, {}, {}) == []
    [finished] = partition_moves({}, {("a", 0): [2, 3, 4]}, {}, {}, seen={("a", 0): (2, 3, 4)})
    assert finished.done and not finished.failed and finished.target == (2, 3, 4) and finished.adding == ()


def test_a_partition_that_ended_on_other_replicas_than_its_target_did_not_move():
    """Review: leaving the admin znode with nothing moving was called done, also when the
    controller refused the target (a broker it holds gone) or a cancel reverted the move:
    `reassign status` said "reassignment complete". Judged by the target first seen."""
    [refused] = partition_moves({}, {("a", 0): [1, 2, 3]}, {}, {}, seen={("a", 0): (2, 3, 4)})
    assert refused.failed and not refused.done and refused.target == (2, 3, 4)
    [reordered] = partition_moves({}, {("a", 0): [1, 2, 3]}, {}, {}, seen={("a", 0): (3, 1, 2)})
    assert reordered.failed  # a refused reorder: the same brokers, not the order asked for
    [moving] = partition_moves({}, {("a", 0): [1, 2, 3, 4]}, {("a", 0): [4]}, {("a", 0): [1]}, seen={("a", 0): (2, 3, 4)})
    assert not moving.done and not moving.failed  # its entry gone, still moving: a cancel going back


def test_a_same_replica_entry_is_listed_until_the_controller_drops_it():
    [move] = partition_moves({("b", 0): [1]}, {("b", 0): [1]}, {}, {})
    assert (move.adding, move.removing, move.done) == ((), (), False)


def test_moves_are_in_partition_order():
    moves = partition_moves({("b", 0): [2], ("a", 2): [2], ("a", 10): [3]}, {}, {}, {})
    assert [(m.topic, m.partition) for m in moves] == [("a", 2), ("a", 10), ("b", 0)]


def test_catch_up_bytes_sums_the_adding_replicas_capped_at_the_leaders_log():
    assert catch_up_bytes(1000, {4: 250, 5: None}) == (250, 2000)
    assert catch_up_bytes(1000, {4: 1200}) == (1000, 1000)
    assert catch_up_bytes(0, {4: 0}) == (0, 0)
    assert catch_up_bytes(None, {4: 10}) is None
    assert catch_up_bytes(1000, {}) is None
