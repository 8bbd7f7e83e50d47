"""A consumer-group member as its own process, for tests that kill it (or its coordinator).

    python -m kafkalite.testing.group_member BOOTSTRAP GROUP TOPIC JOURNAL [--commit-every N]
        [--session-timeout-ms MS]

A confluent-kafka (librdkafka) consumer subscribed to TOPIC in GROUP, with auto-commit off.
It appends to JOURNAL, one line per event, flushed at once (a line written before a
SIGKILL is in the file):

    A <ts> <p,p,...>      partitions assigned (eager protocol: the whole new assignment)
    V <ts> <p,p,...>      partitions revoked
    R <ts> <p> <offset>   a record processed
    T <ts> <p> <offset>   an OffsetCommit of `offset` (the next to read) is being attempted
    C <ts> <p> <offset>   ... and the coordinator acknowledged it
    F <ts> <p> <offset> <error>   ... and it failed (the commit may still have been written)

It commits synchronously, per partition, the offset after the last record it processed:
after every N records, and for revoked partitions before giving them up, so that a
partition moving to another live member is not read twice. SIGTERM makes it stop and close
(leaving the group); SIGKILL leaves its session to time out. It also stops after
--lifetime-s, or when its parent is gone, so that an aborted test leaves nothing running.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import TextIO

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafkalite.cli import client_security

POLL_TIMEOUT_S = 0.2


class Member:
    def __init__(self, args: argparse.Namespace, journal: TextIO) -> None:
        self.topic = args.topic
        self.commit_every = args.commit_every
        self.journal = journal
        self.next_offset: dict[int, int] = {}  # partition -> offset after the last processed record
        self.committed: dict[int, int] = {}  # partition -> last acknowledged commit
        self.since_commit = 0
        self.stop = False
        self.consumer = Consumer({
            **client_security.librdkafka_config(),
            "bootstrap.servers": args.bootstrap, "group.id": args.group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": max(args.session_timeout_ms // 6, 100), "partition.assignment.strategy": "range",
            "client.id": args.client_id, "topic.metadata.refresh.interval.ms": 2000,
            **({"debug": args.debug} if args.debug else {}),
        })

    def note(self, *fields: object) -> None:
        self.journal.write(" ".join(str(f) for f in (fields[0], f"{time.time():.3f}", *fields[1:])) + "\n")
        self.journal.flush()

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.note("A", ",".join(str(tp.partition) for tp in partitions) or "-")

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.commit([tp.partition for tp in partitions])
        for tp in partitions:
            self.next_offset.pop(tp.partition, None)
        self.note("V", ",".join(str(tp.partition) for tp in partitions) or "-")

    def commit(self, partitions: list[int]) -> None:
        todo = [p for p in partitions if p in self.next_offset and self.next_offset[p] != self.committed.get(p)]
        if not todo:
            return
        for p in todo:
            self.note("T", p, self.next_offset[p])
        offsets = [TopicPartition(self.topic, p, self.next_offset[p]) for p in todo]
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            for tp in offsets:
                self.note("F", tp.partition, tp.offset, str(e.args[0].name()))
            return
        for tp in result:
            if tp.error is None:
                self.committed[tp.partition] = tp.offset
                self.note("C", tp.partition, tp.offset)
            else:
                self.note("F", tp.partition, tp.offset, tp.error.name())

    def run(self, lifetime_s: float) -> None:
        """Until SIGTERM, the end of its lifetime, or its parent (the test) is gone."""
        parent = os.getppid()
        end = time.monotonic() + lifetime_s
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        try:
            while not self.stop and time.monotonic() < end and os.getppid() == parent:
                msg = self.consumer.poll(POLL_TIMEOUT_S)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.note("E", msg.error().name())
                    continue
                self.note("R", msg.partition(), msg.offset())
                self.next_offset[msg.partition()] = msg.offset() + 1
                self.since_commit += 1
                if self.since_commit >= self.commit_every:
                    self.since_commit = 0
                    self.commit(sorted(self.next_offset))
        finally:
            self.consumer.close()  # revokes (committing) and leaves the group
            self.note("X")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("journal")
    parser.add_argument("--commit-every", type=int, default=25)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--client-id", default="group-member")
    parser.add_argument("--lifetime-s", type=float, default=600.0, help="exit after this long, whatever happens")
    parser.add_argument("--debug", default=os.environ.get("GROUP_MEMBER_DEBUG", ""), help="librdkafka debug contexts (to stderr)")
    args = parser.parse_args(argv)
    with open(args.journal, "a") as journal:
        member = Member(args, journal)

        def stop(signum: int, frame: object) -> None:
            member.stop = True

        signal.signal(signal.SIGTERM, stop)
        member.run(args.lifetime_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
