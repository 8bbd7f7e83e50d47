"""A partition deleted and created again before the next periodic checkpoint: after a kill -9
the new log must not load with the deleted log's checkpoint entries (Kafka's
LogManager.asyncDelete rewrites the dir's checkpoints). Real logs, a real replica manager;
the kill -9 is a log dir opened again without a close."""

from __future__ import annotations

import os

from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.log import checkpoint
from kafkalite.log.config import LogConfig
from kafkalite.log.log_manager import LogManager
from kafkalite.log.records import encode_batch

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)


def _fill(plog, batches: int, tag: bytes) -> None:
    for i in range(batches):
        plog.append_as_leader(encode_batch([(None, tag * 20, ())] * 5, base_timestamp=i), 0, i)


def test_a_partition_created_again_keeps_its_first_records_after_a_crash(tmp_path):
    """The old log's start was moved to 33 (DeleteRecords) and checkpointed with its
    recovery point and HW. Deleted (StopReplica), created again, 100 records written and
    flushed, then the broker dies: the new log started at 33 and offsets 0-32 of the new
    topic, acknowledged, were deleted from disk."""
    log_dir = str(tmp_path / "d")
    logs = LogManager([log_dir], CONFIG)
    logs.open_all(now_ms=0)
    old = logs.get_or_create("t", 0, now_ms=0)
    _fill(old, 40, b"x")
    old.maybe_increment_log_start_offset(old.segments[2].base_offset + 3)
    logs.write_recovery_points(logs.recovery_points())
    logs.write_log_start_offsets(logs.log_start_offsets())
    logs.write_hw_checkpoint({("t", 0): 200})
    before = logs.log_start_offsets()  # a periodic snapshot taken before the deletion...
    assert before == {("t", 0): old.log_start_offset} and old.log_start_offset > 0
    rm = ReplicaManager(1, logs, CONFIG, {"purgatory.max.size": 100}, BrokerMetrics())
    rm.load_local_partitions()
    assert rm.delete_unassigned(set()) == [("t", 0)]
    for name in (checkpoint.LOG_START_OFFSET_CHECKPOINT, checkpoint.RECOVERY_POINT_CHECKPOINT,
                 checkpoint.REPLICATION_OFFSET_CHECKPOINT):
        assert checkpoint.read_offsets(os.path.join(log_dir, name)) == {}, name
    new = logs.get_or_create("t", 0, now_ms=0)
    _fill(new, 20, b"n")
    logs.write_log_start_offsets(before)  # ...and written after the re-creation
    new.flush(0)
    # kill -9: no close
    reopened = LogManager([log_dir], CONFIG)
    reopened.open_all(now_ms=0)
    again = reopened.get("t", 0)
    assert (again.log_start_offset, again.log_end_offset) == (0, 100)
    reopened.close()
