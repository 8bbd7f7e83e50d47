"""Issue 13, 100k partitions: segment descriptors live in a bounded LRU
(kafkalite.log.open_files), and creating a partition does not fsync its log dir (the
periodic flush does, once per dir)."""

from __future__ import annotations

import os
import random
import threading

import pytest

from kafkalite.log import checkpoint
from kafkalite.log.config import LogConfig
from kafkalite.log.log import Log
from kafkalite.log.log_manager import LogManager
from kafkalite.log.open_files import OpenFiles
from kafkalite.log.records import decode_records, encode_batch, iter_headers
from kafkalite.log.segment import LogSegment

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=256)
CAP = 8


@pytest.fixture
def small_lru(monkeypatch):
    """An LRU of CAP descriptors for the segments made during the test."""
    files = OpenFiles(CAP)
    monkeypatch.setattr(LogSegment, "files", files)
    return files


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_more_partitions_than_the_descriptor_bound_all_read_and_write_correctly(tmp_path, small_lru):
    manager = LogManager([str(tmp_path / "a"), str(tmp_path / "b")], CONFIG)
    manager.open_all(now_ms=0)
    before = open_fds()
    rng = random.Random(7)
    partitions = 60  # several segments each, far more segments than CAP
    written: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for round_no in range(12):
        for p in rng.sample(range(partitions), partitions):
            lg = manager.get_or_create("t", p, now_ms=round_no)
            value = f"{p}-{round_no}".encode() * rng.randint(1, 40)
            lg.append_as_leader(encode_batch([(None, value, ())], base_timestamp=round_no), 0, round_no)
            written[p].append(value)
        assert len(small_lru) <= CAP
        assert open_fds() - before <= CAP
    assert small_lru.evictions > 0
    assert any(len(manager.get("t", p).segments) > 1 for p in range(partitions))
    for p in rng.sample(range(partitions), partitions):
        lg = manager.get("t", p)
        values = [r.value for b in _batches(lg) for r in b]
        assert values == written[p]
    manager.close()
    assert len(small_lru) == 0
    # And after a clean restart, with the same bound.
    again = LogManager([str(tmp_path / "a"), str(tmp_path / "b")], CONFIG)
    again.open_all(now_ms=0)
    assert len(small_lru) <= CAP
    for p in range(partitions):
        assert [r.value for b in _batches(again.get("t", p)) for r in b] == written[p]
    again.close()


def test_truncation_and_flush_after_eviction(tmp_path, small_lru):
    logs = [Log.open(str(tmp_path / f"t-{p}"), CONFIG, now_ms=0) for p in range(3 * CAP)]
    for i, lg in enumerate(logs):
        for n in range(5):
            lg.append_as_leader(encode_batch([(None, b"x" * (i + n + 1), ())]), 0, 0)
    for lg in logs:  # every descriptor was evicted at least once by the later logs
        lg.flush()
        assert lg.recovery_point == 5
        assert lg.truncate_to(3)
        assert lg.log_end_offset == 3
        lg.append_as_leader(encode_batch([(None, b"after", ())]), 1, 0)
        assert [r.value for b in _batches(lg) for r in b][-1] == b"after"
    for lg in logs:
        lg.close()
    assert len(small_lru) == 0


def test_concurrent_dups_never_return_another_segments_file(tmp_path, small_lru):
    """LogManager.flush_all dups descriptors on a thread pool while others evict."""
    logs = [Log.open(str(tmp_path / f"t-{p}"), CONFIG, now_ms=0) for p in range(4 * CAP)]
    for p, lg in enumerate(logs):
        lg.append_as_leader(encode_batch([(None, str(p).encode(), ())]), 0, 0)
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(300):
            p = rng.randrange(len(logs))
            segment = logs[p].segments[0]
            fd = segment.dup_fd()
            try:
                if os.fstat(fd).st_ino != os.stat(segment.log_path).st_ino:
                    errors.append(f"dup of {segment.log_path} is another file")
            finally:
                os.close(fd)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for lg in logs:
        lg.close()


def test_creating_partitions_does_not_fsync_the_log_dir_per_partition(tmp_path, monkeypatch):
    synced: list[str] = []
    real = checkpoint.fsync_dir
    monkeypatch.setattr(checkpoint, "fsync_dir", lambda d: (synced.append(d), real(d)))
    log_dir = str(tmp_path / "data")
    manager = LogManager([log_dir], CONFIG)
    manager.open_all(now_ms=0)
    synced.clear()
    for p in range(50):
        manager.get_or_create("t", p, now_ms=0).append_as_leader(encode_batch([(None, b"v", ())]), 0, 0)
    assert synced == []
    assert manager.sync_new_dirs() == 1  # one fsync covers all 50 directory entries
    assert synced == [os.path.abspath(log_dir)]
    assert manager.sync_new_dirs() == 0
    manager.close()


def test_first_flush_of_a_new_log_makes_its_directory_entries_durable_first(tmp_path, monkeypatch):
    synced: list[str] = []
    real = checkpoint.fsync_dir
    monkeypatch.setattr(checkpoint, "fsync_dir", lambda d: (synced.append(d), real(d)))
    log_dir = str(tmp_path / "data")
    manager = LogManager([log_dir], CONFIG)
    lg = manager.get_or_create("t", 0, now_ms=0)
    assert not lg.needs_flush(0)  # an empty new log has nothing a crash could lose
    lg.append_as_leader(encode_batch([(None, b"v", ())]), 0, 0)
    lg.flush()
    assert synced[:2] == [os.path.abspath(log_dir), lg.dir]  # the log dir, then the partition dir
    synced.clear()
    lg.append_as_leader(encode_batch([(None, b"w", ())]), 0, 0)
    lg.flush()
    assert synced == []  # once only
    manager.close()


def test_partitions_are_spread_over_log_dirs_by_count(tmp_path):
    dirs = [str(tmp_path / d) for d in "abc"]
    manager = LogManager(dirs, CONFIG)
    manager.open_all(now_ms=0)
    for p in range(30):
        manager.get_or_create("t", p, now_ms=0)
    counts = {d: sum(1 for p in range(30) if manager.dir_of("t", p) == os.path.abspath(d)) for d in dirs}
    assert sorted(counts.values()) == [10, 10, 10]
    manager.delete_log("t", 0)
    lg_dir = manager.dir_of("t", 0)
    assert lg_dir is None
    manager.get_or_create("t", 100, now_ms=0)  # refills the dir that lost one
    assert manager.dir_of("t", 100) == os.path.abspath(dirs[0])
    manager.close()


def _batches(lg: Log) -> list[list]:
    """The records of every batch in the log, batch by batch (a read stops at a segment's end)."""
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 30, max_offset=lg.log_end_offset)
        for pos, header in iter_headers(data):
            out.append(decode_records(data, pos))
            offset = header.last_offset + 1
    return out
