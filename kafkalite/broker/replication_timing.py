"""Where the time of an acks=all round trip goes (issue 13, item 2): measurements only;
nothing here decides anything.

- `AppendTimes` (a leader's, per partition): when each recent batch was appended, so the
  first fetch of a follower that covers a batch gives "appended -> this follower holds it"
  (`kafkalite_replication_catch_up_seconds{follower}`); the slower follower of the ISR
  decides when an acks=all produce is answered.
- `scheduler_seconds()`: how long the event-loop thread ran on a CPU and how long it was
  runnable but waiting for one (Linux schedstat), i.e. whether a broker that is late is
  busy or not being scheduled.
"""

from __future__ import annotations

import bisect
import os

APPEND_TIMES_MAX = 512  # batches remembered per partition; an older batch is not timed


class AppendTimes:
    """(end offset, time) of the latest batches a leader appended, oldest first. End
    offsets only grow; a smaller one (the log was truncated, a new leadership) starts
    afresh."""

    __slots__ = ("_ends", "_times")

    def __init__(self) -> None:
        self._ends: list[int] = []
        self._times: list[float] = []

    def appended(self, end_offset: int, now_s: float) -> None:
        if self._ends and end_offset <= self._ends[-1]:
            self.clear()
        self._ends.append(end_offset)
        self._times.append(now_s)
        if len(self._ends) >= 2 * APPEND_TIMES_MAX:
            del self._ends[:APPEND_TIMES_MAX]
            del self._times[:APPEND_TIMES_MAX]

    def clear(self) -> None:
        self._ends.clear()
        self._times.clear()

    def oldest_covered(self, previous_leo: int, leo: int) -> float | None:
        """When the oldest batch a replica's LEO moving from `previous_leo` to `leo` newly
        covers was appended (its end offset in (previous_leo, leo]); None if none known."""
        if leo <= previous_leo:
            return None
        i = bisect.bisect_right(self._ends, previous_leo)
        if i < len(self._ends) and self._ends[i] <= leo:
            return self._times[i]
        return None


def scheduler_seconds() -> tuple[float, float] | None:
    """(on a CPU, runnable but waiting for a CPU) of the main thread since it started, in
    seconds; None where the kernel does not tell (not Linux, schedstats off)."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/schedstat") as f:  # the main thread's id is the pid
            run_ns, wait_ns, _slices = f.read().split()
    except (OSError, ValueError):
        return None
    return int(run_ns) / 1e9, int(wait_ns) / 1e9
