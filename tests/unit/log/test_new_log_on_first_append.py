"""Issue 13, topic creation: a new partition makes no directory and no file until its first
append (LogSegment.deferred, Log.on_disk). Creating 10,000 partitions spent more than half of
each broker's LeaderAndIsr making them."""

from __future__ import annotations

import os

from kafkalite.log import checkpoint
from kafkalite.log.config import LogConfig
from kafkalite.log.log_manager import LogManager
from kafkalite.log.records import decode_records, encode_batch

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128)


def _append(lg, value: bytes, epoch: int = 0) -> int:
    return lg.append_as_leader(encode_batch([(None, value, ())]), epoch, 0).first_offset


def _values(lg) -> list[bytes]:
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:  # a read stops at a segment's end
        records = list(decode_records(lg.read(offset, 1 << 20)))
        out += [r.value for r in records]
        offset = records[-1].offset + 1
    return out


def test_a_new_partition_makes_its_directory_at_its_first_append(tmp_path):
    manager = LogManager([str(tmp_path)], CONFIG)
    manager.open_all(now_ms=0)
    lg = manager.get_or_create("t", 0, now_ms=0)
    assert not lg.on_disk and not os.path.exists(lg.dir)
    assert lg.log_end_offset == 0 and lg.read(0, 100) == b"" and list(lg.iter_batch_headers()) == []
    assert lg.offset_for_timestamp(0) is None and lg.bytes_available(0, 10) == 0
    assert _append(lg, b"a") == 0
    assert lg.on_disk and sorted(os.listdir(lg.dir)) == ["00000000000000000000.log"]
    assert _values(lg) == [b"a"]
    manager.close()
    again = LogManager([str(tmp_path)], CONFIG)
    again.open_all(now_ms=0)
    assert _values(again.get("t", 0)) == [b"a"]
    again.close()


def test_a_partition_never_written_touches_no_disk_and_is_made_again_after_a_restart(tmp_path):
    manager = LogManager([str(tmp_path)], CONFIG)
    manager.open_all(now_ms=0)
    lg = manager.get_or_create("t", 0, now_ms=0)
    lg.leader_epoch_cache.assign(3, 0)  # became leader: the epoch is remembered, not written
    lg.truncate_to(0)
    lg.truncate_fully_and_start_at(0)
    assert lg.maybe_roll(10**12) is False
    assert lg.delete_retained_segments(10**12) == 0
    assert lg.active_segment.mtime_ms() == 0  # its creation time: what its file's mtime would be
    assert manager.sync_new_dirs() == 0  # nothing to fsync for it yet
    lg.flush()
    manager.close()  # flushes, checkpoints and closes every log
    assert "t-0" not in os.listdir(tmp_path)
    again = LogManager([str(tmp_path)], CONFIG)
    again.open_all(now_ms=0)
    assert again.get("t", 0) is None
    made = again.get_or_create("t", 0, now_ms=0)
    assert made.log_end_offset == 0 and _append(made, b"b") == 0
    again.close()


def test_deleting_a_partition_never_written_removes_nothing(tmp_path):
    manager = LogManager([str(tmp_path)], CONFIG)
    manager.open_all(now_ms=0)
    manager.get_or_create("t", 0, now_ms=0)
    written = manager.get_or_create("t", 1, now_ms=0)
    _append(written, b"x")
    assert manager.delete_log("t", 0) is True
    assert manager.delete_log("t", 1) is True
    assert not any(name.startswith("t-") for name in os.listdir(tmp_path))
    assert manager.get("t", 0) is None and manager.delete_log("t", 0) is False
    manager.close()


def test_a_follower_starting_past_zero_makes_its_directory_so_a_restart_keeps_the_offset(tmp_path):
    """A restart must not bring a log back at offset 0 that stood at its leader's log start."""
    manager = LogManager([str(tmp_path)], CONFIG)
    manager.open_all(now_ms=0)
    lg = manager.get_or_create("t", 0, now_ms=0)
    lg.truncate_fully_and_start_at(500)
    assert lg.on_disk and os.path.isdir(lg.dir)
    assert (lg.log_start_offset, lg.log_end_offset) == (500, 500)
    manager.close()
    again = LogManager([str(tmp_path)], CONFIG)
    again.open_all(now_ms=0)
    reopened = again.get("t", 0)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (500, 500)
    again.close()


def test_the_log_dir_is_synced_for_a_new_partition_once_its_first_append_made_it(tmp_path, monkeypatch):
    synced: list[str] = []
    real = checkpoint.fsync_dir
    monkeypatch.setattr(checkpoint, "fsync_dir", lambda d: (synced.append(d), real(d)))
    manager = LogManager([str(tmp_path)], CONFIG)
    manager.open_all(now_ms=0)
    idle = manager.get_or_create("t", 0, now_ms=0)
    busy = manager.get_or_create("t", 1, now_ms=0)
    synced.clear()
    assert manager.sync_new_dirs() == 0 and synced == []
    _append(busy, b"x")
    assert manager.sync_new_dirs() == 1 and synced == [os.path.abspath(str(tmp_path))]
    assert not busy.parent_dir_unsynced and idle.parent_dir_unsynced
    _append(idle, b"y")  # made later: picked up by the next round, not lost by the earlier one
    synced.clear()
    assert manager.sync_new_dirs() == 1 and synced == [os.path.abspath(str(tmp_path))]
    assert not idle.parent_dir_unsynced
    manager.close()


def test_a_directory_made_meanwhile_under_the_same_name_is_emptied_of_our_files(tmp_path):
    manager = LogManager([str(tmp_path)], CONFIG)
    manager.open_all(now_ms=0)
    lg = manager.get_or_create("t", 0, now_ms=0)
    os.mkdir(lg.dir)
    stem = os.path.join(lg.dir, "00000000000000000000")
    for suffix in (".log", ".index", ".timeindex"):
        with open(stem + suffix, "wb") as f:
            f.write(b"\xff" * 64)
    for i in range(20):
        _append(lg, b"v%d" % i)
    assert _values(lg) == [b"v%d" % i for i in range(20)]
    manager.close()
    for suffix in (".index", ".timeindex"):
        with open(stem + suffix, "rb") as f:
            written = f.read()
        assert written and b"\xff" * 8 not in written  # only our entries
    again = LogManager([str(tmp_path)], CONFIG)
    again.open_all(now_ms=0)
    assert _values(again.get("t", 0)) == [b"v%d" % i for i in range(20)]
    assert again.get("t", 0).read(7, 100)[:8] == (7).to_bytes(8, "big")
    again.close()
