"""Log append / read-back throughput next to the raw sequential write speed of the same disk.

    .venv/bin/python bench/log_append.py [--bytes N] [--dir PATH]

For 16 KiB batches (default 512 MiB) and 1 KiB batches (default 128 MiB; --bytes scales
both, keeping the 4:1 ratio) it measures, in the same run and directory:

  raw     plain os.write of the same batch bytes, same chunk size, to one file
  append  Log.append_as_leader (CRC-32C check, offset/epoch stamping, one writev, indexes)
  read    Log.read from offset 0 to the LEO in 1 MiB fetches

No fsync inside the timed loops (both write to the page cache, as a Kafka broker does with
the default flush policy); a final fsync is timed separately and reported.
Target: append >= 70% of raw for 16 KiB batches.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafkalite.log.config import LogConfig
from kafkalite.log.log import Log
from kafkalite.log.records import encode_batch

MIB = 1 << 20
ROUNDS = 8


def make_batches(batch_bytes: int, pool: int = 64) -> list[bytes]:
    """`pool` distinct batches of about `batch_bytes` each (incompressible-ish values)."""
    record_value = 512 if batch_bytes >= 4096 else 100
    per_batch = max(1, (batch_bytes - 61) // (record_value + 12))
    batches = []
    for i in range(pool):
        values = [os.urandom(record_value) for _ in range(per_batch)]
        batches.append(encode_batch([(None, v, ()) for v in values], base_timestamp=1_700_000_000_000 + i))
    return batches


def bench_raw(fd: int, batches: list[bytes], first: int, count: int) -> float:
    n = len(batches)
    write = os.write
    start = time.perf_counter()
    for i in range(first, first + count):
        write(fd, batches[i % n])
    return time.perf_counter() - start


def bench_append(log: Log, batches: list[bytes], first: int, count: int) -> float:
    n = len(batches)
    append = log.append_as_leader
    now_ms = 1_700_000_000_000
    start = time.perf_counter()
    for i in range(first, first + count):
        append(batches[i % n], 1, now_ms)
    return time.perf_counter() - start


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def bench_read(log: Log) -> tuple[float, int]:
    offset = 0
    total = 0
    leo = log.log_end_offset
    start = time.perf_counter()
    while offset < leo:
        data = log.read(offset, MIB)
        total += len(data)
        # Next offset = last batch's last offset + 1: walk the batch lengths.
        pos = 0
        last = offset
        while pos < len(data):
            base = int.from_bytes(data[pos : pos + 8], "big")
            length = int.from_bytes(data[pos + 8 : pos + 12], "big")
            delta = int.from_bytes(data[pos + 23 : pos + 27], "big")
            last = base + delta
            pos += length + 12
        offset = last + 1
    return time.perf_counter() - start, total


def run(label: str, batch_bytes: int, total_bytes: int, work_dir: str) -> None:
    batches = make_batches(batch_bytes)
    actual = len(batches[0])
    count = max(1, total_bytes // actual)
    volume_mb = count * actual / 1e6

    # Raw and log writes alternate in ROUNDS slices so that disk warm-up, page-cache
    # pressure and other load on the machine hit both the same way.
    raw_path = os.path.join(work_dir, "raw.bin")
    raw_fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    log = Log.open(os.path.join(work_dir, "bench-0"), LogConfig(), now_ms=0)
    raw_s = append_s = 0.0
    per_round = -(-count // ROUNDS)
    for first in range(0, count, per_round):
        n = min(per_round, count - first)
        raw_s += bench_raw(raw_fd, batches, first, n)
        append_s += bench_append(log, batches, first, n)
    raw_fsync_s = timed(os.fsync, raw_fd)
    append_fsync_s = timed(log.flush)
    os.close(raw_fd)
    os.remove(raw_path)
    read_s, read_total = bench_read(log)
    assert read_total == count * actual, (read_total, count * actual)
    log.delete()

    raw_mbs = volume_mb / raw_s
    append_mbs = volume_mb / append_s
    print(f"{label}: {count} batches of {actual} B, {volume_mb:.0f} MB")
    print(f"  raw write   {raw_mbs:8.0f} MB/s {count / raw_s:10.0f} batches/s   (+fsync {raw_fsync_s:.2f} s)")
    print(f"  log append  {append_mbs:8.0f} MB/s {count / append_s:10.0f} batches/s   (+fsync {append_fsync_s:.2f} s)"
          f"   = {100 * append_mbs / raw_mbs:.0f}% of raw")
    print(f"  log read    {read_total / 1e6 / read_s:8.0f} MB/s {count / read_s:10.0f} batches/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=int, default=512 * MIB, help="bytes for the 16 KiB run (1 KiB run: a quarter)")
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    args = parser.parse_args()
    work_dir = tempfile.mkdtemp(prefix="kafkalite-bench-", dir=args.dir)
    try:
        run("16 KiB batches", 16 * 1024, args.bytes, work_dir)
        run("1 KiB batches", 1024, max(1024, args.bytes // 4), work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
