"""A history of a produce/consume workload, and a checker over it in the style of Jepsen
(issue 14).

Producers and consumers record what they did as it happens, with monotonic times:

- `invoke`: a producer hands a value to its client;
- `ok`: the value was acknowledged at (partition, offset). The offset may be NO_OFFSET:
  librdkafka's idempotent producer acknowledges a message whose request's answer was lost
  once a later one of the same producer succeeds (it must have been written), without an
  offset (confluent-kafka's `msg.offset()` is None);
- `fail`: the client gave up on it. With Kafka that is indeterminate: the record may still
  be in the log (written, then the answer lost), so a failed value may appear, once;
- `read`: a consumer got the value at (partition, offset);
- `assign`, `revoke`: a consumer group member was given, or gave up, a partition (its
  rebalance callbacks; the value is empty).

After the run the log itself is read from its start to the high watermark (`FinalLog`), and
`check` holds the history against it:

1. *lost*: every acknowledged value is in the final log at the offset it was acknowledged at
   (acknowledged without an offset: in the partition it was acknowledged in);
2. *duplicate*: with the idempotent producer no value is in the final log twice;
3. *offsets*: offsets in the final log are contiguous, and no (partition, offset) was ever
   acknowledged or read with two different values;
4. *read-not-in-log*: every record a consumer read is in the final log at the same offset
   (no reads of data that was later truncated);
5. *order*: all consumers saw the same value at each offset, and each value at one offset
   only, so they saw every partition in the same order;
6. *phantom*: nothing is in the log or read that no producer invoked;
7. *malformed*: the history itself makes sense (each value invoked once, answered at most
   once, after its invocation, by the process that invoked it);
8. *unread*: the consumers together read, in each partition, every offset of the final log
   from the lowest offset they read there up to the highest acknowledged offset (offsets
   absent from the final log excepted). When the history records assignments (a consumer
   group), a partition with acknowledged records that no one read is unread from its start;
9. *position*: each consumer reads a partition in log order: every read is at the offset
   after its previous read of that partition (or the next offset the final log holds),
   except the first read after the partition is assigned to it, which may start anywhere
   (its group's committed offset: at least once, so a rebalance may repeat records). A
   consumer going back, or skipping records, without a rebalance breaks it;
10. *unanswered*: with `producers_done` (the default: the producers had stopped and flushed
   when the history was taken), every invoked value was acknowledged or failed. A client
   that never answers is a stranded write, and its record's fate is unknown.

Values must be unique over the whole workload (the producers' job, e.g. `p3-1207`). The
verdict names the first violation (in history order when the history shows it) with its
context: the history's events for that value, the events around it, and the final log
around the offset. The module is pure: recording is a list append under a lock, and the
check takes the history and the final log as values, so a history dumped by a long chaos
run (`dump`, JSON lines) can be checked again offline (`load`).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

Kind = Literal["invoke", "ok", "fail", "read", "assign", "revoke"]
KINDS = ("invoke", "ok", "fail", "read", "assign", "revoke")
MEMBERSHIP = ("assign", "revoke")
NO_OFFSET = -1
CONTEXT_EVENTS = 6  # events shown either side of a violation's event
CONTEXT_RECORDS = 3  # final-log records shown either side of a violation's offset


@dataclasses.dataclass(frozen=True, slots=True)  # slots: a 30-minute chaos run records millions
class Event:
    index: int  # position in the history (the order events were recorded)
    time_ns: int  # time.monotonic_ns() when recorded
    process: str  # "producer-1", "consumer-2", ...
    kind: Kind
    value: bytes
    partition: int = NO_OFFSET  # ok, read, assign, revoke; an invoke may name a partition or not
    offset: int = NO_OFFSET  # ok, read
    error: str = ""  # fail

    def describe(self) -> str:
        if self.kind in MEMBERSHIP:
            return f"#{self.index} {self.time_ns / 1e9:.6f} {self.process} {self.kind} p{self.partition}"
        where = f" {self.partition}:{self.offset}" if self.offset >= 0 else (f" p{self.partition}" if self.partition >= 0 else "")
        error = f" ({self.error})" if self.error else ""
        return f"#{self.index} {self.time_ns / 1e9:.6f} {self.process} {self.kind} {self.value!r}{where}{error}"

    def to_json(self) -> str:
        return json.dumps({"i": self.index, "t": self.time_ns, "p": self.process, "k": self.kind,
                           "v": self.value.decode("latin-1"), "part": self.partition, "off": self.offset,
                           "e": self.error}, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Event:
        d = json.loads(line)
        if d["k"] not in KINDS:
            raise ValueError(f"unknown event kind {d['k']!r}")
        return cls(d["i"], d["t"], d["p"], d["k"], d["v"].encode("latin-1"), d["part"], d["off"], d["e"])


class History:
    """The recorder: thread-safe, append-only. Producer delivery callbacks and consumer
    threads call it directly."""

    def __init__(self, clock=time.monotonic_ns) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._events: list[Event] = []

    def _add(self, process: str, kind: Kind, value: bytes, partition: int = NO_OFFSET, offset: int = NO_OFFSET,
             error: str = "") -> None:
        with self._lock:
            self._events.append(Event(len(self._events), self._clock(), process, kind, value, partition, offset, error))

    def invoke(self, process: str, value: bytes, partition: int = NO_OFFSET) -> None:
        self._add(process, "invoke", value, partition)

    def ok(self, process: str, value: bytes, partition: int, offset: int) -> None:
        self._add(process, "ok", value, partition, offset)

    def fail(self, process: str, value: bytes, error: str) -> None:
        self._add(process, "fail", value, error=error)

    def read(self, process: str, value: bytes, partition: int, offset: int) -> None:
        self._add(process, "read", value, partition, offset)

    def assign(self, process: str, partition: int) -> None:
        self._add(process, "assign", b"", partition)

    def revoke(self, process: str, partition: int) -> None:
        self._add(process, "revoke", b"", partition)

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def dump(self, path: str) -> None:
        with open(path, "w", encoding="ascii") as f:
            for e in self.events():
                f.write(e.to_json() + "\n")

    @staticmethod
    def load(path: str) -> list[Event]:
        with open(path, encoding="ascii") as f:
            return [Event.from_json(line) for line in f if line.strip()]


@dataclasses.dataclass(frozen=True)
class FinalLog:
    """Each partition's records, (offset, value) in log order from its log start to its high
    watermark, as read after the workload."""

    partitions: Mapping[int, Sequence[tuple[int, bytes]]]

    def at(self, partition: int, offset: int) -> bytes | None:
        records = self.partitions.get(partition, ())
        if not records:
            return None
        i = offset - records[0][0]  # contiguous logs: direct; otherwise search
        if 0 <= i < len(records) and records[i][0] == offset:
            return records[i][1]
        for o, v in records:
            if o == offset:
                return v
        return None

    def start(self, partition: int) -> int | None:
        records = self.partitions.get(partition, ())
        return records[0][0] if records else None

    def around(self, partition: int, offset: int) -> list[str]:
        records = self.partitions.get(partition, ())
        near = [(o, v) for o, v in records if abs(o - offset) <= CONTEXT_RECORDS]
        if not records:
            return [f"final log of partition {partition}: empty"]
        head = f"final log of partition {partition} (offsets {records[0][0]}..{records[-1][0]}) near {offset}:"
        return [head] + [f"  {o}: {v!r}" for o, v in near] if near else [head + " nothing there"]


@dataclasses.dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    event: int | None  # the history index it is about, if one; orders violations
    context: tuple[str, ...] = ()

    def describe(self) -> str:
        return "\n".join([f"{self.rule}: {self.message}", *("  " + line for line in self.context)])


@dataclasses.dataclass
class Verdict:
    ok: bool
    counts: dict[str, int]
    violations: list[Violation]  # in history order; at most VIOLATIONS_KEPT
    violation_count: int
    # Why each duplicate the client wrote itself is its own (`check`'s `explain`).
    client_resends: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        c = self.counts
        head = "OK" if self.ok else f"FAILED ({self.violation_count} violations)"
        return (f"history check {head}: {c['invoked']} invoked, {c['acked']} acknowledged, {c['failed']} failed "
                f"({c['failed_present']} of them in the log), {c['lost']} lost, {c['duplicates']} duplicated"
                + (f" ({c['client_resends']} re-sent by the client under a new epoch)" if c.get("client_resends") else "") + ", "
                f"{c['unanswered']} unanswered, {c['reads']} reads by {c['consumers']} consumers, {c['unread']} unread, "
                f"{c['final_records']} records in the final log")

    def report(self) -> str:
        lines = [self.summary()]
        lines += [f"client re-send: {why}" for why in self.client_resends[:10]]
        if self.violations:
            lines.append("first violation:")
            lines.append(self.violations[0].describe())
            for v in self.violations[1:10]:
                lines.append(f"then {v.rule}: {v.message}")
        return "\n".join(lines)


VIOLATIONS_KEPT = 200


def check(events: Iterable[Event], final: FinalLog, *, idempotent: bool = True,
          ours: Callable[[bytes], bool] | None = None, producers_done: bool = True,
          explain: Callable[[int, int, int], str | None] | None = None) -> Verdict:
    """Hold the history against the final log (rules 1-10 of the module docstring).

    `explain(partition, first offset, second offset)`: why a value's later copy is the
    client's own re-send under a bumped producer epoch (kafkalite.testing.client_resends),
    or None; a duplicate every later copy of which it explains is counted in
    `client_resends`, not a violation of rule 2.

    `producers_done=False` for a history taken while producers may still have had records
    in flight (a run cut short): unanswered invocations are then only counted.

    `ours`: which values this workload wrote (e.g. by their prefix), when the log may also
    hold records of earlier runs; records and reads of other values are only counted in the
    final log's offsets. Without it every value must come from the history."""
    history = sorted(events, key=lambda e: e.index)
    by_value: dict[bytes, list[Event]] = defaultdict(list)
    for e in history:
        if e.kind not in MEMBERSHIP:
            by_value[e.value].append(e)

    def context(e: Event | None, value: bytes | None, partition: int | None, offset: int | None,
                extra: tuple[str, ...]) -> tuple[str, ...]:
        lines: list[str] = []
        if value is not None:
            lines.append(f"history of {value!r}:")
            lines += ["  " + x.describe() for x in by_value.get(value, [])] or ["  (never in the history)"]
        if e is not None:
            lines.append(f"events around #{e.index}:")
            lo, hi = max(0, e.index - CONTEXT_EVENTS), e.index + CONTEXT_EVENTS + 1
            lines += ["  " + x.describe() + ("   <--" if x.index == e.index else "") for x in history[lo:hi]]
        if partition is not None and offset is not None and offset >= 0:
            lines += final.around(partition, offset)
        return tuple(lines) + extra

    raw: list[tuple[str, str, Event | None, bytes | None, int | None, int | None, tuple[str, ...]]] = []

    def violate(rule: str, message: str, e: Event | None, value: bytes | None = None,
                partition: int | None = None, offset: int | None = None, extra: tuple[str, ...] = ()) -> None:
        raw.append((rule, message, e, value, partition, offset, extra))

    # 7. The history is well formed.
    invoked: dict[bytes, Event] = {}
    answered: dict[bytes, Event] = {}
    for e in history:
        if e.kind == "invoke":
            if e.value in invoked:
                violate("malformed", f"{e.value!r} invoked twice (values must be unique)", e, e.value)
            invoked.setdefault(e.value, e)
        elif e.kind in ("ok", "fail"):
            first = invoked.get(e.value)
            if first is None:
                violate("malformed", f"{e.kind} of {e.value!r} before (or without) its invocation", e, e.value)
            elif first.process != e.process:
                violate("malformed", f"{e.kind} of {e.value!r} by {e.process}, invoked by {first.process}", e, e.value)
            if e.value in answered:
                violate("malformed", f"{e.value!r} answered twice ({answered[e.value].kind}, then {e.kind})", e, e.value)
            answered.setdefault(e.value, e)
            if e.kind == "ok" and e.partition < 0:
                violate("malformed", f"ok of {e.value!r} without a partition", e, e.value)
        elif e.kind in MEMBERSHIP and e.partition < 0:
            violate("malformed", f"{e.kind} by {e.process} without a partition", e)

    # Where each value is in the final log; 3 (contiguous) and 2 (duplicates) on the way.
    in_log: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    final_records = 0
    for p in sorted(final.partitions):
        records = final.partitions[p]
        final_records += len(records)
        for i, (o, v) in enumerate(records):
            if i and o != records[i - 1][0] + 1:
                violate("offsets", f"partition {p}: offset {records[i - 1][0]} is followed by {o} in the final log",
                        None, None, p, o)
            if ours is None or ours(v):
                in_log[v].append((p, o))
    duplicates = 0
    resent: list[str] = []
    # Values the client itself wrote more than once (every later copy explained): read or
    # acknowledged at any of their copies is right for them in rules 3 and 5.
    copies: dict[bytes, set[tuple[int, int]]] = {}
    for v, places in in_log.items():
        if len(places) > 1:
            duplicates += len(places) - 1
            if idempotent:
                # Each copy is held against the one before it (one re-send per epoch bump), and
                # never one the client was acknowledged at: it re-sends only what it had no
                # answer for.
                ack = answered.get(v)
                acked_at = (ack.partition, ack.offset) if ack is not None and ack.kind == "ok" else None
                why = [explain(p, o0, o) if explain is not None and p == p0 and acked_at != (p0, o0) else None
                       for (p0, o0), (p, o) in zip(places, places[1:])]
                if all(w is not None for w in why):
                    resent += [w for w in why if w is not None]  # the client's re-sends (client_resends)
                    copies[v] = set(places)
                    continue
                origin = invoked.get(v)
                violate("duplicate", f"{v!r} is in the final log {len(places)} times: "
                        + ", ".join(f"{p}:{o}" for p, o in places), origin, v, *places[1])

    # 1. Nothing acknowledged is lost; 3. no offset acknowledged with two values.
    acked_at: dict[tuple[int, int], Event] = {}
    lost = 0
    for e in history:
        if e.kind != "ok" or e.partition < 0:
            continue
        if e.offset < 0:  # acknowledged without an offset: somewhere in its partition
            if not any(p == e.partition for p, _o in in_log.get(e.value, ())):
                lost += 1
                where = ", ".join(f"{p}:{o}" for p, o in in_log.get(e.value, ())) or "nowhere"
                violate("lost", f"acknowledged {e.value!r} in partition {e.partition} (no offset reported) is in the final "
                        f"log {where}", e, e.value)
            continue
        other = acked_at.get((e.partition, e.offset))
        if other is not None and other.value != e.value:
            violate("offsets", f"{e.partition}:{e.offset} acknowledged for {other.value!r} (#{other.index}) and for {e.value!r}",
                    e, e.value, e.partition, e.offset)
        acked_at.setdefault((e.partition, e.offset), e)
        there = final.at(e.partition, e.offset)
        if there == e.value:
            continue
        lost += 1
        places = in_log.get(e.value)
        start = final.start(e.partition)
        if places:
            where = ", ".join(f"{p}:{o}" for p, o in places)
            violate("lost", f"acknowledged {e.value!r} at {e.partition}:{e.offset} is in the final log at {where} instead",
                    e, e.value, e.partition, e.offset)
        elif start is not None and e.offset < start:
            violate("lost", f"acknowledged {e.value!r} at {e.partition}:{e.offset} is below the final log start {start}",
                    e, e.value, e.partition, e.offset)
        else:
            held = f"{there!r} is there" if there is not None else "the final log ends before it"
            violate("lost", f"acknowledged {e.value!r} at {e.partition}:{e.offset} is not in the final log ({held})",
                    e, e.value, e.partition, e.offset)

    # 4. Reads are of the final log; 5. consumers agree on every offset and every value's place.
    read_at: dict[tuple[int, int], Event] = {}
    read_place: dict[bytes, Event] = {}
    reads = 0
    consumers: set[str] = set()
    for e in history:
        if e.kind != "read" or (ours is not None and not ours(e.value)):
            continue
        reads += 1
        consumers.add(e.process)
        there = final.at(e.partition, e.offset)
        if there != e.value:
            held = f"{there!r} is there" if there is not None else "not there"
            violate("read-not-in-log", f"{e.process} read {e.value!r} at {e.partition}:{e.offset}; in the final log {held}",
                    e, e.value, e.partition, e.offset)
        seen = read_at.get((e.partition, e.offset))
        if seen is not None and seen.value != e.value:
            violate("order", f"{e.partition}:{e.offset}: {seen.process} read {seen.value!r} (#{seen.index}), "
                    f"{e.process} read {e.value!r}", e, e.value, e.partition, e.offset)
        read_at.setdefault((e.partition, e.offset), e)
        placed = read_place.get(e.value)
        here = (e.partition, e.offset)
        if placed is not None and (placed.partition, placed.offset) != here and here not in copies.get(e.value, ()):
            violate("order", f"{e.value!r} read at {placed.partition}:{placed.offset} by {placed.process} (#{placed.index}) "
                    f"and at {e.partition}:{e.offset} by {e.process}", e, e.value, e.partition, e.offset)
        read_place.setdefault(e.value, e)
        acked = answered.get(e.value)
        if (acked is not None and acked.kind == "ok" and here not in copies.get(e.value, ())
                and (acked.partition != e.partition or 0 <= acked.offset != e.offset)):
            violate("offsets", f"{e.value!r} acknowledged at {acked.partition}:{acked.offset} but read at "
                    f"{e.partition}:{e.offset}", e, e.value, e.partition, e.offset)

    # 6. Nothing nobody wrote.
    for v, places in in_log.items():
        if v not in invoked:
            violate("phantom", f"{v!r} is in the final log at {places[0][0]}:{places[0][1]} but was never invoked",
                    None, v, *places[0])
    for v, e in read_place.items():
        if v not in invoked:
            violate("phantom", f"{e.process} read {v!r}, which was never invoked", e, v, e.partition, e.offset)

    # 10. Every invocation answered, once the producers are done: one violation per producer.
    if producers_done:
        unanswered_by: dict[str, list[Event]] = defaultdict(list)
        for v, e in invoked.items():
            if v not in answered:
                unanswered_by[e.process].append(e)
        for process, waiting in sorted(unanswered_by.items()):
            shown = ", ".join(repr(e.value) for e in waiting[:5]) + (", ..." if len(waiting) > 5 else "")
            violate("unanswered", f"{process}: {len(waiting)} values invoked were never acknowledged nor failed: {shown}",
                    waiting[0], waiting[0].value)

    # 8. The consumers read every offset; 9. each in log order between rebalances.
    relevant = _offsets_to_read(final, ours)
    unread = _check_unread(history, relevant, ours, violate)
    _check_positions(history, relevant, ours, violate)

    failed = [e for e in history if e.kind == "fail"]
    counts = {
        "invoked": len(invoked),
        "acked": sum(1 for e in history if e.kind == "ok"),
        "failed": len(failed),
        "failed_present": sum(1 for e in failed if e.value in in_log),
        "unanswered": sum(1 for v in invoked if v not in answered),
        "lost": lost,
        "duplicates": duplicates,
        "client_resends": len(resent),
        "reads": reads,
        "consumers": len(consumers),
        "final_records": final_records,
        "unread": unread,
    }
    # History order first; violations found only in the final log (no event) after them.
    raw.sort(key=lambda r: (r[2] is None, r[2].index if r[2] is not None else 0))
    kept = [Violation(rule, message, e.index if e is not None else None, context(e, value, partition, offset, extra))
            for rule, message, e, value, partition, offset, extra in raw[:VIOLATIONS_KEPT]]
    return Verdict(not raw, counts, kept, len(raw), resent[:VIOLATIONS_KEPT])


Violate = Callable[..., None]
RANGES_SHOWN = 10  # unread offset ranges named in a violation's message


def _offsets_to_read(final: FinalLog, ours: Callable[[bytes], bool] | None) -> dict[int, list[int]]:
    """Per partition, the sorted offsets of the final log consumers are held to (rules 8, 9):
    all of them, or with `ours` those holding this workload's values."""
    return {p: [o for o, v in records if ours is None or ours(v)] for p, records in final.partitions.items()}


def _ranges(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as (first, last) runs of consecutive ones."""
    out: list[tuple[int, int]] = []
    for o in offsets:
        if out and out[-1][1] == o - 1:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


def _describe_ranges(ranges: list[tuple[int, int]]) -> str:
    shown = ", ".join(f"{a}..{b}" if a != b else f"{a}" for a, b in ranges[:RANGES_SHOWN])
    return shown + (f" and {len(ranges) - RANGES_SHOWN} more ranges" if len(ranges) > RANGES_SHOWN else "")


def _check_unread(history: list[Event], relevant: Mapping[int, list[int]], ours: Callable[[bytes], bool] | None,
                  violate: Violate) -> int:
    """Rule 8: per partition, the offsets of the final log from the consumers' lowest read up to
    the highest acknowledged offset that no consumer read. One violation per partition, naming
    the offsets, how many, and the reads on either side of the first gap. Returns how many."""
    acked_max: dict[int, int] = {}
    for e in history:
        if e.kind == "ok" and e.partition >= 0 and e.offset >= 0:
            acked_max[e.partition] = max(acked_max.get(e.partition, e.offset), e.offset)
    grouped = any(e.kind == "assign" for e in history)
    reads: dict[int, list[Event]] = defaultdict(list)
    for e in history:
        if e.kind == "read" and (ours is None or ours(e.value)):
            reads[e.partition].append(e)
    total = 0
    for p, hi in sorted(acked_max.items()):
        if p not in reads and not grouped:
            continue  # no consumer was meant to read it (no group, nor any read of it)
        offsets = relevant.get(p, [])
        seen = bytearray(len(offsets))
        for e in reads.get(p, ()):
            i = bisect.bisect_left(offsets, e.offset)
            if i < len(offsets) and offsets[i] == e.offset:
                seen[i] = 1
        start = min((e.offset for e in reads.get(p, ())), default=None)
        first = 0 if start is None else bisect.bisect_left(offsets, start)
        missing = [offsets[i] for i in range(first, bisect.bisect_right(offsets, hi)) if not seen[i]]
        if not missing:
            continue
        total += len(missing)
        ranges = _ranges(missing)
        if start is None:
            violate("unread", f"partition {p}: no consumer read it: {len(missing)} records of the final log up to the "
                    f"highest acknowledged offset {hi} were never read: offsets {_describe_ranges(ranges)}",
                    None, None, p, missing[0])
            continue
        gap_first, gap_last = ranges[0]
        below = max((e for e in reads[p] if e.offset < gap_first), key=lambda e: (e.offset, -e.index), default=None)
        above = min((e for e in reads[p] if e.offset > gap_last), key=lambda e: (e.offset, e.index), default=None)
        extra = (f"the read below the first gap: {below.describe() if below else 'none'}",
                 f"the read above it: {above.describe() if above else 'none'}")
        violate("unread", f"partition {p}: {len(missing)} records of the final log between the consumers' lowest read "
                f"there, {start}, and the highest acknowledged offset {hi} were read by no consumer: offsets "
                f"{_describe_ranges(ranges)}", below, None, p, gap_first, extra)
    return total


def _check_positions(history: list[Event], relevant: Mapping[int, list[int]], ours: Callable[[bytes], bool] | None,
                     violate: Violate) -> None:
    """Rule 9: each consumer's reads of a partition follow the log, one after the other,
    except the first read after an assignment (and its very first read of the partition)."""
    previous: dict[tuple[str, int], Event] = {}
    assigned: set[tuple[str, int]] = set()  # assigned since their last read
    for e in history:
        key = (e.process, e.partition)
        if e.kind == "assign":
            assigned.add(key)
            continue
        if e.kind != "read" or (ours is not None and not ours(e.value)):
            continue
        before = previous.get(key)
        previous[key] = e
        if before is None or key in assigned:
            assigned.discard(key)
            continue
        p, o, q = e.partition, e.offset, before.offset
        head = f"{e.process} read {p}:{o} after {p}:{q} (#{before.index}) with no assignment of {p} to it between"
        if o <= q:
            violate("position", f"{head}: it went back {q - o + 1} offsets", e, e.value, p, o)
            continue
        offsets = relevant.get(p, [])
        lo, hi = bisect.bisect_right(offsets, q), bisect.bisect_left(offsets, o)
        if hi > lo:
            violate("position", f"{head}: it skipped {hi - lo} records of the final log "
                    f"({_describe_ranges(_ranges(offsets[lo:hi]))})", e, e.value, p, o)


def final_log_from(records: Mapping[int, Iterable[tuple[int, bytes]]]) -> FinalLog:
    """A FinalLog from per-partition (offset, value) records, sorted by offset."""
    return FinalLog({p: sorted(rs, key=lambda r: r[0]) for p, rs in records.items()})


__all__ = ["Event", "FinalLog", "History", "Verdict", "Violation", "check", "final_log_from"]
