"""Crash recovery: torn and bit-flipped segments, corrupt indexes, unreadable log dirs."""

from __future__ import annotations

import os
import random
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.log import checkpoint
from kafkalite.log.config import LogConfig
from kafkalite.log.errors import LogDirError
from kafkalite.log.log import Log
from kafkalite.log.log_manager import CLEAN_SHUTDOWN_MARKER, LogManager
from kafkalite.log.records import encode_batch, validate_batches

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=200)


def build_log(path: str, batches: int = 30, seed: int = 0) -> list[tuple[int, int, int, bytes]]:
    """Write a multi-segment log; return (segment base, position, base offset, bytes) per batch."""
    rng = random.Random(seed)
    log = Log.open(path, CONFIG, now_ms=0)
    for i in range(batches):
        n = rng.randint(1, 4)
        log.append_as_leader(encode_batch([(None, os.urandom(rng.randint(1, 60)), ())] * n, base_timestamp=i), 1, i)
    layout = []
    for segment in log.segments:
        for position, fields in segment.iter_headers():
            data = segment.read_at(position, fields[1] + 12)
            layout.append((segment.base_offset, position, fields[0], data))
    log.close()
    return layout


def all_batches(log: Log) -> list[bytes]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 500)
        for pos, header in validate_batches(data, from_client=False):  # CRC checked here
            out.append(data[pos : pos + header.size_bytes])
            offset = header.last_offset + 1
    return out


def segment_path(path: str, base: int) -> str:
    return os.path.join(path, f"{base:020d}.log")


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.booleans(), st.integers(0, 2**32))
def test_torn_or_bit_flipped_segment_recovers_to_the_last_good_batch(pick, flip, seed):
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "crash-0")
        layout = build_log(path, seed=seed)
        damaged_index = pick % len(layout)
        seg_base, position, _, data = layout[damaged_index]
        file_path = segment_path(path, seg_base)
        with open(file_path, "r+b") as f:
            if flip:
                # Any byte except the partition leader epoch (bytes 12-15), which the CRC does
                # not cover and recovery cannot check (as in Kafka).
                at = rng.choice([i for i in range(8, len(data)) if not 12 <= i < 16])
                f.seek(position + at)
                byte = f.read(1)[0]
                f.seek(position + at)
                f.write(bytes([byte ^ (1 << rng.randrange(8))]))
            else:
                f.truncate(position + rng.randrange(len(data)))
        log = Log.open(path, CONFIG, recovery_point=0, clean_shutdown=False, now_ms=0)
        survivors = all_batches(log)
        assert survivors == [d for _, _, _, d in layout[:damaged_index]]
        expected_leo = layout[damaged_index][2]
        assert log.log_end_offset == expected_leo
        # The log keeps working after recovery.
        result = log.append_as_leader(encode_batch([(None, b"after", ())], base_timestamp=1), 2, 1)
        assert result.first_offset == expected_leo
        log.close()


def test_offsets_going_backwards_truncate(tmp_path):
    path = str(tmp_path / "back-0")
    log = Log.open(path, CONFIG, now_ms=0)
    log.append_as_follower(encode_batch([(None, b"a", ())] * 3, base_offset=0, base_timestamp=1))
    log.close()
    with open(segment_path(path, 0), "ab") as f:  # a valid batch whose offsets go backwards
        f.write(encode_batch([(None, b"b", ())], base_offset=1, base_timestamp=1))
    log = Log.open(path, CONFIG, now_ms=0)
    assert log.log_end_offset == 3
    log.close()


@pytest.mark.parametrize("damage", ["garbage", "misaligned", "wrong_positions", "empty"])
def test_corrupt_index_is_rebuilt_not_trusted(tmp_path, damage):
    path = str(tmp_path / "idx-0")
    layout = build_log(path)
    expected = [d for _, _, _, d in layout]
    index_path = os.path.join(path, f"{layout[0][0]:020d}.index")
    size = os.path.getsize(index_path)
    assert size > 0
    with open(index_path, "r+b") as f:
        if damage == "garbage":
            f.write(os.urandom(size))
        elif damage == "misaligned":
            f.seek(0, 2)
            f.write(b"\x01\x02\x03")
        elif damage == "wrong_positions":
            f.write(b"".join((i).to_bytes(4, "big") + (i * 7 + 3).to_bytes(4, "big") for i in range(1, size // 8 + 1)))
        else:
            f.truncate(0)
    log = Log.open(path, CONFIG, clean_shutdown=True, now_ms=0)
    assert all_batches(log) == expected
    for offset in range(log.log_start_offset, log.log_end_offset):
        assert validate_batches(log.read(offset, 1), from_client=False)[0][1].last_offset >= offset
    log.close()


def test_clean_shutdown_skips_scan_and_unclean_recovers(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    manager = LogManager(dirs, CONFIG)
    manager.open_all(now_ms=0)
    for p in range(4):
        lg = manager.get_or_create("my-topic", p)
        lg.append_as_leader(encode_batch([(None, b"x", ())] * (p + 1), base_timestamp=1), 0, 1)
    assert sorted(len([k for k, d in manager._dir_of.items() if d == x]) for x in dirs) == [2, 2]
    manager.write_hw_checkpoint({("my-topic", p): p for p in range(4)})
    manager.close()
    for d in dirs:
        assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_MARKER))
        assert os.path.exists(os.path.join(d, checkpoint.RECOVERY_POINT_CHECKPOINT))
    manager = LogManager(dirs, CONFIG)
    manager.open_all(now_ms=0)
    for d in dirs:
        assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_MARKER))
    assert {k: lg.log_end_offset for k, lg in manager.logs().items()} == {("my-topic", p): p + 1 for p in range(4)}
    assert manager.read_hw_checkpoint() == {("my-topic", p): p for p in range(4)}
    # Unclean stop: damage one log's tail, reopen without the marker.
    victim = manager.get("my-topic", 3)
    seg = segment_path(victim.dir, 0)
    for lg in manager.logs().values():
        lg.close()
    with open(seg, "r+b") as f:
        f.truncate(os.path.getsize(seg) - 1)
    manager = LogManager(dirs, CONFIG)
    manager.open_all(now_ms=0)
    assert manager.get("my-topic", 3).log_end_offset == 0
    assert manager.get("my-topic", 2).log_end_offset == 3
    assert manager.delete_log("my-topic", 2)
    assert manager.get("my-topic", 2) is None
    manager.close()


def test_unknown_files_and_dirs_are_left_alone(tmp_path):
    log_dir = tmp_path / "d"
    (log_dir / "lost+found").mkdir(parents=True)
    (log_dir / "notes.txt").write_text("keep me")
    (log_dir / "t-0").mkdir()
    (log_dir / "t-0" / "README").write_text("mine")
    # (.cleaned, .swap and .deleted are the log cleaner's: tests/unit/log/test_segment_swap.py)
    (log_dir / "t-0" / "00000000000000000000.log.bak").write_text("x")
    manager = LogManager([str(log_dir)], CONFIG)
    manager.open_all(now_ms=0)
    assert set(manager.logs()) == {("t", 0)}
    manager.close()
    assert (log_dir / "notes.txt").read_text() == "keep me"
    assert (log_dir / "lost+found").is_dir()
    assert (log_dir / "t-0" / "README").read_text() == "mine"
    assert (log_dir / "t-0" / "00000000000000000000.log.bak").exists()


def test_topic_names_with_dashes_split_on_last_dash(tmp_path):
    manager = LogManager([str(tmp_path / "d")], CONFIG)
    manager.open_all()
    manager.get_or_create("a-b-c", 12).append_as_leader(encode_batch([(None, b"v", ())]), 0, 0)
    manager.close()
    manager = LogManager([str(tmp_path / "d")], CONFIG)
    manager.open_all()
    assert set(manager.logs()) == {("a-b-c", 12)}
    manager.close()


def test_unreadable_log_dir_fails_start_up_with_log_dir_error(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(LogDirError, match=str(not_a_dir)):
        LogManager([str(not_a_dir)], CONFIG).open_all()
    part = tmp_path / "d" / "t-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").mkdir()  # a segment we cannot open
    with pytest.raises(LogDirError, match="t-0"):
        LogManager([str(tmp_path / "d")], CONFIG).open_all()
    assert (part / "00000000000000000000.log").is_dir()  # nothing deleted


def test_same_partition_in_two_dirs_is_an_error(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d / "t-0").mkdir(parents=True)
    with pytest.raises(LogDirError, match="t-0"):
        LogManager([str(tmp_path / "a"), str(tmp_path / "b")], CONFIG).open_all()


def test_a_crash_not_yet_announced_is_carried_through_a_clean_stop(tmp_path):
    """A process that recovered after a crash says unclean_start in its registrations (its
    unflushed records may be gone). Stopped cleanly before any registration, its marker
    carries that on, else the next process would say nothing of the records still missing.
    Once a registration said it, a clean stop ends it."""
    d = str(tmp_path / "d")
    manager = LogManager([d], CONFIG)
    manager.open_all(now_ms=0)
    manager.get_or_create("t", 0).append_as_leader(encode_batch([(None, b"x", ())], base_timestamp=1), 0, 1)
    manager.close()
    manager = LogManager([d], CONFIG)
    manager.open_all(now_ms=0)
    assert not manager.recovered_unclean
    manager.flush_all()  # ... then killed: no marker
    for lg in manager.logs().values():
        lg.close()
    manager = LogManager([d], CONFIG)
    manager.open_all(now_ms=0)
    assert manager.recovered_unclean
    manager.close()  # never registered
    manager = LogManager([d], CONFIG)
    manager.open_all(now_ms=0)
    assert manager.recovered_unclean
    manager.unclean_start_announced = True  # a registration said it
    manager.close()
    manager = LogManager([d], CONFIG)
    manager.open_all(now_ms=0)
    assert not manager.recovered_unclean
    manager.close()


def test_names_with_non_ascii_digits_in_a_log_dir_are_not_ours():
    """"²" passes isdigit() but int() raises ValueError: a stray `t-²` directory or
    `²…².log` file broke opening the log dir instead of being left alone."""
    from kafkalite.log import segment_swap
    from kafkalite.log.log import parse_partition_dir_name
    from kafkalite.log.segment import parse_segment_name

    assert parse_partition_dir_name("t-3") == ("t", 3)
    assert parse_partition_dir_name("t-\u00b2") is None
    assert parse_segment_name("0" * 20 + ".log") == 0
    assert parse_segment_name("\u00b2" * 20 + ".log") is None
    assert segment_swap._parse("\u00b2" * 20 + ".log.swap") is None
