"""A consumer group under failures: the group part of `bin/chaos` (issue 10).

Members are confluent-kafka consumers of one group, subscribed to the chaos topic (range
assignor, eager rebalances), each in its own thread, committing synchronously every
`commit_every` records and on revocation. They check, as they go:

- an acknowledged commit is never lost: when a partition is assigned, its first record
  must be at or after the highest commit of it acknowledged to any member before the
  assignment (librdkafka starts an assigned partition at its committed offset);
- the group makes progress: `stalled_s()` is how long no member consumed anything.

`caught_up(acked)` says whether the members together consumed, per partition, every offset
from the lowest they consumed up to the highest acknowledged one (`unconsumed(acked)` says
what they have not), and `committed_offsets()` reads the commits back with a fresh client.
With a `history` (kafkalite.testing.history) every record a member consumes is recorded as a
read by that member, and every partition assigned to it or revoked from it as an assign or
a revoke, for the history checker (which holds each member to reading in log order between
rebalances).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafkalite.cli import client_security
from kafkalite.testing.history import History

POLL_S = 0.2


class OffsetRanges:
    """A set of offsets as sorted, disjoint, non-adjacent [first, last] runs: what a group
    consumed of a partition, in a few runs however long the workload (duplicates after a
    rebalance fall inside a run)."""

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.lasts: list[int] = []

    def add(self, offset: int) -> None:
        i = bisect.bisect_right(self.firsts, offset) - 1  # the run starting at or before offset
        if i >= 0 and self.lasts[i] >= offset:
            return
        joins_left = i >= 0 and self.lasts[i] == offset - 1
        joins_right = i + 1 < len(self.firsts) and self.firsts[i + 1] == offset + 1
        if joins_left and joins_right:
            self.lasts[i] = self.lasts[i + 1]
            del self.firsts[i + 1], self.lasts[i + 1]
        elif joins_left:
            self.lasts[i] = offset
        elif joins_right:
            self.firsts[i + 1] = offset
        else:
            self.firsts.insert(i + 1, offset)
            self.lasts.insert(i + 1, offset)

    def runs(self) -> list[tuple[int, int]]:
        return list(zip(self.firsts, self.lasts))

    def holes_up_to(self, offset: int) -> list[tuple[int, int]]:
        """The runs of offsets missing between the lowest offset held and `offset`."""
        out = [(last + 1, first - 1) for last, first in zip(self.lasts, self.firsts[1:]) if last < offset]
        return [(a, min(b, offset)) for a, b in out]


class GroupLedger:
    """What the members saw, shared between their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked_commits: dict[int, int] = {}  # partition -> highest acknowledged commit
        self.consumed_max: dict[int, int] = {}  # partition -> highest offset consumed
        self.consumed_offsets: dict[int, OffsetRanges] = {}  # partition -> every offset consumed
        self.consumed = 0
        self.commits = 0
        self.rebalances = 0
        self.problems: list[str] = []
        self.last_progress = time.monotonic()

    def commit_acked(self, offsets: list[TopicPartition]) -> None:
        with self.lock:
            self.commits += 1
            for tp in offsets:
                if tp.error is None and tp.offset >= 0:
                    self.acked_commits[tp.partition] = max(self.acked_commits.get(tp.partition, -1), tp.offset)

    def stalled_s(self) -> float:
        with self.lock:
            return time.monotonic() - self.last_progress


class GroupMember(threading.Thread):
    def __init__(self, ledger: GroupLedger, bootstrap: str, topic: str, group: str, name: str, commit_every: int,
                 seconds_max: float, history: History | None = None) -> None:
        super().__init__(daemon=True, name=name)
        self.history = history
        self.ledger, self.bootstrap, self.topic, self.group = ledger, bootstrap, topic, group
        self.commit_every, self.seconds_max = commit_every, seconds_max
        self._halt = threading.Event()
        self._floor: dict[int, int] = {}  # newly assigned partition -> the commit its first record must not precede
        self._consumer: Consumer | None = None

    def stop(self) -> None:
        self._halt.set()

    def _commit(self) -> None:
        assert self._consumer is not None
        try:
            offsets = self._consumer.commit(asynchronous=False)
        except KafkaException:
            return  # not acknowledged: nothing to remember (retried with the next batch)
        if offsets:
            self.ledger.commit_acked(offsets)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.history is not None:  # before any record of them is returned (the callback runs in poll)
            for tp in partitions:
                self.history.assign(self.name, tp.partition)
        with self.ledger.lock:
            self.ledger.rebalances += 1
            for tp in partitions:
                self._floor[tp.partition] = self.ledger.acked_commits.get(tp.partition, -1)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit()
        for tp in partitions:
            self._floor.pop(tp.partition, None)
            if self.history is not None:
                self.history.revoke(self.name, tp.partition)

    def run(self) -> None:
        consumer = self._consumer = Consumer({
            **client_security.librdkafka_config(),
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
            "partition.assignment.strategy": "range", "topic.metadata.refresh.interval.ms": 1000, "log_level": 3,
        })
        consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        since_commit = 0
        end = time.monotonic() + self.seconds_max
        try:
            while not self._halt.is_set() and time.monotonic() < end:
                msg = consumer.poll(POLL_S)
                if msg is None or msg.error() is not None:
                    continue
                p, offset = msg.partition(), msg.offset()
                if self.history is not None:
                    self.history.read(self.name, msg.value(), p, offset)
                floor = self._floor.pop(p, None)
                with self.ledger.lock:
                    if floor is not None and 0 <= offset < floor:
                        self.ledger.problems.append(f"{self.name}: partition {p} resumed at offset {offset}, below the "
                                                    f"acknowledged commit {floor}")
                    self.ledger.consumed += 1
                    self.ledger.consumed_max[p] = max(self.ledger.consumed_max.get(p, -1), offset)
                    self.ledger.consumed_offsets.setdefault(p, OffsetRanges()).add(offset)
                    self.ledger.last_progress = time.monotonic()
                since_commit += 1
                if since_commit >= self.commit_every:
                    self._commit()
                    since_commit = 0
            self._commit()
        finally:
            consumer.close()


class GroupWatch:
    """`members` consumers of `group`; `start()`, later `stop()` (joins them)."""

    def __init__(self, bootstrap: str, topic: str, group: str, *, members: int = 2, commit_every: int = 500,
                 seconds_max: float = 3600, history: History | None = None) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.ledger = GroupLedger()
        self.members = [GroupMember(self.ledger, bootstrap, topic, group, f"{group}-member-{i}", commit_every, seconds_max,
                                    history)
                        for i in range(members)]

    def start(self) -> None:
        for m in self.members:
            m.start()

    def stop(self, timeout_s: float = 60) -> None:
        for m in self.members:
            m.stop()
        for m in self.members:
            m.join(timeout_s)

    def caught_up(self, acked_max: Mapping[int, int]) -> bool:
        """Have the members consumed, per partition, every offset from the lowest they consumed
        up to the highest acknowledged offset? (The chaos topics have contiguous offsets: not
        compacted, no transactions.)"""
        return not self.unconsumed(acked_max)

    def unconsumed(self, acked_max: Mapping[int, int]) -> list[str]:
        """Per partition, what the members have not consumed up to the highest acknowledged
        offset (an offset below 0, acknowledged without one, asks for nothing)."""
        out = []
        with self.ledger.lock:
            for p, offset in sorted(acked_max.items()):
                ranges = self.ledger.consumed_offsets.get(p)
                if offset < 0:
                    continue
                if ranges is None:
                    out.append(f"partition {p}: nothing consumed (highest acknowledged offset {offset})")
                    continue
                holes = ranges.holes_up_to(offset)
                if holes:
                    missing = sum(b - a + 1 for a, b in holes)
                    shown = ", ".join(f"{a}..{b}" if a != b else f"{a}" for a, b in holes[:10])
                    out.append(f"partition {p}: {missing} offsets not consumed between {ranges.firsts[0]} and the highest "
                               f"acknowledged offset {offset}: {shown}" + (" ..." if len(holes) > 10 else ""))
                if ranges.lasts[-1] < offset:
                    out.append(f"partition {p}: consumed up to {ranges.lasts[-1]}, below the highest acknowledged offset "
                               f"{offset}")
        return out

    def committed_offsets(self, partitions: int, timeout_s: float = 30) -> dict[int, int]:
        """The group's commits, read back by a client that does not join it."""
        reader = Consumer({**client_security.librdkafka_config(), "bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                           "log_level": 3})
        try:
            got = reader.committed([TopicPartition(self.topic, p) for p in range(partitions)], timeout=timeout_s)
        finally:
            reader.close()
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}

    def lost_commits(self, partitions: int) -> list[str]:
        """Acknowledged commits the group no longer has (read back below the last acknowledged)."""
        committed = self.committed_offsets(partitions)
        with self.ledger.lock:
            acked = dict(self.ledger.acked_commits)
        return [f"partition {p}: committed offset read back {committed.get(p)}, below the acknowledged {offset}"
                for p, offset in sorted(acked.items()) if committed.get(p, -1) < offset]
