"""kafkalite.testing.disk_faults.fill: stops quietly at a full filesystem, whatever the room
left. With a buffered writer, the bytes the disk refused stayed in the buffer and closing the
file raised ENOSPC again, out of `fill`: it stopped a 10-minute bin/chaos run."""

from __future__ import annotations

import errno
import io

import pytest

from kafkalite.testing import disk_faults


class _FullDisk(io.RawIOBase):
    """A file on a filesystem with `room` bytes left: short writes, then ENOSPC."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if self.room == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = min(len(b), self.room)
        self.room -= n
        self.written += n
        return n


@pytest.mark.parametrize("room", [1_000_003, 65_536 * 3, 65_536 * 2 - 100, 10, 0])
def test_fill_writes_to_the_last_byte_and_returns_without_an_error(tmp_path, monkeypatch, room):
    files: list[_FullDisk] = []

    def fake_open(path, mode="r", buffering=-1):
        assert mode == "wb"
        raw = _FullDisk(room)
        files.append(raw)
        return raw if buffering == 0 else io.BufferedWriter(raw)

    monkeypatch.setattr(disk_faults, "open", fake_open, raising=False)
    assert disk_faults.fill(tmp_path, "filler") == tmp_path / "filler"
    assert files[0].written == room
