"""Atomic checkpoint files in Kafka's text format. DESIGN.md section 3, "Checkpoints".

Format (Kafka's CheckpointFile): a version line, a count line, then one entry per line
with space-separated fields:

    0
    2
    my-topic 0 1234
    other 3 17
"""

from __future__ import annotations

import os

from kafkalite.log.errors import LogDirError

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # the log cleaner's first dirty offset per log
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"  # DeleteRecords' log start, where a segment does not say it


class CheckpointError(LogDirError):
    """A checkpoint file that exists but cannot be parsed."""


def fsync_dir(dir_path: str) -> None:
    fd = os.open(dir_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """Replace `path` with `data` so a crash leaves either the old or the new file, whole:
    write a temp file, fsync it, rename over `path`, fsync the directory."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def format_entries(entries: list[tuple]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [" ".join(str(f) for f in entry) for entry in entries]
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_entries(path: str, text: str, field_count: int) -> list[list[str]]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointError(f"checkpoint {path}: missing version or count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"checkpoint {path}: unsupported version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"checkpoint {path}: bad count line {lines[1]!r}") from None
    if count != len(lines) - 2:
        raise CheckpointError(f"checkpoint {path}: count {count} but {len(lines) - 2} entries")
    entries = []
    for line in lines[2:]:
        fields = line.split(" ")
        if len(fields) != field_count:
            raise CheckpointError(f"checkpoint {path}: malformed entry {line!r}")
        entries.append(fields)
    return entries


def read_text(path: str) -> str | None:
    """Contents of `path`, or None if it does not exist. Other I/O errors are LogDirErrors."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"checkpoint {path}: not UTF-8 text: {e}") from None
    except OSError as e:
        raise LogDirError(f"cannot read checkpoint {path}: {e}") from e


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    """recovery-point-offset-checkpoint / replication-offset-checkpoint: topic partition offset."""
    entries = sorted((t, p, o) for (t, p), o in offsets.items())
    write_atomic(path, format_entries(entries))


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    text = read_text(path)
    if text is None:
        return {}
    result = {}
    for topic, partition, offset in parse_entries(path, text, 3):
        try:
            result[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CheckpointError(f"checkpoint {path}: bad numbers in {topic} {partition} {offset}") from None
    return result


def write_epochs(path: str, entries: list[tuple[int, int]]) -> None:
    """leader-epoch-checkpoint: epoch start_offset."""
    write_atomic(path, format_entries(entries))


def read_epochs(path: str) -> list[tuple[int, int]]:
    text = read_text(path)
    if text is None:
        return []
    try:
        return [(int(e), int(o)) for e, o in parse_entries(path, text, 2)]
    except ValueError:
        raise CheckpointError(f"checkpoint {path}: non-integer epoch entry") from None
