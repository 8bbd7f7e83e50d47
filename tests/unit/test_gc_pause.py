"""kafkalite.gc_pause: the collector is off inside bulk blocks and back on after the last one."""

from __future__ import annotations

import gc
import threading

import pytest

from kafkalite.gc_pause import depth, gc_paused


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    assert depth() == 0
    if not was:
        gc.disable()


def test_nested_blocks_enable_the_collector_after_the_outermost():
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_exception_inside_still_enables_the_collector():
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_disabled_by_someone_else_stays_disabled():
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_blocks_in_two_threads_overlapping_enable_once_both_ended():
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10)
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's block is still open
    leave.set()
    t.join(10)
    assert gc.isenabled()


def test_the_heap_is_settled_once_bulk_work_has_been_quiet_and_then_no_more_often_than_the_interval():
    import time

    from kafkalite import gc_pause

    gc_pause._settled_at = float("-inf")  # (a fresh process's state)
    gc_pause._fully_settled_at = float("-inf")
    gc_pause._bulk_ended_at = None
    assert gc_pause.settle_if_due() is None  # no bulk work yet: nothing to settle
    with gc_paused():
        survivors = [[i] for i in range(10_000)]  # long-lived objects made by bulk work
    ended = time.monotonic()
    assert gc_pause.settle_if_due(ended + gc_pause.SETTLE_QUIET_S / 2) is None  # not quiet long enough
    try:
        assert gc_pause.settle_if_due(ended + gc_pause.SETTLE_QUIET_S) is not None
        assert gc.get_freeze_count() >= len(survivors)  # they no longer cost a full collection
        gc_pause.note_bulk_work()
        later = time.monotonic() + gc_pause.SETTLE_QUIET_S
        assert gc_pause.settle_if_due(later) is None  # within the minimum interval of the last settle
        assert gc_pause.settle_if_due(ended + gc_pause.SETTLE_QUIET_S + gc_pause.SETTLE_INTERVAL_MIN_S) is not None
        assert gc_pause.settle_if_due(ended + 10 * gc_pause.SETTLE_INTERVAL_MIN_S) is None  # settled: nothing new
    finally:
        gc.unfreeze()


def test_a_settle_walks_only_what_is_new_and_a_full_one_finds_frozen_cycles_again():
    """After the first (full) settle, the next ones collect only what was made since: a few
    objects cost next to nothing however big the frozen heap. A cycle that died frozen is
    freed only by a full settle, which comes at most once per SETTLE_FULL_INTERVAL_S."""
    import time
    import weakref

    from kafkalite import gc_pause

    class Node:
        pass

    gc_pause._settled_at = float("-inf")
    gc_pause._fully_settled_at = float("-inf")
    t = time.monotonic()
    try:
        cycle = Node()
        cycle.me = cycle  # dies only through the cyclic collector
        alive = weakref.ref(cycle)
        gc_pause._bulk_ended_at = t  # bulk work ended at t
        assert gc_pause.settle_if_due(t + gc_pause.SETTLE_QUIET_S) is not None  # the first: full
        frozen = gc.get_freeze_count()
        assert frozen > 0
        del cycle
        t += gc_pause.SETTLE_INTERVAL_MIN_S + gc_pause.SETTLE_QUIET_S
        gc_pause._bulk_ended_at = t  # bulk work ended at t
        assert gc_pause.settle_if_due(t + gc_pause.SETTLE_QUIET_S) is not None  # incremental
        assert alive() is not None  # frozen: an incremental settle does not walk it
        assert gc.get_freeze_count() >= frozen
        t += gc_pause.SETTLE_FULL_INTERVAL_S
        gc_pause._bulk_ended_at = t  # bulk work ended at t
        assert gc_pause.settle_if_due(t + gc_pause.SETTLE_QUIET_S) is not None  # full again
        assert alive() is None
    finally:
        gc.unfreeze()


def test_a_block_that_leaves_many_objects_alive_freezes_them_and_a_small_one_does_not():
    """Issue 13: what a bulk block leaves alive (a take-over's 100,000 partition states) is
    frozen when the last block ends, so no later collection walks it and it never makes a
    quarter of the long-lived heap (CPython's trigger for a full collection). A block that
    leaves few objects (a large frame of records) leaves them to the collector."""
    from kafkalite import gc_pause

    gc.collect()
    gc.unfreeze()
    try:
        with gc_paused():
            few = [[i] for i in range(100)]
        assert gc.get_freeze_count() == 0
        with gc_paused():
            many = [[i] for i in range(gc_pause.KEPT_OBJECTS_MIN)]
            with gc_paused():
                pass
            assert gc.get_freeze_count() == 0  # not before the outermost block ends
        assert gc.get_freeze_count() >= len(many) + len(few)
        assert gc.get_count()[0] < 1000  # nothing young left to walk
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_the_start_up_settle_is_the_full_one_so_the_next_settles_walk_only_what_is_new():
    """Issue 13: a process's first settle walks its whole heap. `settle_now` does it at
    start-up (before the broker registers); the settle that bulk work asks for later is
    then incremental, not the full one that stalled every broker of a fresh cluster 10 s
    after start-up, under traffic."""
    import time
    import weakref

    from kafkalite import gc_pause

    class Node:
        pass

    gc_pause._settled_at = float("-inf")  # (a fresh process's state)
    gc_pause._fully_settled_at = float("-inf")
    gc_pause._bulk_ended_at = None
    try:
        cycle = Node()
        cycle.me = cycle
        alive = weakref.ref(cycle)
        assert gc_pause.settle_now() >= 0
        assert gc.get_freeze_count() > 0  # the start-up heap is frozen: later collections skip it
        assert alive() is not None  # (alive when frozen)
        del cycle
        t = time.monotonic()
        assert gc_pause.settle_if_due(t + gc_pause.SETTLE_QUIET_S) is None  # no bulk work since: nothing due
        gc_pause._bulk_ended_at = t  # bulk work ended at t
        assert gc_pause.settle_if_due(t + gc_pause.SETTLE_QUIET_S) is None  # within the interval of the start-up settle
        later = t + gc_pause.SETTLE_INTERVAL_MIN_S
        assert gc_pause.settle_if_due(later) is not None
        assert alive() is not None  # incremental: the frozen start-up heap was not walked
    finally:
        gc.unfreeze()
