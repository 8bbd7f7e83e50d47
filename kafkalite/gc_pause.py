"""Pausing Python's cyclic garbage collector around bulk synchronous work (issue 13).

A broker holding tens of thousands of partitions keeps millions of objects alive. Work
that builds hundreds of thousands of new ones in one go (decoding a 100,000-partition
UpdateMetadata, applying a 10,000-partition LeaderAndIsr, the controller deciding for
every partition) makes the collector run again and again meanwhile, and its older
generations walk the whole heap: measured on a heap like a 33,333-partition broker's,
unpacking a 100,000-partition UpdateMetadata took 553 ms with the collector on and 29 ms
with it paused. Objects made and dropped inside such a block are freed by reference
counting as usual; only cycles wait, and the collector, enabled again at the end, runs
once where it would have run many times.

**What a block leaves alive is frozen, not walked.** Left to the collector, the hundreds of
thousands of objects a bulk block leaves alive (a take-over's partition states, a
10,000-partition LeaderAndIsr's logs and replica states) are walked once as young, again
as middle-aged, and then make up more than a quarter of the long-lived heap, which is when
CPython runs a full collection: the whole unfrozen heap. Measured with 100,000 partitions
over 3 brokers: every topic creation of 10,000 partitions gave each broker a full
collection, 107 ms growing to 700 ms as the heap grew, none of them finding garbage, and
a new controller met two of ~0.5 s in its take-over. So the last block to end, if it left
KEPT_OBJECTS_MIN or more new objects, freezes them (`gc.freeze()` moves every tracked
object to the permanent generation in constant time). Cycles among what it froze are
found only by a full settle (below); objects freed by reference counting are freed as
usual. Small blocks (a frame of 64 KiB of records makes a handful of objects) do not freeze.

`gc_paused()` nests and may be entered from several threads (ZooKeeper decoding runs in
executor threads): the collector is enabled again when the last block ends. It never
enables a collector that someone else disabled. Only the shell uses it: the core stays
free of process-wide switches (DESIGN.md section 10).

**Settling the heap after bulk work.** Pausing is not enough on its own: the objects such a
block leaves alive (a partition's log, segments, replica state, its metadata) stay alive
for hours, and every full collection walks them again. Meanwhile ordinary traffic keeps
promoting short-lived objects (a follower's fetch of thousands of partitions is parked for
up to half a second, long enough to reach the oldest generation), and CPython runs a full
collection whenever those exceed a quarter of the long-lived heap. Measured on an idle
broker holding 6,667 replicas of a 10,000-partition topic: a full collection every ~1.4 s,
165 ms each, 12% of a core for nothing. `settle_if_due()`, called by the broker's periodic
work, collects once a little after bulk work has ended and then freezes the survivors
(`gc.freeze()`: they move to a permanent generation no collection walks); later full
collections walk only what is young.

A settle walks only what is not frozen yet, i.e. what was made since the last one: after
creating a 6-partition topic that is a few thousand objects and a millisecond, not the
whole heap. (Unfreezing first made every settle walk everything again, 100k objects and
106-288 ms of a stalled loop on a broker with a handful of partitions, on every broker at
once 10 s after each topic creation: a produce benchmark that creates its topic met it in
every run.) Frozen objects that later die in a cycle (a closed connection's, a deleted
topic's) are found by a full settle, which unfreezes first: at most once per
SETTLE_FULL_INTERVAL_S, and only when bulk work asks for a settle then.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # blocks open now, in every thread
_paused_by_us = False  # whether the collector was on when the first of them began
_bulk_ended_at: float | None = None  # monotonic time the last block ended, if not settled since
_settled_at = float("-inf")
_fully_settled_at = float("-inf")

# A settle waits until bulk work has been quiet this long, and comes at most this often. Its
# one full collection holds the loop (0.1-0.4 s at 10,000 partitions, about 1 s at 33,333),
# so it waits well past a burst: a broker applying a LeaderAndIsr gets an UpdateMetadata
# right after, and a failure often follows other changes (with a 2 s wait, a controller killed 1-2 s after
# creating 100,000 partitions could meet its successor in a settle).
SETTLE_QUIET_S = 10.0
SETTLE_INTERVAL_MIN_S = 30.0
SETTLE_FULL_INTERVAL_S = 3600.0

# Blocks that leave at least this many more objects alive than they found (the youngest
# generation's count: allocations less deallocations) freeze them as they end.
KEPT_OBJECTS_MIN = 50_000

# Frames smaller than this are decoded with the collector as it is: pausing costs two
# calls, and a small frame makes too few objects to trigger a collection anyway.
BULK_FRAME_BYTES_MIN = 64 * 1024


@contextmanager
def gc_paused() -> Iterator[None]:
    global _depth, _paused_by_us, _bulk_ended_at
    with _lock:
        if _depth == 0:
            _paused_by_us = gc.isenabled()
            if _paused_by_us:
                gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            assert _depth >= 0
            _bulk_ended_at = time.monotonic()
            if _depth == 0 and _paused_by_us:
                _paused_by_us = False
                if gc.get_count()[0] >= KEPT_OBJECTS_MIN:
                    gc.freeze()  # what the blocks left alive is kept, not walked (see above)
                gc.enable()


def note_bulk_work() -> None:
    """Bulk work outside a paused block (e.g. loading every log at start-up) also asks for a settle."""
    global _bulk_ended_at
    with _lock:
        _bulk_ended_at = time.monotonic()


def settle_if_due(now: float | None = None) -> float | None:
    """Collect and freeze the survivors if bulk work ended SETTLE_QUIET_S ago or more and
    the last settle was SETTLE_INTERVAL_MIN_S ago or more; returns the seconds it took, or
    None if it was not due. Call it from the thread that runs the process's main work."""
    global _bulk_ended_at, _settled_at, _fully_settled_at
    now = time.monotonic() if now is None else now
    with _lock:
        due = (_depth == 0 and _bulk_ended_at is not None and now - _bulk_ended_at >= SETTLE_QUIET_S
               and now - _settled_at >= SETTLE_INTERVAL_MIN_S)
        if not due:
            return None
        _bulk_ended_at = None
        _settled_at = now
        full = now - _fully_settled_at >= SETTLE_FULL_INTERVAL_S
        if full:
            _fully_settled_at = now
    return _settle(full)


def _settle(full: bool) -> float:
    """Collect and freeze the survivors; `full` unfreezes first. Returns the seconds it took."""
    started = time.perf_counter()
    if full:
        gc.unfreeze()  # what died in a cycle since it was frozen is found again
    gc.collect()  # (the frozen generation is not walked: only what is new since the last settle)
    gc.freeze()
    return time.perf_counter() - started


def settle_now() -> float:
    """A full settle at once (unfreeze, collect, freeze), counted as the last settle and the
    last full one; returns the seconds it took. For start-up, before the broker registers:
    the first settle of a process walks its whole heap (nothing is frozen yet), 40-170 ms
    of a stopped loop. Left to `settle_if_due`, it came SETTLE_QUIET_S after start-up, on
    every broker of a cluster started together, under whatever traffic had begun by then:
    a produce benchmark started at once met it as its one stall (p999 110 ms against a p99
    of 7 ms in every other second). Before registering, nobody is waiting on this broker."""
    global _bulk_ended_at, _settled_at, _fully_settled_at
    now = time.monotonic()
    with _lock:
        _bulk_ended_at = None
        _settled_at = _fully_settled_at = now
    return _settle(full=True)


def depth() -> int:
    """Blocks open now (tests)."""
    return _depth
