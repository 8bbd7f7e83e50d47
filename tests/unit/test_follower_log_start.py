"""A follower whose log start meets a truncation or a restart (real logs, real partitions):
a log restarted inside the leader's first batch starts at that batch (Kafka's
appendRecordsToFollowerOrFutureReplica), and a truncation below the log start takes the
state's log start and HW down with the log, never leaving the HW above the log end."""

from __future__ import annotations

from kafkalite.broker.partition import Partition
from kafkalite.core.replica_state import LeaderAndIsrState
from kafkalite.log.config import LogConfig
from kafkalite.log.log import Log
from kafkalite.log.records import encode_batch


def _batch(base: int, epoch: int = 1, n: int = 10) -> bytes:
    return encode_batch([(b"k", b"v", ())] * n, base_offset=base, partition_leader_epoch=epoch, base_timestamp=0)


def _follower(tmp_path, name: str) -> Partition:
    part = Partition("t", 0, 2, Log.new(str(tmp_path / name / "t-0"), LogConfig(), now_ms=0), 0)
    part.make_follower(LeaderAndIsrState(leader=1, leader_epoch=1, isr=(1, 2), partition_epoch=0, replicas=(1, 2, 3)), 0)
    return part


def test_a_log_restarted_inside_the_leaders_first_batch_takes_that_batch(tmp_path):
    """DeleteRecords(95) on the leader, inside its batch 90-99. A follower below it restarts
    its log at 95; the leader serves the batch from 90, which the empty log refused on every
    fetch, for ever: the replica never caught up."""
    leader = Log.new(str(tmp_path / "leader" / "t-0"), LogConfig(), now_ms=0)
    for base in range(0, 200, 10):
        leader.append_as_follower(_batch(base))
    leader.maybe_increment_log_start_offset(95)
    part = _follower(tmp_path, "f")
    part.truncate_fully_and_start_at(95)
    part.append_as_follower(leader.read(95, 1), 200)  # the first batch: 90-99
    assert part.leo == 100 and part.log_start_offset == 90 and part.hw == 100
    part.advance_log_start(95)  # the fetcher follows the leader's log start again
    assert (part.log_start_offset, part.state.log_start_offset) == (95, 95)
    part.append_as_follower(leader.read(100, 1 << 20), 200)
    assert part.leo == 200 and part.hw == 200


def test_a_truncation_below_the_log_start_takes_the_state_down_with_the_log(tmp_path):
    """The follower's log starts at 100 (the leader's DeleteRecords), HW 150. An unclean
    leader's log ends epoch 1 at 80: the log restarts at 80, and the state's log start and
    HW stayed at 100, above the log end, which failed every consumer fetch there and, woken,
    a parked one's assertion ended the broker."""
    part = _follower(tmp_path, "f")
    for base in range(0, 150, 10):
        part.append_as_follower(_batch(base), leader_hw=150)
    part.advance_log_start(100)
    part.make_follower(LeaderAndIsrState(leader=3, leader_epoch=3, isr=(3,), partition_epoch=1, replicas=(1, 2, 3)), 0)
    assert part.truncate_by_epoch((1, 80))
    assert (part.log_start_offset, part.leo) == (80, 80)
    assert (part.state.log_start_offset, part.hw, part.state.hw) == (80, 80, 80)
    part.append_as_follower(_batch(80, epoch=3), leader_hw=85)
    assert (part.leo, part.hw) == (90, 85)


def test_a_truncation_wakes_what_waits_on_the_partition(tmp_path):
    """A consumer waiting on a follower (KIP-392) at an offset a truncation takes away is
    answered at once, not at the next append or its max_wait."""
    part = _follower(tmp_path, "f")
    for base in range(0, 50, 10):
        part.append_as_follower(_batch(base), leader_hw=30)
    woken: list[bool] = []
    part.listeners.append(lambda p, hw_moved: woken.append(hw_moved))
    part.truncate_to(45)  # inside a batch: back to 40
    assert part.leo == 40 and woken
    woken.clear()
    part.truncate_fully_and_start_at(60)
    assert woken
