"""The group coordinator's load of a `__consumer_offsets` partition reads it as every other
read of a replica does (kafkalite.broker.group_coordinator): a disk error is the log dir
failing, a flipped bit is the replica corrupt. Both end the load and hand the partition on
(its leadership moves to a healthy replica, which loads the groups); retried here for
ever, they left every group of the partition answering COORDINATOR_LOAD_IN_PROGRESS.
A real partition over a real log; the replica manager is a stand-in that records what it
is told."""

from __future__ import annotations

import asyncio
import errno

from kafkalite.broker import group_coordinator as driver
from kafkalite.broker.partition import Partition
from kafkalite.core.group_coordinator import GroupCoordinatorConfig
from kafkalite.core.group_messages import OFFSETS_TOPIC, BecameLeader
from kafkalite.core.replica_state import LeaderAndIsrState
from kafkalite.log.config import LogConfig
from kafkalite.log.errors import LogDirFailure
from kafkalite.log.log import Log
from kafkalite.log.records import encode_batch

TP = (OFFSETS_TOPIC, 0)


class ReplicaManagerStandIn:
    def __init__(self, part: Partition):
        self.partitions = {TP: part}
        self.dir_failures: list[LogDirFailure] = []
        self.corrupt: list[tuple[tuple[str, int], int]] = []

    def on_log_dir_failure(self, failure: LogDirFailure) -> None:
        self.dir_failures.append(failure)

    def on_replica_corrupt(self, tp: tuple[str, int], base_offset: int) -> None:
        self.corrupt.append((tp, base_offset))


def _leader(tmp_path) -> Partition:
    plog = Log.open(str(tmp_path / f"{OFFSETS_TOPIC}-0"), LogConfig(), now_ms=0)
    part = Partition(OFFSETS_TOPIC, 0, 1, plog, 0)
    part.make_leader(LeaderAndIsrState(1, 1, (1,), 0, (1,)), 0)
    part.append_as_leader(encode_batch([(b"k", b"v", ())]), now_ms=0)
    return part


async def _load(part: Partition) -> tuple[ReplicaManagerStandIn, driver.GroupCoordinatorDriver]:
    rm = ReplicaManagerStandIn(part)
    coordinator = driver.GroupCoordinatorDriver(
        GroupCoordinatorConfig(offsets_topic_partitions=1), rm,  # type: ignore[arg-type]
        {"offsets.commit.timeout.ms": 5000, "offsets.load.buffer.size": 1 << 20}, on_fatal=lambda e: None)
    coordinator.submit(BecameLeader(0, 1))
    for _ in range(100):
        if not coordinator._loads:
            break
        await asyncio.sleep(0.01)
    return rm, coordinator


async def test_a_disk_error_while_loading_fails_the_dir_instead_of_retrying(tmp_path, monkeypatch):
    part = _leader(tmp_path)

    def eio(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(part.log, "read", eio)
    rm, coordinator = await _load(part)
    assert not coordinator._loads  # the load ended
    assert len(rm.dir_failures) == 1 and rm.corrupt == []


async def test_a_flipped_bit_while_loading_quarantines_the_replica(tmp_path, monkeypatch):
    part = _leader(tmp_path)
    real = part.log.read

    def flipped(*args, **kwargs):
        data = bytearray(real(*args, **kwargs))
        data[-1] ^= 0xFF
        return bytes(data)

    monkeypatch.setattr(part.log, "read", flipped)
    rm, coordinator = await _load(part)
    assert not coordinator._loads
    assert rm.corrupt == [(TP, 0)] and rm.dir_failures == []


async def test_the_groups_clock_does_not_follow_a_wall_clock_step(tmp_path, monkeypatch):
    """Session and rebalance deadlines are kept on the wall clock of the start-up advanced
    by the monotonic clock: a step of the wall clock (NTP, a VM resumed) moves neither."""
    _, coordinator = await _load(_leader(tmp_path))
    before = coordinator._clock()
    monkeypatch.setattr(driver, "wall_ms", lambda: before - 3_600_000)  # an hour back
    after = coordinator._clock()
    assert before <= after < before + 1_000
    monkeypatch.setattr(driver, "wall_ms", lambda: before + 3_600_000)  # an hour ahead
    assert coordinator._clock() < before + 1_000
