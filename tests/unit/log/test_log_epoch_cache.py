"""Leader epoch cache (Kafka's LeaderEpochFileCache) and checkpoint files."""

from __future__ import annotations

import os

import pytest

from kafkalite.log import checkpoint
from kafkalite.log.epoch_cache import LeaderEpochCache


def cache_with(*entries):
    cache = LeaderEpochCache(None)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_end_offset_for_follows_kafka():
    cache = cache_with((2, 10), (4, 20), (7, 35))
    leo = 50
    assert cache.end_offset_for(-1, leo) == (-1, -1)
    assert cache.end_offset_for(7, leo) == (7, leo)  # latest epoch: the LEO
    assert cache.end_offset_for(4, leo) == (4, 35)
    assert cache.end_offset_for(5, leo) == (4, 35)  # unknown epoch between: floor epoch, next start
    assert cache.end_offset_for(1, leo) == (1, 10)  # below the first epoch: requested, first start
    assert cache.end_offset_for(8, leo) == (-1, -1)  # above every epoch
    assert LeaderEpochCache(None).end_offset_for(0, leo) == (-1, -1)


def test_assign_removes_non_monotonic_entries():
    cache = cache_with((1, 0), (3, 10), (5, 20))
    assert not cache.assign(5, 25)  # same epoch, later offset: nothing new
    assert cache.assign(4, 15)  # a lower epoch than the latest replaces the tail
    assert cache.epoch_entries() == [(1, 0), (3, 10), (4, 15)]
    assert cache.assign(6, 12)
    assert cache.epoch_entries() == [(1, 0), (3, 10), (6, 12)]
    assert cache.latest_epoch == 6


def test_truncate_from_end_and_start():
    cache = cache_with((1, 0), (3, 10), (5, 20))
    assert cache.truncate_from_end(20)
    assert cache.epoch_entries() == [(1, 0), (3, 10)]
    assert not cache.truncate_from_end(30)
    assert cache.truncate_from_start(12)
    assert cache.epoch_entries() == [(3, 12)]
    assert not cache.truncate_from_start(12)


def test_persisted_atomically_in_kafka_format(tmp_path):
    path = str(tmp_path / checkpoint.LEADER_EPOCH_CHECKPOINT)
    cache = LeaderEpochCache(path)
    cache.assign(0, 0)
    cache.assign(2, 17)
    assert not os.path.exists(path)  # deferred: written by Log.flush()/close(), not per change
    cache.persist()
    assert open(path).read() == "0\n2\n0 0\n2 17\n"
    assert LeaderEpochCache.load(path).epoch_entries() == [(0, 0), (2, 17)]
    assert not os.path.exists(path + ".tmp")


def test_corrupt_epoch_checkpoint_is_discarded(tmp_path):
    path = str(tmp_path / checkpoint.LEADER_EPOCH_CHECKPOINT)
    with open(path, "w") as f:
        f.write("0\n2\n5 10\n3 4\n")  # non-monotonic
    assert LeaderEpochCache.load(path).epoch_entries() == []


def test_offsets_checkpoint_round_trip_and_errors(tmp_path):
    path = str(tmp_path / checkpoint.REPLICATION_OFFSET_CHECKPOINT)
    offsets = {("a-b", 0): 5, ("t", 12): 0}
    checkpoint.write_offsets(path, offsets)
    assert open(path).read() == "0\n2\na-b 0 5\nt 12 0\n"
    assert checkpoint.read_offsets(path) == offsets
    assert checkpoint.read_offsets(str(tmp_path / "missing")) == {}
    for bad in ["", "1\n0\n", "0\n3\nt 0 1\n", "0\n1\nt x 1\n"]:
        with open(path, "w") as f:
            f.write(bad)
        with pytest.raises(checkpoint.CheckpointError):
            checkpoint.read_offsets(path)


def test_unpersisted_epochs_are_rebuilt_from_batches_after_a_crash(tmp_path):
    """The deferred checkpoint is safe: recovery scans past the recovery point and rebuilds
    the epochs of every batch there."""
    from kafkalite.log.config import LogConfig
    from kafkalite.log.log import Log
    from kafkalite.log.records import encode_batch

    d = str(tmp_path / "t-0")
    log = Log.open(d, LogConfig(), now_ms=0)
    log.append_as_leader(encode_batch([(None, b"a", ())]), 3, 0)
    log.flush()
    log.append_as_leader(encode_batch([(None, b"b", ())]), 5, 0)  # epoch 5 not persisted
    # Crash: no close(); reopen as after an unclean stop from the flushed recovery point.
    reopened = Log.open(d, LogConfig(), recovery_point=log.recovery_point, clean_shutdown=False, now_ms=0)
    assert reopened.leader_epoch_cache.epoch_entries() == [(3, 0), (5, 1)]


def test_flush_job_runs_while_the_log_moves_on(tmp_path):
    """A flush job syncs private descriptors: appends, truncation and closing the log in
    between do not break it, and the recovery point never passes unflushed data."""
    from kafkalite.log.config import LogConfig
    from kafkalite.log.log import Log
    from kafkalite.log.records import encode_batch

    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1024), now_ms=0)
    for _ in range(20):
        log.append_as_leader(encode_batch([(None, b"x" * 50, ())]), 1, 0)
    job = log.begin_flush(0)
    log.truncate_to(5)
    for _ in range(10):
        log.append_as_leader(encode_batch([(None, b"y" * 50, ())]), 2, 0)
    job.run()
    log.complete_flush(job)
    assert log.recovery_point <= 5  # truncated meanwhile: nothing after it counts as flushed
    job2 = log.begin_flush(0)
    log.close()
    job2.run()  # the log's own descriptors are closed; the job's dup'd ones are not
    log.complete_flush(job2)
    assert log.recovery_point == 15
