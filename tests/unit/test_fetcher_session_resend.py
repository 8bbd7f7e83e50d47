"""The follower's side of a fetch session (kafkalite.broker.fetcher): the leader reads a
session's partition again only when it changes or the follower's request names it, so a
partition whose answer the follower did not apply must be named again; otherwise it waits
for the leader's next append, which on an idle partition may never come. Real partitions
over real logs; the leader is a scripted RPC peer."""

from __future__ import annotations

import asyncio
from typing import Any

from kafkalite.broker.fetcher import FetcherManager
from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.broker.partition import Partition
from kafkalite.core.codes import ErrorCode
from kafkalite.core.quota import ReplicationQuotas
from kafkalite.core.replica_manager import Follow
from kafkalite.log.config import LogConfig
from kafkalite.log.log import Log
from kafkalite.log.records import encode_batch

SETTINGS = {"replica.fetch.backoff.ms": 20, "replica.fetch.wait.max.ms": 500, "request.timeout.ms": 1000,
            "replica.fetch.min.bytes": 1, "replica.fetch.response.max.bytes": 1 << 20, "replica.fetch.max.bytes": 1 << 20}


class ScriptedLeader:
    """Answers the first ReplicaFetch with `first` (header, payload), then those in `then`,
    then parks every later request as a leader with nothing new would, recording what each
    named."""

    def __init__(self, first: tuple[dict[str, Any], bytes], then: list[tuple[dict[str, Any], bytes]] = ()):
        self.answers = [first, *then]  # the later ones after a short wait, as a leader's max wait
        self.requests: list[dict[str, Any]] = []

    async def call(self, api: str, body: dict[str, Any], timeout_ms: int):
        assert api == "ReplicaFetch"
        self.requests.append(body)
        if len(self.requests) <= len(self.answers):
            if len(self.requests) > 1:
                await asyncio.sleep(0.1)
            header, payload = self.answers[len(self.requests) - 1]
            return header, memoryview(payload)
        await asyncio.sleep(30)
        raise AssertionError("the test ends first")


def _partition(tmp_path, topic: str) -> Partition:
    plog = Log.open(str(tmp_path / f"{topic}-0"), LogConfig(), now_ms=0)
    part = Partition(topic, 0, 2, plog, 0)
    return part


async def _run(tmp_path, leader: ScriptedLeader, topics: list[str]) -> FetcherManager:
    mgr = FetcherManager(SETTINGS, lambda leader_id: leader, lambda: 5, BrokerMetrics(), lambda e: (_ for _ in ()).throw(e))
    mgr.broker_id = 2
    mgr.quotas = ReplicationQuotas(2)
    for topic in topics:
        mgr.add([Follow(_partition(tmp_path, topic), 1, 0, truncating=False)])
    return mgr


def _named(request: dict[str, Any]) -> set[str]:
    return {row[0] for row in request["partitions"]}


async def _second_request(leader: ScriptedLeader) -> None:
    """Wait (up to 1 s) for the follower's request after the scripted answer."""
    for _ in range(100):
        if len(leader.requests) >= 2:
            break
        await asyncio.sleep(0.01)
    assert len(leader.requests) == 2


async def test_a_partition_answered_with_an_error_is_named_again_after_its_backoff(tmp_path):
    """The leader answered with an error after which nothing changes on its side (a
    transient storage error): once the backoff ends the follower asks for it again."""
    header = {"error": 0, "session": [7, 1],
              "partitions": [["a", 0, int(ErrorCode.KAFKA_STORAGE_ERROR), 0, 0, 0, 0, 0, None, None]]}
    leader = ScriptedLeader((header, b""))
    mgr = await _run(tmp_path, leader, ["a"])
    try:
        await _second_request(leader)
        assert leader.requests[1]["session"] == [7, 1]  # the same session...
        assert _named(leader.requests[1]) == {"a"}  # ...naming the partition again
    finally:
        await mgr.close()


async def test_records_one_partition_refused_leave_the_others_applied_and_it_is_named_again(tmp_path):
    """Partition a's records were refused by its log (here: a batch cut short). It backs off
    alone: b's records, after it in the same answer, are applied, and a later request of
    the same session names a again (the leader reads a session's partition again only when
    it changes or is named). The error used to end the whole answer, so a partition whose
    records were refused on every answer kept the ones after it from ever being applied."""
    good = encode_batch([(None, b"v", ())])
    bad = good[:-3]
    header = {"error": 0, "session": [7, 1],
              "partitions": [["a", 0, 0, 1, 0, 1, 0, len(bad), None, None],
                             ["b", 0, 0, 1, 0, 1, len(bad), len(good), None, None]]}
    leader = ScriptedLeader((header, bad + good), then=[({"error": 0, "session": [7, 2], "partitions": []}, b"")])
    mgr = await _run(tmp_path, leader, ["a", "b"])
    try:
        for _ in range(200):
            if len(leader.requests) >= 3:
                break
            await asyncio.sleep(0.01)
        assert mgr.fetchers[1].partitions[("b", 0)].replica.leo == 1  # applied
        assert mgr.fetchers[1].partitions[("a", 0)].replica.leo == 0
        assert [r["session"] for r in leader.requests[1:3]] == [[7, 1], [7, 2]]  # the same session...
        assert "a" in _named(leader.requests[1]) | _named(leader.requests[2])  # ...naming a again
    finally:
        await mgr.close()
