"""The log cleaner's worker process: `python -m kafkalite.log.cleaner_worker PARENT_PID`.

Reads one pickled (CleanJob, io bytes/s) from stdin, runs the pass
(kafkalite.log.cleaner.clean), writes one pickled answer to stdout and exits:
("ok", CleanResult), ("corrupt", message) for bad data in the log, ("error", message) for
an OSError. The broker runs each pass in a fresh process so the pass's CPU work (decoding
and re-encoding records) never holds the broker's GIL: produce and fetch latency stay as
they are while it runs, and its memory (the offset map) is returned to the system after.
It runs at a lower CPU priority (nice 10) than the broker, so on a busy machine the
broker's event loop is served first.

A worker never outlives its broker: a broker killed with -9 while a pass runs would
otherwise leave a process writing `.cleaned` files while the restarted broker recovers the
same directory. The kernel kills the worker when its parent dies (PR_SET_PDEATHSIG on
Linux), and the worker also checks its parent at every read and write.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import sys
import time

from kafkalite.log.cleaner import CleanJob, clean
from kafkalite.log.errors import CorruptRecordError
from kafkalite.log.throttler import Throttler

_PR_SET_PDEATHSIG = 1
EXIT_PARENT_GONE = 3


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the check below still stops it
        pass
    if os.getppid() != parent_pid:  # died before prctl took effect
        os._exit(EXIT_PARENT_GONE)


def run(job: CleanJob, io_bytes_per_second: float, parent_pid: int) -> tuple[str, object]:
    throttler = Throttler(io_bytes_per_second, time.monotonic, time.sleep)

    def io(byte_count: int) -> None:
        if os.getppid() != parent_pid:
            os._exit(EXIT_PARENT_GONE)
        throttler.maybe_throttle(byte_count)

    try:
        return "ok", clean(job, io)
    except CorruptRecordError as e:
        return "corrupt", str(e)
    except OSError as e:
        return "error", f"{type(e).__name__}: {e}"


WORKER_NICENESS = 10


def main() -> None:
    parent_pid = int(sys.argv[1])
    _die_with_parent(parent_pid)
    # Background work: when CPU is short, the broker's event loop goes first.
    os.nice(WORKER_NICENESS)
    job, io_bytes_per_second = pickle.load(sys.stdin.buffer)
    answer = run(job, io_bytes_per_second, parent_pid)
    sys.stdout.buffer.write(pickle.dumps(answer))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
