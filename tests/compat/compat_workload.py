"""The produce-then-read-back workload shared by the client compatibility tests.

Every client test does the same thing through its own API: create a 3-partition topic with
its own admin client, produce RECORD_COUNT records with acks=all (keys, some null keys, a
few keyed tombstones, headers, explicit timestamps), then read them back by partition
assignment (consumer groups are tested in tests/integration/test_consumer_group_clients.py)
from the beginning and from a given offset. What was acknowledged (partition, offset) is the
truth the read-back is compared against, exactly, per partition.

A record here is a plain tuple `(key, value, headers, timestamp_ms)` with headers a tuple of
`(str, bytes | None)` pairs, so each client's own record type is converted once, at the edge.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

RECORD_COUNT = 10_000
PARTITIONS = 3
BASE_TIMESTAMP_MS = 1_700_000_000_000
# Generous for a loaded 2-core machine; a healthy run reads 10,000 records in well under 1 s.
READ_TIMEOUT_S = 60.0

Record = tuple  # (key: bytes | None, value: bytes | None, headers: tuple, timestamp_ms: int)


def make_records(count: int = RECORD_COUNT, *, null_header_values: bool = False) -> list[Record]:
    """Deterministic records covering the shapes clients send.

    - every 10th key is null (the client's partitioner then picks the partition);
    - every 97th record (keyed) is a tombstone (null value);
    - values vary in length (0..~300 bytes), so batches do not all look alike;
    - headers: none, one, or several (repeated names allowed, as in Kafka); a null header
      value only where the client can send one (`null_header_values`).
    """
    records = []
    for i in range(count):
        key = None if i % 10 == 0 else b"key-%d" % (i % 1000)
        value = None if (key is not None and i % 97 == 1) else (b"value-%d-" % i) + b"x" * (i % 300)
        if i % 3 == 0:
            headers: tuple = ()
        elif i % 3 == 1:
            headers = (("seq", b"%d" % i),)
        else:
            headers = (("seq", b"%d" % i), ("kind", b"even" if i % 2 == 0 else b"odd"), ("seq", b""))
            if null_header_values and i % 5 == 0:
                headers = headers + (("null", None),)
        records.append((key, value, headers, BASE_TIMESTAMP_MS + i))
    return records


class Acked:
    """What the producer's delivery reports said: record index -> (partition, offset)."""

    def __init__(self, records: list[Record]):
        self.records = records
        self.placement: dict[int, tuple[int, int]] = {}
        self.errors: list[tuple[int, object]] = []

    def ok(self, index: int, partition: int, offset: int) -> None:
        assert index not in self.placement, f"record {index} acknowledged twice"
        self.placement[index] = (partition, offset)

    def failed(self, index: int, error: object) -> None:
        self.errors.append((index, error))

    def check_complete(self) -> None:
        assert self.errors == [], f"{len(self.errors)} records failed, first: {self.errors[:3]}"
        assert len(self.placement) == len(self.records)

    def expected(self) -> dict[int, list[tuple[int, Record]]]:
        """Per partition, the (offset, record) pairs in offset order; asserts that offsets
        are exactly 0..n-1 (contiguous, no duplicates) and that every partition got some."""
        by_partition: dict[int, list[tuple[int, Record]]] = {p: [] for p in range(PARTITIONS)}
        for index, (partition, offset) in self.placement.items():
            by_partition[partition].append((offset, self.records[index]))
        for partition, pairs in by_partition.items():
            pairs.sort(key=lambda pair: pair[0])
            assert pairs, f"no record went to partition {partition}"
            assert [o for o, _ in pairs] == list(range(len(pairs))), f"partition {partition}: offsets not contiguous from 0"
        return by_partition


def start_offsets(expected: dict[int, list]) -> dict[int, int]:
    """The "given offset" each read-from-offset check starts at: a different interior
    offset per partition (a third, a half, two thirds of the way in)."""
    return {p: len(pairs) * (p + 1) // (PARTITIONS + 1) for p, pairs in expected.items()}


def tail_count(expected: dict[int, list], starts: dict[int, int]) -> int:
    """How many records a read from `starts` to the end returns."""
    return sum(len(pairs) - starts[p] for p, pairs in expected.items())


def assert_reads_back(read: Callable[..., dict], boot: str, topic: str, expected: dict[int, list]) -> None:
    """Both checks every synchronous client makes: everything from the beginning, then
    the tail of each partition from a given interior offset."""
    assert_same(read(boot, topic, {p: 0 for p in expected}, sum(len(v) for v in expected.values())), expected)
    starts = start_offsets(expected)
    assert_same(read(boot, topic, starts, tail_count(expected, starts)), expected, starts)


def drain(poll: Callable[[], Iterable[tuple[int, int, Record]]], count: int, timeout_s: float = READ_TIMEOUT_S) -> dict[int, list[tuple[int, Record]]]:
    """Call `poll()` (which yields (partition, offset, record)) until `count` records arrived
    or the time runs out; returns them per partition in arrival order."""
    got: dict[int, list[tuple[int, Record]]] = {p: [] for p in range(PARTITIONS)}
    n = 0
    deadline = time.monotonic() + timeout_s
    while n < count and time.monotonic() < deadline:
        for partition, offset, record in poll():
            got[partition].append((offset, record))
            n += 1
    assert n == count, f"read {n} of {count} records in {timeout_s:.0f} s"
    return got


def assert_same(got: dict[int, list[tuple[int, Record]]], expected: dict[int, list[tuple[int, Record]]], starts: dict[int, int] | None = None) -> None:
    """Exact per-partition equality of offsets, keys, values, headers and timestamps, in
    order, from `starts[p]` (default 0) to the end."""
    for partition, pairs in expected.items():
        first = (starts or {}).get(partition, 0)
        want = pairs[first:]
        have = got.get(partition, [])
        assert [o for o, _ in have] == list(range(first, first + len(want))), f"partition {partition}: offsets read are not {first}..{first + len(want) - 1}"
        for (offset, have_record), (_, want_record) in zip(have, want):
            assert have_record == want_record, f"partition {partition} offset {offset}: read {have_record!r}, produced {want_record!r}"


def normalize_headers(headers: Iterable | None) -> tuple:
    return tuple((k, v) for k, v in (headers or ()))
