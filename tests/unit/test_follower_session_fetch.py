"""The leader's side of a follower's session fetch, on a real replica manager over a real log:
a fetch waiting at the leader's log end is answered by records or by its max wait, never by a
moved HW alone (Kafka since KAFKA-9952: answering at once for the HW raised followers' fetch
rate by half, KAFKA-9731, and here cost two more messages per follower per write). The HW
rides on the next answer, and what the leader notes as sent (the status page's follower HW)
is what an answer carried."""

from __future__ import annotations

import asyncio

from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.core.fetch_session import SessionPartition
from kafkalite.log.config import LogConfig
from kafkalite.log.records import encode_batch
from kafkalite.protocol.errors import ErrorCode
from kafkalite.testing.replica_managers import leader_and_isr, replica_manager

TP = ("t", 0)
EPOCH = 3
CONFIG = LogConfig(segment_bytes=1 << 20)


def _leader(tmp_path) -> ReplicaManager:
    rm = replica_manager(str(tmp_path), 1, CONFIG)
    rm.handle_leader_and_isr(leader_and_isr([TP], leader=1, epoch=EPOCH, replicas=[1, 2, 3]))
    return rm


async def _write(rm: ReplicaManager, value: bytes) -> None:
    await rm.append_records(1, 1000, [(TP[0], TP[1], encode_batch([(b"k", value, ())], base_timestamp=1000))])


async def _fetch(rm: ReplicaManager, replica_id: int, offset: int, max_wait_ms: int) -> dict:
    session = rm.fetch_sessions.start(replica_id, {TP: SessionPartition(offset, EPOCH, EPOCH, 0)}, 0)
    ((_, answer),) = await rm.fetch_in_session(session, [TP], max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                                                partition_max_bytes=1 << 20)
    return answer


def _sent_hw(rm: ReplicaManager, replica_id: int) -> int:
    return rm.partitions[TP].state.follower_state(replica_id).last_sent_hw


async def _both_read_offset_0(rm: ReplicaManager) -> None:
    await _write(rm, b"v")
    for follower in (2, 3):
        first = await _fetch(rm, follower, 0, 0)
        assert first["records"] and first["hw"] == 0


async def test_a_follower_whose_own_fetch_moves_the_hw_waits_for_records(tmp_path):
    rm = _leader(tmp_path)
    await _both_read_offset_0(rm)
    await _fetch(rm, 3, 1, 0)
    assert rm.partitions[TP].hw == 0  # 2 has not shown it holds offset 0 yet
    waiting = asyncio.ensure_future(_fetch(rm, 2, 1, 5000))  # 2 at the log end: HW 0 -> 1
    try:
        await asyncio.sleep(0.5)
        assert rm.partitions[TP].hw == 1
        assert not waiting.done()  # the moved HW alone did not answer it
        assert _sent_hw(rm, 2) == 0  # nor is it noted as sent
        await _write(rm, b"w")
        answer = await asyncio.wait_for(waiting, 5)
    finally:
        waiting.cancel()
    assert answer["records"] and answer["hw"] == 1  # the new HW came with the next records
    assert _sent_hw(rm, 2) == 1


async def test_a_follower_waiting_when_the_other_moves_the_hw_is_not_answered_for_it(tmp_path):
    rm = _leader(tmp_path)
    await _both_read_offset_0(rm)
    waiting = asyncio.ensure_future(_fetch(rm, 3, 1, 5000))  # 3 at the log end, waiting
    try:
        await asyncio.sleep(0.2)
        await _fetch(rm, 2, 1, 0)  # 2's fetch: HW 0 -> 1
        assert rm.partitions[TP].hw == 1
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await _write(rm, b"w")
        answer = await asyncio.wait_for(waiting, 5)
    finally:
        waiting.cancel()
    assert answer["records"] and answer["hw"] == 1


async def test_an_idle_follower_learns_a_moved_hw_at_its_max_wait(tmp_path):
    """No more records come: the answer at max wait carries the HW that moved while the
    fetch waited, so a follower's HW (which it serves consumers below, KIP-392, and starts
    from if elected) never stays behind on an idle partition."""
    rm = _leader(tmp_path)
    await _both_read_offset_0(rm)
    waiting = asyncio.ensure_future(_fetch(rm, 3, 1, 800))
    try:
        await asyncio.sleep(0.2)
        await _fetch(rm, 2, 1, 0)  # HW 0 -> 1 while 3 waits
        answer = await asyncio.wait_for(waiting, 5)
    finally:
        waiting.cancel()
    assert not answer["records"] and answer["hw"] == 1
    assert _sent_hw(rm, 3) == 1


def _count_reads(rm: ReplicaManager, replica_id: int) -> list[int]:
    """How many times the leader reads a partition for `replica_id` (a one-element list)."""
    count = [0]
    read = rm.read_partition

    def counting(*args, **kwargs):
        if kwargs.get("replica_id") == replica_id:
            count[0] += 1
        return read(*args, **kwargs)

    rm.read_partition = counting  # type: ignore[method-assign]
    return count


async def test_a_waiting_follower_is_not_even_read_again_for_a_moved_hw(tmp_path):
    """The HW the other follower's fetch moves marks the partition for the waiting fetch's
    next read, but wakes nothing: no read, no answer, until records come."""
    rm = _leader(tmp_path)
    await _both_read_offset_0(rm)
    reads = _count_reads(rm, 3)
    waiting = asyncio.ensure_future(_fetch(rm, 3, 1, 5000))
    try:
        await asyncio.sleep(0.2)
        assert reads[0] == 1  # its first read, at the log end: it waits
        await _fetch(rm, 2, 1, 0)  # HW 0 -> 1
        await asyncio.sleep(0.3)
        assert rm.partitions[TP].hw == 1 and reads[0] == 1 and not waiting.done()
        await _write(rm, b"w")
        answer = await asyncio.wait_for(waiting, 5)
    finally:
        waiting.cancel()
    assert answer["records"] and answer["hw"] == 1 and reads[0] == 2


async def test_the_read_after_the_wait_leaves_the_followers_state_as_the_request_set_it(tmp_path):
    """Kafka's DelayedFetch: what the leader knows of the follower (its LEO, when it last
    fetched, the leader's LEO then) is set by the request's first read; the read an append
    wakes only reads."""
    rm = _leader(tmp_path)
    await _both_read_offset_0(rm)
    state = rm.partitions[TP].state
    waiting = asyncio.ensure_future(_fetch(rm, 3, 1, 5000))
    try:
        await asyncio.sleep(0.2)
        at_first_read = state.follower_state(3)
        assert at_first_read.last_fetch_leader_leo == 1
        await asyncio.sleep(0.1)
        await _write(rm, b"w")
        answer = await asyncio.wait_for(waiting, 5)
    finally:
        waiting.cancel()
    assert answer["records"]
    assert state.follower_state(3) == at_first_read


async def test_a_waiting_follower_is_told_when_the_leadership_moves(tmp_path):
    """The read after the wait is fenced: leadership moved to broker 2 while the fetch
    waited, and the answer says this broker no longer leads."""
    rm = _leader(tmp_path)
    await _both_read_offset_0(rm)
    waiting = asyncio.ensure_future(_fetch(rm, 3, 1, 5000))
    try:
        await asyncio.sleep(0.2)
        rm.handle_leader_and_isr(leader_and_isr([TP], leader=2, epoch=EPOCH + 1, replicas=[1, 2, 3]))
        answer = await asyncio.wait_for(waiting, 5)
    finally:
        waiting.cancel()
    assert answer["error"] == int(ErrorCode.NOT_LEADER_OR_FOLLOWER) and not answer["records"]
