"""An append that leaves the HW where it was wakes the fetch purgatory only: the waiting
acks=all produces are not walked (Kafka's appendRecordsToLeader), and are still answered
once the HW passes them."""

from __future__ import annotations

import asyncio

from kafkalite.broker.delayed import DelayedOperations
from kafkalite.core.codes import ErrorCode
from kafkalite.core.purgatory import DelayedFetch, FetchPartitionStatus, FetchProbe, ProducePartitionStatus

TP = ("t", 0)


class Leader:
    """What DelayedProduce asks of a partition; counts how often it is asked."""

    def __init__(self) -> None:
        self.hw = 0
        self.checks = 0

    is_leader = True

    def epoch_at(self, offset: int) -> int:
        return 1

    def check_enough_replicas_reach_offset(self, required_offset: int, min_insync_replicas: int):
        self.checks += 1
        return self.hw >= required_offset, ErrorCode.NONE


async def test_an_append_that_leaves_the_hw_wakes_fetches_but_not_produces():
    leader = Leader()
    delayed = DelayedOperations(100, lambda tp: leader)
    produce = asyncio.create_task(delayed.wait_produce({TP: ProducePartitionStatus(9, 1, 2)}, 5_000))
    seen = {"bytes": 0}
    fetch_op = DelayedFetch({TP: FetchPartitionStatus(5, 1)}, min_bytes=1)
    fetch = asyncio.create_task(delayed.wait_fetch(fetch_op, 5_000, lambda tp, offset: FetchProbe(1, 10, seen["bytes"])))
    await asyncio.sleep(0.05)
    checks = leader.checks
    seen["bytes"] = 100
    delayed.wake(TP, produce=False)
    await asyncio.wait_for(fetch, 1)  # the follower's fetch is answered
    assert leader.checks == checks  # the produce was not looked at
    assert not produce.done()
    leader.hw = 10
    delayed.wake(TP)
    assert await asyncio.wait_for(produce, 1) == {TP: 0}
