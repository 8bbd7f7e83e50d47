"""KIP-516 at the broker: a topic deleted while this broker was down and created again
under the same name must not find its old log adopted as the new topic's replica. Real
logs in a real log dir, a real replica manager; a restart is a log dir opened again."""

from __future__ import annotations

import os

from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.core.messages import LeaderAndIsr, PartitionLeadership
from kafkalite.log import checkpoint, partition_metadata
from kafkalite.log.config import LogConfig
from kafkalite.log.log_manager import LogManager
from kafkalite.log.records import encode_batch

CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=200)
SETTINGS = {"purgatory.max.size": 100, "min.insync.replicas": 1, "message.max.bytes": 1 << 20}
ID_A, ID_B = "AAAAAAAAAAAAAAAAAAAAAA", "Fo2k4ddTRzq0Tpo4OwCIlw"
TP = ("t", 0)


def _lai(topic_id: str | None, leader: int = 1, epoch: int = 0) -> LeaderAndIsr:
    return LeaderAndIsr(9, 1, -1, (PartitionLeadership("t", 0, leader, epoch, (1,), 0, (1,)),),
                        topic_ids={} if topic_id is None else {"t": topic_id})


def _metadata(log_dir: str) -> str:
    with open(os.path.join(log_dir, "t-0", partition_metadata.FILE_NAME)) as f:
        return f.read()


def _broker(log_dir: str) -> tuple[LogManager, ReplicaManager]:
    logs = LogManager([log_dir], CONFIG)
    logs.open_all(now_ms=0)
    rm = ReplicaManager(1, logs, CONFIG, dict(SETTINGS), BrokerMetrics())
    rm.load_local_partitions()
    return logs, rm


def _old_topic_log(log_dir: str, topic_id: str | None) -> None:
    """The old topic's t-0: 30 records in epochs 3 and 7, checkpointed, stopped cleanly."""
    logs = LogManager([log_dir], CONFIG)
    logs.open_all(now_ms=0)
    plog = logs.get_or_create("t", 0, now_ms=0)
    for offset in range(30):
        plog.append_as_leader(encode_batch([(b"k", b"old" * 10, ())], base_timestamp=1000 + offset), 3 if offset < 20 else 7, offset)
    if topic_id is not None:
        plog.assign_topic_id(topic_id)
    logs.write_hw_checkpoint({TP: 30})
    logs.close()


def test_a_log_of_another_topic_id_is_deleted_and_a_fresh_one_made(tmp_path):
    log_dir = str(tmp_path / "d")
    _old_topic_log(log_dir, ID_A)
    assert _metadata(log_dir) == f"version: 0\ntopic_id: {ID_A}\n"
    logs, rm = _broker(log_dir)
    assert rm.partitions[TP].topic_id == ID_A and rm.partitions[TP].leo == 30
    answer = rm.handle_leader_and_isr(_lai(ID_B, epoch=0))  # the new topic's first epoch, below the old 7
    assert answer["partitions"] == [["t", 0, 0]]
    part = rm.partitions[TP]
    assert part.leo == 0 and part.hw == 0 and part.is_leader and part.topic_id == ID_B
    plog = logs.get("t", 0)
    assert plog.topic_id == ID_B and plog.leader_epoch_cache.epoch_entries() == [(0, 0)]
    # the old log's checkpoint entries went with it (LogManager.forget_deleted)
    assert checkpoint.read_offsets(os.path.join(log_dir, checkpoint.REPLICATION_OFFSET_CHECKPOINT)) == {}
    assert checkpoint.read_offsets(os.path.join(log_dir, checkpoint.RECOVERY_POINT_CHECKPOINT)) == {}
    results, _ = rm.append_now(1, [("t", 0, encode_batch([(b"k", b"new", ())], base_timestamp=5))])
    assert results[TP]["error"] == 0 and results[TP]["base_offset"] == 0
    assert _metadata(log_dir) == f"version: 0\ntopic_id: {ID_B}\n"  # made with the directory
    logs.close()
    logs, rm = _broker(log_dir)  # restarted
    assert rm.partitions[TP].topic_id == ID_B and rm.partitions[TP].leo == 1
    assert rm.handle_leader_and_isr(_lai(ID_B, epoch=1))["partitions"] == [["t", 0, 0]]
    assert rm.partitions[TP].leo == 1  # the same topic: kept
    logs.close()


def test_replaced_logs_rewrite_the_checkpoints_once_per_request(tmp_path):
    """Three partitions of an earlier topic replaced by one LeaderAndIsr: the dir's
    checkpoint files are rewritten once, not once per partition (1,000 took seconds on the
    broker's loop)."""
    log_dir = str(tmp_path / "d")
    logs = LogManager([log_dir], CONFIG)
    logs.open_all(now_ms=0)
    for p in range(3):
        plog = logs.get_or_create("t", p, now_ms=0)
        plog.append_as_leader(encode_batch([(b"k", b"old", ())], base_timestamp=1), 3, 0)
        plog.assign_topic_id(ID_A)
    logs.write_hw_checkpoint({("t", p): 1 for p in range(3)})
    logs.close()
    logs, rm = _broker(log_dir)
    calls = []
    real = logs.forget_deleted
    logs.forget_deleted = lambda: (calls.append(1), real())[1]
    request = LeaderAndIsr(9, 1, -1, tuple(PartitionLeadership("t", p, 1, 0, (1,), 0, (1,)) for p in range(3)),
                           topic_ids={"t": ID_B})
    assert rm.handle_leader_and_isr(request)["partitions"] == [["t", p, 0] for p in range(3)]
    assert calls == [1] and all(rm.partitions[("t", p)].leo == 0 for p in range(3))
    assert checkpoint.read_offsets(os.path.join(log_dir, checkpoint.REPLICATION_OFFSET_CHECKPOINT)) == {}
    logs.close()


def test_a_log_without_a_topic_id_is_kept_and_told_it_durably(tmp_path):
    """A log from before topic ids (no partition.metadata) is the topic's as before; the
    file is written at once and survives a kill -9 (a log dir opened again without close)."""
    log_dir = str(tmp_path / "d")
    _old_topic_log(log_dir, None)
    assert not os.path.exists(os.path.join(log_dir, "t-0", partition_metadata.FILE_NAME))
    logs, rm = _broker(log_dir)
    rm.handle_leader_and_isr(_lai(ID_B, epoch=8))
    assert rm.partitions[TP].leo == 30 and rm.partitions[TP].topic_id == ID_B
    assert _metadata(log_dir) == f"version: 0\ntopic_id: {ID_B}\n"
    again = LogManager([log_dir], CONFIG)  # kill -9: no close
    again.open_all(now_ms=0)
    assert again.get("t", 0).topic_id == ID_B and again.get("t", 0).log_end_offset == 30
    again.close()


def test_a_leader_and_isr_without_ids_keeps_the_log(tmp_path):
    """An older controller's request carries no ids: nothing can be told, nothing changes."""
    log_dir = str(tmp_path / "d")
    _old_topic_log(log_dir, ID_A)
    logs, rm = _broker(log_dir)
    rm.handle_leader_and_isr(_lai(None, epoch=8))
    assert rm.partitions[TP].leo == 30 and rm.partitions[TP].topic_id == ID_A
    logs.close()


def test_an_unreadable_partition_metadata_file_reads_as_no_id(tmp_path):
    log_dir = str(tmp_path / "d")
    _old_topic_log(log_dir, ID_A)
    with open(os.path.join(log_dir, "t-0", partition_metadata.FILE_NAME), "w") as f:
        f.write("garbage")
    logs, rm = _broker(log_dir)
    assert rm.partitions[TP].topic_id is None and rm.partitions[TP].leo == 30
    logs.close()
