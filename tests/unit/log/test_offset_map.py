"""The cleaner's offset map and its rate limiter: bounded memory, bounded I/O."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.log.offset_map import ENTRY_BYTES_MAX, OffsetMap, map_key
from kafkalite.log.throttler import Throttler
from kafkalite.testing.fake_clock import FakeClock


@pytest.mark.parametrize("buffer_bytes", [64 * 1024, 1 << 20, 3 << 20])
def test_a_full_map_stays_within_its_buffer(buffer_bytes):
    """Measured, not assumed: the dict, its keys and offsets of a full map take no more
    than log.cleaner.dedupe.buffer.size bytes (keys of both kinds, raw and digested)."""
    tracemalloc.start()
    try:
        offset_map = OffsetMap.for_buffer(buffer_bytes)
        i = 0
        while offset_map.put(b"key-%d" % i if i % 2 else b"a-key-longer-than-fifteen-bytes-%d" % i, 10**12 + i):
            i += 1
        used, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(offset_map) == offset_map.entries_max == buffer_bytes // ENTRY_BYTES_MAX
    assert peak <= buffer_bytes


def test_a_full_map_refuses_new_keys_but_updates_known_ones():
    offset_map = OffsetMap(2)
    assert offset_map.put(b"a", 1) and offset_map.put(b"b", 2)
    assert not offset_map.put(b"c", 3)
    assert offset_map.get(b"c") is None
    assert offset_map.put(b"a", 4)
    assert (offset_map.get(b"a"), offset_map.get(b"b"), len(offset_map), offset_map.latest_offset) == (4, 2, 2, 4)


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=200))
def test_map_keys_never_collide_between_raw_and_digested_keys(keys):
    slots = {}
    for key in keys:
        slots.setdefault(map_key(key), set()).add(key)
    assert all(len(v) == 1 for v in slots.values())
    assert all(len(map_key(k)) == 16 for k in keys if len(k) > 15)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 2_000_000), st.floats(0, 0.05)), min_size=1, max_size=200), st.sampled_from([1e5, 1e6, 5e7]))
def test_the_throttler_holds_the_average_rate(chunks, rate):
    """Whatever the pattern of reads and writes, the bytes counted over the time they took
    (work plus sleeps) stay at or below the limit, up to one check interval's worth, after
    every call (a burst shorter than the interval included)."""
    clock = FakeClock()
    throttler = Throttler(rate, clock, clock.sleep, check_interval_s=0.1)
    total = 0
    for size, work_s in chunks:
        clock.now += work_s
        throttler.maybe_throttle(size)
        total += size
        assert total <= rate * (clock.now + 0.1) + 1e-6 * rate
    assert all(s > 0 for s in clock.slept)  # it never asks for a sleep of nothing


def test_an_unlimited_throttler_never_sleeps():
    clock = FakeClock()
    throttler = Throttler(float("inf"), clock, clock.sleep)
    for _ in range(100):
        clock.now += 0.2
        throttler.maybe_throttle(10**9)
    assert throttler.slept_s == 0
