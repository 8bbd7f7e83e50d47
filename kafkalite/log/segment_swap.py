"""Swapping cleaned segments in for the segments they replace, crash-safely (Kafka's
`.cleaned` / `.swap` / `.deleted` protocol: Log.replaceSegments and LogLoader).

The cleaner writes a new segment `<base>.log.cleaned` with `<base>.index.cleaned` and
`<base>.timeindex.cleaned` (base = the first replaced segment's base offset) and fsyncs
them. Then, on the event-loop thread while nothing else changes the log:

1. rename each `.cleaned` file to `.swap`, the indexes first and the `.log` last: a
   `<base>.log.swap` on disk is the commit point;
2. rename every file of the replaced segments to `<name>.deleted`;
3. rename the `.swap` files to their final names (indexes first, `.log` last);
4. remove the `.deleted` files.

`recover` runs when a log opens, before its segments are listed, and leaves the directory
as if the interrupted swap had either never started or completed:
- `.cleaned` files (before step 1 finished: not committed) and `.deleted` files go;
- a `<base>.log.swap` (committed, step 2 or 3 interrupted): every segment whose base offset
  lies in [base, the swap segment's next offset) is one it replaces and goes (it may still
  have its final name, including the one with the same base); index files of that base in
  any state go too; the `.swap` log takes its final name, and the caller rebuilds its
  indexes from it (Log.open recovers it);
- index `.swap` files without a `.log.swap` (step 1 interrupted before the commit point, or
  step 3 after the `.log` was renamed) go.

Why this is enough when the machine loses power as well as the process: the `.cleaned` data
is fsynced before step 1, renames within one directory reach the journal in order (so a
crash leaves a prefix of them), and the flush task fsyncs the directory afterwards. Every
prefix of the renames is one of the cases above.

File operations go through `FileOps` so tests can crash between any two of them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from kafkalite.log import checkpoint
from kafkalite.log.records import H_BASE_OFFSET, H_BATCH_LENGTH, H_LAST_OFFSET_DELTA, HEADER_STRUCT, LOG_OVERHEAD
from kafkalite.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_name

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
# Renamed in this order in steps 1 and 3: the .log last, so its rename is the commit point.
_FILE_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)


class FileOps:
    """The file operations of the swap protocol; tests subclass it to crash in between."""

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def fsync_dir(self, dir_path: str) -> None:
        checkpoint.fsync_dir(dir_path)


REAL_FILE_OPS = FileOps()


def _path(dir_path: str, base_offset: int, suffix: str, state: str = "") -> str:
    return os.path.join(dir_path, segment_name(base_offset) + suffix + state)


def commit(dir_path: str, base_offset: int, replaced: Sequence[int], fs: FileOps = REAL_FILE_OPS) -> None:
    """Steps 1-4 for the cleaned segment `base_offset` replacing the segments `replaced`
    (base offsets, the first equal to `base_offset`). The caller has checked that the log
    still holds exactly those segments and changes nothing of the log meanwhile. An OSError
    leaves the directory in a state `recover` completes or undoes."""
    assert replaced and replaced[0] == base_offset
    assert list(replaced) == sorted(set(replaced))
    for suffix in _FILE_SUFFIXES:
        fs.rename(_path(dir_path, base_offset, suffix, CLEANED_SUFFIX), _path(dir_path, base_offset, suffix, SWAP_SUFFIX))
    for old in replaced:
        for suffix in _FILE_SUFFIXES:
            source = _path(dir_path, old, suffix)
            if suffix != LOG_SUFFIX and not os.path.exists(source):
                continue  # an index never written (an empty one is only created on the first entry)
            fs.rename(source, _path(dir_path, old, suffix, DELETED_SUFFIX))
    for suffix in _FILE_SUFFIXES:
        fs.rename(_path(dir_path, base_offset, suffix, SWAP_SUFFIX), _path(dir_path, base_offset, suffix))
    for old in replaced:
        for suffix in _FILE_SUFFIXES:
            fs.remove(_path(dir_path, old, suffix, DELETED_SUFFIX))


def discard(dir_path: str, base_offsets: Sequence[int], fs: FileOps = REAL_FILE_OPS) -> None:
    """Remove the `.cleaned` files of cleanings that will not be swapped in. Best effort:
    a file left behind is removed when the log next opens."""
    for base in base_offsets:
        for suffix in _FILE_SUFFIXES:
            try:
                fs.remove(_path(dir_path, base, suffix, CLEANED_SUFFIX))
            except OSError as e:
                log.warning("%s: cannot remove a discarded cleaned file: %s", dir_path, e)


def _parse(name: str) -> tuple[int, str, str] | None:
    """(base offset, file suffix, state suffix) of `<20 digits><suffix>[state]`, else None."""
    stem, dot, rest = name.partition(".")
    if not dot or len(stem) != 20 or not stem.isascii() or not stem.isdigit():
        return None
    for suffix in _FILE_SUFFIXES:
        for state in ("", CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX):
            if "." + rest == suffix + state:
                return int(stem), suffix, state
    return None


def next_offset_of(path: str) -> int | None:
    """The next offset after the last whole batch of a segment file (framing only), or
    None if it holds no whole batch."""
    next_offset = None
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        position = 0
        while position + HEADER_STRUCT.size <= size:
            f.seek(position)
            fields = HEADER_STRUCT.unpack(f.read(HEADER_STRUCT.size))
            batch_size = fields[H_BATCH_LENGTH] + LOG_OVERHEAD
            if fields[H_BATCH_LENGTH] < HEADER_STRUCT.size - LOG_OVERHEAD or position + batch_size > size:
                break
            next_offset = fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA] + 1
            position += batch_size
    return next_offset


def recover(dir_path: str, fs: FileOps = REAL_FILE_OPS) -> set[int]:
    """Finish or undo an interrupted swap in a log directory (see the module docstring).
    Returns the base offsets of segments swapped in here, whose indexes must be rebuilt."""
    parsed = [(name, p) for name in sorted(os.listdir(dir_path)) if (p := _parse(name)) is not None]
    swapped: dict[int, int] = {}  # base -> next offset of each committed .log.swap
    for name, (base, suffix, state) in parsed:
        if state in (CLEANED_SUFFIX, DELETED_SUFFIX):
            fs.remove(os.path.join(dir_path, name))
        elif state == SWAP_SUFFIX and suffix == LOG_SUFFIX:
            end = next_offset_of(os.path.join(dir_path, name))
            swapped[base] = base + 1 if end is None else end
    for name, (base, suffix, state) in parsed:
        if state == SWAP_SUFFIX and suffix != LOG_SUFFIX:
            fs.remove(os.path.join(dir_path, name))  # indexes are rebuilt from the swapped-in log
        elif state == "" and any(b <= base < end for b, end in swapped.items()):
            fs.remove(os.path.join(dir_path, name))  # a replaced segment, or an index of the swapped base
    for base in swapped:
        fs.rename(_path(dir_path, base, LOG_SUFFIX, SWAP_SUFFIX), _path(dir_path, base, LOG_SUFFIX))
    leftovers = [name for name, (_, _, state) in parsed if state]
    if leftovers:
        fs.fsync_dir(dir_path)
        log.info("%s: finished a log cleaner swap a crash interrupted: %d files of it found; cleaned segments swapped in: %s",
                 dir_path, len(leftovers), sorted(swapped) or "none (the old segments stay)")
    return set(swapped)
