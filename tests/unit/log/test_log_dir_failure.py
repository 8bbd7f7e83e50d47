"""A log dir failing while the broker serves (issue 14, KIP-112): LogManager takes it
offline, writes nothing there any more, and leaves it to be recovered at the next start."""

from __future__ import annotations

import os

import pytest

from kafkalite.log.config import LogConfig
from kafkalite.log.errors import LogDirError, LogDirFailure
from kafkalite.log.log_manager import CLEAN_SHUTDOWN_MARKER, LogManager
from kafkalite.log.records import encode_batch

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=200)


def test_an_offline_dir_is_forgotten_skipped_and_recovered_at_the_next_start(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    logs = LogManager([a, b], CONFIG)
    logs.open_all()
    for p in range(4):
        logs.get_or_create("t", p).append_as_leader(encode_batch([(None, b"v%d" % p, ())]), 0, 0)
    in_b = sorted(tp for tp in logs.logs() if logs.dir_of(*tp) == os.path.abspath(b))
    assert len(in_b) == 2
    gone = logs.mark_offline(b)
    assert gone == in_b and logs.offline_dirs == {os.path.abspath(b)} and logs.online_dirs == [os.path.abspath(a)]
    assert all(logs.get(*tp) is None for tp in gone)
    created = logs.get_or_create("t", 9)  # only in the online dir
    created.append_as_leader(encode_batch([(None, b"v9", ())]), 0, 0)
    assert logs.dir_of("t", 9) == os.path.abspath(a) and created is logs.get("t", 9)
    logs.write_hw_checkpoint({tp: 1 for tp in logs.logs()})
    assert not os.path.exists(os.path.join(b, "replication-offset-checkpoint"))
    logs.close()
    assert os.path.exists(os.path.join(a, CLEAN_SHUTDOWN_MARKER))
    assert not os.path.exists(os.path.join(b, CLEAN_SHUTDOWN_MARKER))  # recovered at the next start
    again = LogManager([a, b], CONFIG)
    again.open_all()
    assert sorted(again.logs()) == sorted([*in_b, *(tp for tp in [("t", p) for p in range(4)] if tp not in in_b), ("t", 9)])
    assert all(again.get(*tp).log_end_offset == 1 for tp in in_b)
    again.close()


def test_a_checkpoint_write_failing_in_one_dir_still_writes_the_others_then_names_the_dir(tmp_path, monkeypatch):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    logs = LogManager([a, b], CONFIG)
    logs.open_all()
    logs.get_or_create("t", 0)
    logs.get_or_create("t", 1)
    from kafkalite.log import checkpoint

    real = checkpoint.write_offsets

    def full_disk(path, offsets):
        if path.startswith(os.path.abspath(b)):
            raise OSError(28, "No space left on device")
        real(path, offsets)

    monkeypatch.setattr(checkpoint, "write_offsets", full_disk)
    with pytest.raises(LogDirFailure) as caught:
        logs.write_hw_checkpoint({("t", 0): 0, ("t", 1): 0})
    assert caught.value.log_dir == os.path.abspath(b) and caught.value.cause.errno == 28
    assert os.path.exists(os.path.join(a, "replication-offset-checkpoint"))


def test_with_every_dir_offline_nothing_can_be_created(tmp_path):
    logs = LogManager([str(tmp_path / "only")], CONFIG)
    logs.open_all()
    logs.mark_offline(str(tmp_path / "only"))
    with pytest.raises(LogDirError, match="every log dir is offline"):
        logs.get_or_create("t", 0)


def test_running_out_of_descriptors_fails_the_request_not_the_dir(tmp_path):
    """EMFILE is the process's limit, not the disk's: a plain LogDirError (this request
    gets KAFKA_STORAGE_ERROR), not a LogDirFailure that would take the dir offline."""
    import errno

    from kafkalite.broker.partition import disk_io

    logs = LogManager([str(tmp_path / "a")], CONFIG)
    logs.open_all()
    plog = logs.get_or_create("t", 0)
    with pytest.raises(LogDirError) as caught:
        with disk_io(plog):
            raise OSError(errno.EMFILE, "Too many open files")
    assert not isinstance(caught.value, LogDirFailure)
    with pytest.raises(LogDirFailure):
        with disk_io(plog):
            raise OSError(errno.ENOSPC, "No space left on device")
    logs.close()


def test_a_flush_that_cannot_start_counts_nothing_as_flushed_and_keeps_no_descriptor(tmp_path, monkeypatch):
    """begin_flush takes a descriptor per unflushed segment; when one cannot be had (out of
    descriptors, or no space for an index) the segments already taken must stay unflushed,
    the new epoch must stay due for writing, and the descriptors taken go back: else the
    next flush moved the recovery point past segments never fsynced, and past an epoch the
    epoch file lacks."""
    import errno

    from kafkalite.log.log import Log
    from kafkalite.log.segment import LogSegment

    plog = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=2000, index_interval_bytes=200), now_ms=0)
    for i in range(10):
        plog.append_as_leader(encode_batch([(b"k", b"v" * 40, ())]), 1, i)
    plog.flush()
    for i in range(30):  # a new epoch, over several segments
        plog.append_as_leader(encode_batch([(b"k", b"v" * 40, ())]), 2, i)
    unflushed = [s.base_offset for s in plog.segments if s.unflushed]
    assert len(unflushed) >= 2 and plog.leader_epoch_cache.dirty
    real = LogSegment.files.dup
    taken: list[int] = []

    def dup(segment):
        if taken:
            raise OSError(errno.EMFILE, "Too many open files")
        fd = real(segment)
        taken.append(fd)
        return fd

    monkeypatch.setattr(LogSegment.files, "dup", dup)
    with pytest.raises(OSError):
        plog.begin_flush(10**6)
    monkeypatch.setattr(LogSegment.files, "dup", real)
    with pytest.raises(OSError):
        os.fstat(taken[0])  # given back
    assert [s.base_offset for s in plog.segments if s.unflushed] == unflushed
    assert plog.leader_epoch_cache.dirty
    plog.flush()
    assert plog.recovery_point == plog.log_end_offset and not plog.leader_epoch_cache.dirty
    plog.close()
