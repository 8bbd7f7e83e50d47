"""A truncation's recovery point (and the cleaner's first dirty offset) is durable before new records land where the truncated ones
were (kafkalite.broker.replica_manager, Kafka's LogManager.truncateTo). Real logs in a real
log dir, a real replica manager; the kill -9 is a log dir opened again without a close."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "log"))

from compaction_testkit import COMPACT, RETENTION_MS, TP, new_manager, open_manager, read_as_consumer, run_passes

from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.log.config import LogConfig
from kafkalite.log.log_manager import LogManager
from kafkalite.log.records import encode_batch, set_base_offset, set_partition_leader_epoch

CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=200)


def _replicated(offset: int, epoch: int) -> bytes:
    batch = bytearray(encode_batch([(b"k", b"v" * 40, ())], base_timestamp=1000 + offset))
    set_base_offset(batch, 0, offset)
    set_partition_leader_epoch(batch, 0, epoch)
    return bytes(batch)


async def test_a_follower_killed_after_truncating_reopens_with_the_right_epochs(tmp_path):
    """Epochs 4 (offsets 0-19) and 5 (20-39), flushed and checkpointed. The broker follows
    a new leader whose log ends epoch 4 at 20: it truncates to 20 and copies epoch 6 from
    there, then dies before any flush or periodic checkpoint. Reopened, offsets 20-44 are
    epoch 6 and epoch 5 is gone; with the old recovery point (40) on disk the segments below
    it were trusted unscanned, and the cache said offset 30 was epoch 5."""
    log_dir = str(tmp_path / "d")
    logs = LogManager([log_dir], CONFIG)
    logs.open_all()
    plog = logs.get_or_create("t", 0)
    for offset in range(40):
        plog.append_as_leader(encode_batch([(b"k", b"v" * 40, ())], base_timestamp=1000 + offset), 4 if offset < 20 else 5, offset)
    plog.flush()
    logs.checkpoint_recovery_points()
    rm = ReplicaManager(1, logs, CONFIG, {"purgatory.max.size": 100}, BrokerMetrics())
    rm.load_local_partitions()
    part = rm.partitions[("t", 0)]
    snapshot = logs.recovery_points()  # the periodic checkpoint's, taken before the truncation...
    part.truncate_to(20)
    await asyncio.sleep(0)  # the loop's next turn: the recovery point is written
    logs.write_recovery_points(snapshot)  # ...and written after it: it must not raise it again
    for offset in range(20, 45):
        plog.append_as_follower(_replicated(offset, 6), now_ms=100)
    # kill -9: no close, no flush
    reopened = LogManager([log_dir], CONFIG)
    reopened.open_all()
    again = reopened.get("t", 0)
    assert again is not None and again.log_end_offset == 45
    assert again.leader_epoch_cache.epoch_entries() == [(4, 0), (6, 20)]
    assert again.leader_epoch_cache.end_offset_for(5, again.log_end_offset) == (4, 20)
    reopened.close()


async def test_a_follower_killed_after_truncating_below_its_first_dirty_offset_keeps_a_deleted_key_deleted(tmp_path):
    """A compacted log cleaned through offset F, the cleaner checkpoint saying F. The broker
    follows a new leader: it truncates to 20 < F and copies from there a tombstone of key A
    (whose value is at offset 0), then dies before any periodic checkpoint. With F still
    on disk the reopened log counted the offsets from 20 to F as clean: the tombstone was
    never mapped, so a pass stamped it while A's value stayed, and once
    delete.retention.ms passed a pass removed it: A's deleted value was back."""
    log_dir = str(tmp_path / "d")
    logs, plog = open_manager(log_dir, dataclasses.replace(COMPACT, segment_bytes=2000))
    plog.append_as_leader(encode_batch([(b"A", b"deleted later", ())], base_timestamp=1000), 4, 1000)
    for offset in range(1, 40):
        plog.append_as_leader(encode_batch([(b"k%d" % offset, b"v" * 40, ())], base_timestamp=1000 + offset), 4 if offset < 20 else 5, offset)
    run_passes(new_manager(logs), plog, 50_000)
    first_dirty = plog.first_dirty_offset
    assert first_dirty > 20
    logs.write_cleaner_checkpoints(logs.cleaner_checkpoints())
    rm = ReplicaManager(1, logs, COMPACT, {"purgatory.max.size": 100}, BrokerMetrics())
    rm.load_local_partitions()
    snapshot = logs.cleaner_checkpoints()  # the periodic checkpoint's, taken before the truncation...
    rm.partitions[TP].truncate_to(20)
    assert plog.first_dirty_offset == 20
    await asyncio.sleep(0)  # the loop's next turn: the checkpoints are written
    logs.write_cleaner_checkpoints(snapshot)  # ...and written after it: it must not raise it again
    tombstone = bytearray(encode_batch([(b"A", None, ())], base_timestamp=60_000))
    set_base_offset(tombstone, 0, 20)
    set_partition_leader_epoch(tombstone, 0, 6)
    plog.append_as_follower(bytes(tombstone), now_ms=60_000)
    for offset in range(21, first_dirty + 10):
        plog.append_as_follower(_replicated(offset, 6), now_ms=60_000)
    # kill -9: no close, no flush
    reopened = LogManager([log_dir], COMPACT)
    reopened.open_all()
    again = reopened.get(*TP)
    assert again.first_dirty_offset <= 20
    manager = new_manager(reopened)
    for now_ms in (100_000, 100_000 + 10 * RETENTION_MS):  # past any horizon the first pass set
        run_passes(manager, again, now_ms)
        assert [r.value for r in read_as_consumer(again) if r.key == b"A"][-1:] in ([], [None])  # A reads as deleted
    reopened.close()
