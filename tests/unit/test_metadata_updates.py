"""MetadataUpdates: waiters wake on every applied UpdateMetadata, not on a polling timer."""

from __future__ import annotations

import asyncio

from kafkalite.broker.metadata_cache import MetadataUpdates


async def test_wait_until_wakes_when_notified_and_times_out_otherwise():
    updates = MetadataUpdates()
    state = {"ready": False}
    waiter = asyncio.create_task(updates.wait_until(lambda: state["ready"], 5))
    await asyncio.sleep(0.05)
    updates.notify()  # a change that does not satisfy the condition
    await asyncio.sleep(0.05)
    assert not waiter.done()
    state["ready"] = True
    updates.notify()
    assert await asyncio.wait_for(waiter, 1) is True
    assert await updates.wait_until(lambda: False, 0.05) is False
    assert await updates.wait_until(lambda: True, 0) is True


def test_racks_follow_every_update_of_the_live_brokers():
    """The consumer-fetch decision (KIP-392) offers only live brokers; the racks map it
    reads is rebuilt on each UpdateMetadata, never served stale."""
    from kafkalite.broker.metadata_cache import MetadataCache
    from kafkalite.core.messages import BrokerEndpoint, UpdateMetadata

    def endpoint(broker_id: int, rack: str | None) -> BrokerEndpoint:
        return BrokerEndpoint(broker_id, "127.0.0.1", 9000 + broker_id, 9100 + broker_id, 9200 + broker_id, rack, 1)

    cache = MetadataCache()
    assert cache.racks() == {}
    cache.apply_update(UpdateMetadata(1, 1, -1, (endpoint(1, "a"), endpoint(2, "b"), endpoint(3, None))))
    assert cache.racks() == {1: "a", 2: "b", 3: None}
    cache.apply_update(UpdateMetadata(1, 1, -1, (endpoint(1, "a"), endpoint(3, None))))  # 2 died
    assert cache.racks() == {1: "a", 3: None}


def test_an_update_reports_the_partitions_it_deleted():
    """The group coordinator drops committed offsets of deleted partitions: the cache says
    which partitions an update deleted (a deleted topic's, removed partitions), and only those."""
    from kafkalite.broker.metadata_cache import MetadataCache
    from kafkalite.core.messages import BrokerEndpoint, PartitionMetadata, UpdateMetadata

    brokers = (BrokerEndpoint(1, "127.0.0.1", 9001, 9101, 9201, None, 1),)

    def meta(topic: str, p: int) -> PartitionMetadata:
        return PartitionMetadata(topic, p, 1, 0, (1,), (1,), ())

    cache = MetadataCache()
    created = UpdateMetadata(1, 1, -1, brokers, (meta("a", 0), meta("a", 1), meta("b", 0), meta("b", 1)), full=True)
    assert cache.apply_update(created) == []
    assert cache.apply_update(UpdateMetadata(1, 1, -1, brokers, deleted_topics=("a", "gone"))) == [("a", 0), ("a", 1)]
    assert cache.apply_update(UpdateMetadata(1, 1, -1, brokers, deleted_partitions=(("b", 1), ("b", 7)))) == [("b", 1)]
    # listed again in the same update (a merged delta): not deleted
    again = UpdateMetadata(1, 1, -1, brokers, (meta("b", 0),), deleted_topics=("b",))
    assert cache.apply_update(again) == []
    assert cache.partition("b", 0) is not None


def test_a_deletion_merged_with_a_re_creation_still_deletes_what_is_not_listed_again():
    """Two deltas queued for a slow broker merge into one (kafkalite.core.controller_sends):
    topic t (6 partitions) deleted, then created again with 2. The merged update keeps the
    deletion, so the broker's cache drops partitions 2-5 instead of keeping them until its
    next full update (clients hashing keys to them were stranded)."""
    from kafkalite.broker.metadata_cache import MetadataCache
    from kafkalite.core.controller_sends import merged
    from kafkalite.core.messages import BrokerEndpoint, PartitionMetadata, UpdateMetadata

    brokers = (BrokerEndpoint(1, "127.0.0.1", 9001, 9101, 9201, None, 1),)

    def meta(p: int, epoch: int) -> PartitionMetadata:
        return PartitionMetadata("t", p, 1, epoch, (1,), (1,), ())

    cache = MetadataCache()
    cache.apply_update(UpdateMetadata(1, 1, -1, brokers, tuple(meta(p, 7) for p in range(6)), full=True))
    both = merged(UpdateMetadata(1, 1, -1, brokers, deleted_topics=("t",)),
                  UpdateMetadata(1, 1, -1, brokers, (meta(0, 0), meta(1, 0))))
    assert isinstance(both, UpdateMetadata) and both.deleted_topics == ("t",)
    assert cache.apply_update(both) == [("t", p) for p in range(2, 6)]
    assert [p for p in range(6) if cache.partition("t", p) is not None] == [0, 1]
