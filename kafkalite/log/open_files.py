"""A bounded, least-recently-used set of open segment files (issue 13: 100k partitions).

One descriptor per segment would need 100,000 descriptors for 100,000 idle partitions, and
a process gets RLIMIT_NOFILE of them (20,000 on the machines we test on), sockets included.
So a segment's `.log` descriptor is opened when the segment is first read or written and
kept in this LRU; opening one more than `open_files_max` closes the least recently used.
An idle partition then costs no descriptor, a busy one keeps its descriptor, and a broker
with more partitions than the bound still reads and writes every one of them (at the price
of an open and a close when the working set is larger than the bound).

Closing a descriptor loses nothing: every write went to the kernel with pwrite(v), and the
flush job fsyncs its own dup()ed descriptors (Log.begin_flush), which outlive an eviction.
Segment files are never renamed or deleted while their segment is open (deletion, the
cleaner's swap and truncation close the segment first), so reopening by path finds the same
file.

Threading: the event loop thread does all segment I/O while the broker runs. The lock makes
lookups, evictions and dups safe when several threads use segments at once (LogManager
opens every log in a thread at start-up and flushes them on a thread pool at shutdown);
a descriptor number is only handed out for use on the thread that asked for it, and only
`dup` is safe against another thread evicting at the same time.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Protocol

OPEN_FILES_MAX_DEFAULT = 4096
OPEN_FILES_MAX_MIN = 2


class _Opened(Protocol):
    """What the LRU needs of a segment: the path to reopen and the slot holding its fd."""

    log_path: str
    _fd: int


class OpenFiles:
    def __init__(self, open_files_max: int = OPEN_FILES_MAX_DEFAULT) -> None:
        assert open_files_max >= OPEN_FILES_MAX_MIN
        self.open_files_max = open_files_max
        self._lru: OrderedDict[_Opened, None] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self.opens = 0  # reopens after an eviction or on first use (metrics, tests)
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    def set_max(self, open_files_max: int) -> None:
        assert open_files_max >= OPEN_FILES_MAX_MIN
        with self._lock:
            self.open_files_max = open_files_max
            self._evict()

    def fd(self, segment: _Opened) -> int:
        """The segment's descriptor, opened (O_RDWR, the file must exist) if it is not."""
        with self._lock:
            return self._fd_locked(segment)

    def dup(self, segment: _Opened) -> int:
        """A private duplicate of the segment's descriptor, for use in another thread."""
        with self._lock:
            return os.dup(self._fd_locked(segment))

    def add(self, segment: _Opened, fd: int) -> None:
        """Adopt a descriptor just opened for `segment` (created or checked by the caller)."""
        with self._lock:
            assert segment not in self._lru
            segment._fd = fd
            self._lru[segment] = None
            self._evict(keep=segment)

    def close(self, segment: _Opened) -> None:
        with self._lock:
            if self._lru.pop(segment, 0) is None:
                fd, segment._fd = segment._fd, -1
                os.close(fd)

    def _fd_locked(self, segment: _Opened) -> int:
        fd = segment._fd
        if fd >= 0:
            self._lru.move_to_end(segment)
            return fd
        fd = os.open(segment.log_path, os.O_RDWR)
        self.opens += 1
        segment._fd = fd
        self._lru[segment] = None
        self._evict(keep=segment)
        return fd

    def _evict(self, keep: _Opened | None = None) -> None:
        while len(self._lru) > self.open_files_max:
            victim = next(iter(self._lru))
            if victim is keep:  # cannot happen with a bound >= 2: keep was just moved to the end
                raise AssertionError("evicting the segment being opened")
            del self._lru[victim]
            fd, victim._fd = victim._fd, -1
            os.close(fd)
            self.evictions += 1


# One per process: the bound is on the process's descriptors. The broker sets it from
# `log.open.files.max` (LogManager); tests may install their own.
OPEN_FILES = OpenFiles()
