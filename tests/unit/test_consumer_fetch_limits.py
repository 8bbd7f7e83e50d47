"""Consumer reads at the edges, on a real replica manager over a real log: a partition limit
of 0 still gets the first batch (KIP-74), a fetch that asks for no partition is answered at
once (Kafka's fetchMessages), not after max_wait, and ListOffsets answers the leader epoch
of the offset's records (KIP-320)."""

from __future__ import annotations

import asyncio

from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.core.consumer_fetch import ClusterView
from kafkalite.core.messages import LeaderAndIsr, PartitionLeadership
from kafkalite.log.config import LogConfig
from kafkalite.log.records import encode_batch
from kafkalite.testing.replica_managers import leader_and_isr, replica_manager

TP = ("t", 0)
CONFIG = LogConfig(segment_bytes=1 << 20)


def _leader(tmp_path) -> ReplicaManager:
    rm = replica_manager(str(tmp_path), 1, CONFIG)
    rm.cluster_view = lambda tp: ClusterView({1: None}, True, None, -1)
    rm.handle_leader_and_isr(leader_and_isr([TP], leader=1, epoch=3, replicas=[1]))
    return rm


def _ask(offset: int, max_bytes: int) -> tuple[tuple[str, int], dict]:
    return TP, {"fetch_offset": offset, "max_bytes": max_bytes, "current_leader_epoch": -1}


async def test_a_partition_limit_of_zero_still_gets_the_first_batch(tmp_path):
    rm = _leader(tmp_path)
    await rm.append_records(1, 1000, [(TP[0], TP[1], encode_batch([(b"k", b"v" * 40, ())] * 3, base_timestamp=1000))])
    for limit in (0, 1):
        ((_, answer),) = await rm.fetch([_ask(0, limit)], replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20)
        assert answer["error"] == 0 and len(answer["records"]) > 0, limit
    ((_, answer),) = await rm.fetch([_ask(0, 1 << 20)], replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=0)
    assert len(answer["records"]) > 0


async def test_a_fetch_of_no_partition_is_answered_at_once(tmp_path):
    rm = _leader(tmp_path)
    # max_wait is 60 s: waiting it out fails the wait_for
    assert await asyncio.wait_for(rm.fetch([], replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20), 20) == []


async def test_list_offsets_answers_the_epoch_of_the_offsets_records(tmp_path):
    """KIP-320: a consumer keeps the leader epoch ListOffsets gives with its position and
    checks it for truncation later. Records 0-2 were written in epoch 3 and 3-5 in epoch 5:
    the earliest offset is epoch 3's, a timestamp's record its own batch's, "latest" the
    current epoch's (as Kafka's Partition.fetchOffsetForTimestamp)."""
    from types import SimpleNamespace

    from kafkalite.broker.kafka_apis import KafkaApis
    from kafkalite.broker.metadata_cache import MetadataCache

    rm = _leader(tmp_path)
    await rm.append_records(1, 1000, [(TP[0], TP[1], encode_batch([(b"k", b"v", ())] * 3, base_timestamp=1000))])
    rm.handle_leader_and_isr(LeaderAndIsr(9, 1, -1, (PartitionLeadership(TP[0], TP[1], 1, 5, (1,), 1, (1,)),)))
    await rm.append_records(1, 1000, [(TP[0], TP[1], encode_batch([(b"k", b"v", ())] * 3, base_timestamp=2000))])
    apis = KafkaApis(SimpleNamespace(replica_manager=rm, metadata_cache=MetadataCache(), settings={}))
    assert apis._list_offset(*TP, -2, -1)["leader_epoch"] == 3
    assert apis._list_offset(*TP, -1, -1)["leader_epoch"] == 5
    assert {k: v for k, v in apis._list_offset(*TP, 1500, -1).items() if k in ("offset", "leader_epoch")} == {"offset": 3, "leader_epoch": 5}
    assert {k: v for k, v in apis._list_offset(*TP, 500, -1).items() if k in ("offset", "leader_epoch")} == {"offset": 0, "leader_epoch": 3}

