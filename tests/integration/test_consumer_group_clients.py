"""Real clients' consumer groups against a real 3-broker cluster (issue 10): the group
coordinator must serve confluent-kafka (librdkafka), kcat, kafka-python and aiokafka as they
are, with no client setting bent for kafkalite.

- subscribe with the range, roundrobin and cooperative-sticky assignors: three members
  share a topic, each record is consumed exactly once while the group is stable, and the
  committed offsets read back by `committed()` are the ends of the partitions;
- synchronous, asynchronous (on_commit) and automatic commits: a fresh member of the group
  resumes exactly where the commit left off (nothing read twice, nothing skipped);
- static membership (KIP-345): a member closed without leaving and restarted with its
  group.instance.id within the session timeout gets its partitions back, and the other
  member is never revoked (no rebalance);
- kcat -G consumes and commits; kafka-python's KafkaConsumer (at the versions it
  negotiates and at its 0.11 and 2.0 tables) and aiokafka's AIOKafkaConsumer consume,
  commit, and a second consumer resumes from the commit;
- and around those: partitions added to a subscribed topic, the coordinator killed (the
  next one loads commits and group), a member killed (its session ends, the survivor
  resumes at its commits), confluent + kafka-python + aiokafka in one group, static
  members of kafka-python and aiokafka, and the group admin APIs of confluent's and
  kafka-python's admin clients.

Every test is one cluster, a few thousand records, bounded waits. Where aiokafka shares a
group with kafka-python, the aiokafka member runs in a process of its own: with aiokafka's
event loop in a thread of the test's process, kafka-python 3.0.12 stalled in about one run
in five (after a successful SyncGroup its poll() spun without sending another request, not
even a heartbeat, until the session timeout removed it; the broker had answered everything).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.probes import wait_until

# Groups settle in a second or two instead of Kafka's production delays.
GROUP_OVERRIDES = {"offsets.topic.num.partitions": 6, "group.initial.rebalance.delay.ms": 0,
                   "group.min.session.timeout.ms": 500}
RECORDS = 3000
WAIT_S = 60.0
# librdkafka's member settings: heartbeats often, so a rebalance is noticed within a second;
# a session long enough not to expire on a loaded 2-core machine.
MEMBER_CONFIG = {"session.timeout.ms": 10_000, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
                 "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 5000}
OFFSET_INVALID = -1001  # librdkafka: no committed offset

Position = tuple[int, int]  # (partition, offset)


def create_topic(boot: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": boot})  # must outlive the futures
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3)]).values():
        future.result(timeout=30)


def produce(boot: str, topic: str, count: int = RECORDS) -> set[Position]:
    """`count` keyed records with acks=all; what the broker acknowledged."""
    acked: set[Position] = set()
    errors: list[object] = []

    def done(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.add((msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"key-%d" % i, value=b"value-%d" % i, on_delivery=done)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0, "records still unacknowledged"
    assert not errors, errors[:5]
    assert len(acked) == count
    return acked


def ends_of(acked: Iterable[Position]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for p, o in acked:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


def next_offsets(consumed: Iterable[Position]) -> dict[int, int]:
    """Per partition, the offset after the last record consumed (what a commit stores)."""
    return ends_of(consumed)


def from_zero(offsets: dict[int, int | None], partitions: int) -> dict[int, int]:
    """Where a consumer resumes, per partition: nothing committed (None, OFFSET_INVALID)
    means the start (kafka-python and aiokafka commit offset 0 for a partition they were
    assigned but read nothing from; librdkafka commits nothing for it)."""
    return {p: 0 if offsets.get(p) in (None, OFFSET_INVALID) else offsets[p] for p in range(partitions)}


def committed_offsets(boot: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as an outsider reads them (OffsetFetch by a consumer
    that never joins), OFFSET_INVALID where nothing is committed."""
    probe = Consumer({"bootstrap.servers": boot, "group.id": group, "enable.auto.commit": False})
    try:
        tps = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        probe.close()
    for tp in tps:
        assert tp.error is None, tp
    return {tp.partition: tp.offset for tp in tps}


class Member:
    """One confluent-kafka group member, with what its rebalance callbacks and polls saw."""

    def __init__(self, boot: str, group: str, name: str, **config) -> None:
        self.name = name
        self.consumer = Consumer({"bootstrap.servers": boot, "group.id": group, "client.id": name, **MEMBER_CONFIG, **config})
        self.events: list[tuple[str, frozenset[int]]] = []  # ("assign" | "revoke" | "lost", partitions)
        self.consumed_before_event: list[int] = []  # len(consumed) when each event came
        self.consumed: list[Position] = []
        self.errors: list[KafkaError] = []
        self.closed = False

    def subscribe(self, topic: str) -> None:
        self.consumer.subscribe([topic], on_assign=self._on("assign"), on_revoke=self._on("revoke"), on_lost=self._on("lost"))

    def _on(self, kind: str) -> Callable:
        def callback(_consumer, partitions) -> None:
            self.events.append((kind, frozenset(tp.partition for tp in partitions)))
            self.consumed_before_event.append(len(self.consumed))
        return callback

    def poll(self, timeout_s: float = 0.05, max_records: int = 500) -> None:
        for msg in self.consumer.consume(max_records, timeout_s):
            if msg.error() is not None:
                self.errors.append(msg.error())
            else:
                self.consumed.append((msg.partition(), msg.offset()))

    def assigned(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def poll_all(members: list[Member], rounds: int = 1) -> None:
    for _ in range(rounds):
        for m in members:
            m.poll()


def balanced(members: list[Member], partitions: int) -> bool:
    """Every partition assigned to exactly one member, evenly."""
    sets = [m.assigned() for m in members]
    share = partitions // len(members)
    return all(len(s) == share for s in sets) and len(frozenset().union(*sets)) == partitions


def wait_balanced(members: list[Member], partitions: int) -> None:
    def settled() -> bool:
        poll_all(members)
        return balanced(members, partitions)
    wait_until(settled, WAIT_S, f"{len(members)} members sharing {partitions} partitions evenly", interval_s=0)


def close_all(members: list[Member]) -> None:
    for m in members:
        m.close()


def consume_all(members: list[Member], acked: set[Position]) -> None:
    """Poll until the members together consumed `acked`, then a little more (a duplicate
    would arrive now)."""
    deadline = time.monotonic() + WAIT_S
    while sum(len(m.consumed) for m in members) < len(acked) and time.monotonic() < deadline:
        poll_all(members)
    poll_all(members, rounds=20)
    for m in members:
        assert not m.errors, m.errors


def describe_group(boot: str, group: str):
    admin = AdminClient({"bootstrap.servers": boot})
    return admin.describe_consumer_groups([group])[group].result(timeout=10)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------- assignors


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_subscribed_members_consume_each_record_once_and_commit(cluster_factory, strategy):
    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("shared"), unique(f"group-{strategy}"), 6
    create_topic(boot, topic, partitions)
    members = [Member(boot, group, f"member-{i}", **{"partition.assignment.strategy": strategy}) for i in range(3)]
    try:
        for m in members:
            m.subscribe(topic)
        wait_balanced(members, partitions)
        settled_events = [len(m.events) for m in members]

        acked = produce(boot, topic)
        consume_all(members, acked)

        consumed = [pos for m in members for pos in m.consumed]
        assert len(consumed) == len(set(consumed)), "a record was consumed twice"
        assert set(consumed) == acked
        for m, before in zip(members, settled_events, strict=True):
            assert m.events[before:] == [], f"{m.name} rebalanced in steady state: {m.events[before:]}"
            assert {p for p, _ in m.consumed} <= m.assigned(), f"{m.name} consumed outside its assignment"
            assert not m.errors, m.errors

        ends = ends_of(acked)
        for m in members:
            results = m.consumer.commit(asynchronous=False)
            assert all(tp.error is None for tp in results), results
            mine = [TopicPartition(topic, p) for p in sorted(m.assigned())]
            assert {tp.partition: tp.offset for tp in m.consumer.committed(mine, timeout=10)} == \
                {p: ends.get(p, OFFSET_INVALID) for p in m.assigned()}
        assert committed_offsets(boot, group, topic, partitions) == {p: ends.get(p, OFFSET_INVALID) for p in range(partitions)}
    finally:
        close_all(members)


def test_group_rebalances_onto_partitions_added_to_its_topic(cluster_factory):
    """The leader notices the new partitions in its metadata and rejoins a Stable group
    (the coordinator rebalances on a leader's JoinGroup); records written to the new
    partitions are consumed."""
    from confluent_kafka.admin import NewPartitions

    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group = unique("growing"), unique("group-growing")
    create_topic(boot, topic, 2)
    members = [Member(boot, group, f"member-{i}", **{"partition.assignment.strategy": "range",
                                                      "topic.metadata.refresh.interval.ms": 1000}) for i in range(2)]
    try:
        for m in members:
            m.subscribe(topic)
        wait_balanced(members, 2)
        admin = AdminClient({"bootstrap.servers": boot})
        for future in admin.create_partitions([NewPartitions(topic, 4)]).values():
            future.result(timeout=30)
        wait_balanced(members, 4)
        acked = produce(boot, topic, 1000)
        assert {p for p, _ in acked} == {0, 1, 2, 3}
        consume_all(members, acked)
        consumed = [pos for m in members for pos in m.consumed]
        assert len(consumed) == len(set(consumed))
        assert set(consumed) == acked
    finally:
        close_all(members)


# ---------------------------------------------------------------------------- commit modes


def consume_some(member: Member, count: int) -> None:
    """Poll one record at a time until `count` were consumed (the stored offsets then are
    exactly past them), then pause the assignment so no more arrive."""
    deadline = time.monotonic() + WAIT_S
    while len(member.consumed) < count:
        assert time.monotonic() < deadline, f"{member.name} consumed {len(member.consumed)} of {count}"
        member.poll(0.5, max_records=count - len(member.consumed))
    member.consumer.pause(list(member.consumer.assignment()))


@pytest.mark.parametrize("mode", ["sync", "async", "auto"])
def test_fresh_member_resumes_from_the_commit(cluster_factory, mode):
    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("resume"), unique(f"group-{mode}"), 3
    create_topic(boot, topic, partitions)
    acked = produce(boot, topic)
    commits: list[tuple[KafkaError | None, list[TopicPartition]]] = []
    config: dict = {"on_commit": lambda err, tps: commits.append((err, tps)), "enable.partition.eof": False}
    if mode == "auto":
        config.update({"enable.auto.commit": True, "auto.commit.interval.ms": 200})
    first = Member(boot, group, f"first-{mode}", **config)
    second = None
    try:
        first.subscribe(topic)
        consume_some(first, RECORDS // 2)
        positions = next_offsets(first.consumed)
        want = {p: positions.get(p, OFFSET_INVALID) for p in range(partitions)}
        if mode == "sync":
            results = first.consumer.commit(asynchronous=False)
            assert {tp.partition: tp.offset for tp in results if tp.error is None} == want, results
        elif mode == "async":
            assert first.consumer.commit(asynchronous=True) is None
            wait_until(lambda: first.poll(0.1) or commits, WAIT_S, "the on_commit callback")
            err, tps = commits[0]
            assert err is None, err
            assert {tp.partition: tp.offset for tp in tps if tp.error is None} == want, tps
        # An outsider reads the commit before the member closes (close would commit too).
        wait_until(lambda: committed_offsets(boot, group, topic, partitions) == want, WAIT_S if mode == "auto" else 10,
                   f"the {mode} commit of {want}")
        if mode == "auto":  # its on_commit reports are served by poll
            wait_until(lambda: first.poll(0.1) or commits, 10, "an on_commit report of the automatic commits")
            assert all(err is None for err, _ in commits), commits
        first.close()

        second = Member(boot, group, f"second-{mode}")
        tps = second.consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        assert {tp.partition: tp.offset for tp in tps} == want
        second.subscribe(topic)
        deadline = time.monotonic() + WAIT_S
        while len(first.consumed) + len(second.consumed) < len(acked) and time.monotonic() < deadline:
            second.poll(0.2)
        for _ in range(10):
            second.poll(0.05)
        assert not set(first.consumed) & set(second.consumed), "the second member read records the commit covered"
        assert set(first.consumed) | set(second.consumed) == acked
        assert len(second.consumed) == len(set(second.consumed))
        first_seen = {}
        for p, o in second.consumed:
            first_seen.setdefault(p, o)
        assert first_seen == {p: positions.get(p, 0) for p in first_seen}, "did not resume at the committed offset"
    finally:
        first.close()
        if second is not None:
            second.close()


# ---------------------------------------------------------------------------- static membership


STATIC_SESSION_TIMEOUT_MS = 6000
STATIC = {"partition.assignment.strategy": "range", "session.timeout.ms": STATIC_SESSION_TIMEOUT_MS}


def test_static_member_restarted_within_session_timeout_causes_no_rebalance(cluster_factory):
    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("static"), unique("group-static"), 4
    create_topic(boot, topic, partitions)
    members = {name: Member(boot, group, name, **{"group.instance.id": name, **STATIC})
               for name in ("static-a", "static-b")}
    try:
        for m in members.values():
            m.subscribe(topic)
        wait_balanced(list(members.values()), partitions)
        poll_all(list(members.values()), rounds=20)
        before = {name: m.assigned() for name, m in members.items()}
        described = describe_group(boot, group)
        ids_before = {m.group_instance_id: m.member_id for m in described.members}
        assert set(ids_before) == set(members)

        # Restart each member in turn (one of them is the group's leader): closed without
        # leaving, back with the same group.instance.id well within session.timeout.ms.
        for name in ("static-a", "static-b"):
            other = next(m for n, m in members.items() if n != name)
            other_events = len(other.events)
            members[name].close()
            members[name] = restarted = Member(boot, group, name, **{"group.instance.id": name, **STATIC})
            restarted.subscribe(topic)

            def back(restarted=restarted, other=other) -> bool:
                poll_all([restarted, other])
                return restarted.assigned() != frozenset()
            wait_until(back, WAIT_S, f"{name} to get its partitions back", interval_s=0)
            # Several heartbeat intervals: a rebalance would reach the other member now.
            end = time.monotonic() + 3
            while time.monotonic() < end:
                poll_all([restarted, other])
            assert restarted.assigned() == before[name]
            assert restarted.events == [("assign", before[name])]
            assert other.events[other_events:] == [], f"{other.name} saw a rebalance: {other.events[other_events:]}"
            assert other.assigned() == before[other.name]

        described = describe_group(boot, group)
        assert str(described.state).endswith("STABLE"), described.state
        ids_after = {m.group_instance_id: m.member_id for m in described.members}
        assert set(ids_after) == set(members)
        assert all(ids_after[n] != ids_before[n] for n in members), "a restarted static member kept its member id"
        assigned = {m.group_instance_id: frozenset(tp.partition for tp in m.assignment.topic_partitions) for m in described.members}
        assert assigned == before

        # Not back in time: only the session timeout removes it (close sent no LeaveGroup),
        # and then the other member takes every partition.
        gone, other = members["static-a"], members["static-b"]
        other_events = len(other.events)
        closed_at = time.monotonic()
        gone.close()

        def taken_over() -> bool:
            other.poll()
            return other.assigned() == frozenset(range(partitions))
        wait_until(taken_over, WAIT_S, "static-b to take static-a's partitions", interval_s=0)
        elapsed_s = time.monotonic() - closed_at
        assert elapsed_s >= STATIC_SESSION_TIMEOUT_MS / 1000 - 1, f"static-a was removed {elapsed_s:.1f} s after closing"
        assert other.events[other_events] == ("revoke", before["static-b"])
    finally:
        close_all(list(members.values()))


# ---------------------------------------------------------------------------- kcat


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer_consumes_and_commits(cluster_factory):
    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("kcat"), unique("group-kcat"), 3
    create_topic(boot, topic, partitions)
    acked = produce(boot, topic)

    def kcat_group() -> set[Position]:
        done = subprocess.run(["kcat", "-b", boot, "-G", group, topic, "-e", "-q", "-f", "%p %o\\n",
                               "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
                               "-X", "heartbeat.interval.ms=500"],
                              capture_output=True, text=True, timeout=WAIT_S)
        assert done.returncode == 0, f"kcat exited {done.returncode}:\n{done.stderr}"
        assert "ERROR" not in done.stderr, done.stderr
        seen = [tuple(int(x) for x in line.split()) for line in done.stdout.splitlines() if line.strip()]
        assert len(seen) == len(set(seen))
        return set(seen)

    assert kcat_group() == acked
    assert committed_offsets(boot, group, topic, partitions) == ends_of(acked)
    assert kcat_group() == set(), "a second kcat in the group read committed records again"


# ---------------------------------------------------------------------------- kafka-python / aiokafka


# None: the versions kafka-python picks from ApiVersions (JoinGroup v5, OffsetCommit v7, ...);
# (0, 11): JoinGroup v2, SyncGroup/Heartbeat/LeaveGroup v1, OffsetCommit/OffsetFetch v3;
# (2, 0): JoinGroup v3, OffsetCommit/OffsetFetch v4. Older tables need Fetch and Metadata
# versions kafkalite does not serve.
@pytest.mark.parametrize("api_version", [None, (0, 11), (2, 0)], ids=["negotiated", "0.11", "2.0"])
def test_kafka_python_consumer_commits_and_a_second_resumes(cluster_factory, api_version):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("kafka-python"), unique("group-kafka-python"), 3
    create_topic(boot, topic, partitions)
    acked = produce(boot, topic)
    settings = {"group_id": group, "bootstrap_servers": boot, "auto_offset_reset": "earliest", "enable_auto_commit": False,
                "session_timeout_ms": 10_000, "heartbeat_interval_ms": 500, "api_version": api_version}

    def consume(consumer, count: int) -> list[Position]:
        seen: list[Position] = []
        deadline = time.monotonic() + WAIT_S
        while len(seen) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500, max_records=count - len(seen)).values():
                seen.extend((r.partition, r.offset) for r in records)
        return seen

    first = KafkaConsumer(topic, **settings)
    try:
        first_seen = consume(first, RECORDS // 2)
        assert len(first_seen) == RECORDS // 2
        first.commit()
        positions = next_offsets(first_seen)
        assert from_zero({p: first.committed(KTP(topic, p)) for p in range(partitions)}, partitions) == \
            from_zero(positions, partitions)
    finally:
        first.close(autocommit=False)
    assert from_zero(committed_offsets(boot, group, topic, partitions), partitions) == from_zero(positions, partitions)

    second = KafkaConsumer(topic, **settings)
    try:
        second_seen = consume(second, len(acked) - len(first_seen))
        second.commit()
    finally:
        second.close(autocommit=False)
    assert not set(first_seen) & set(second_seen)
    assert set(first_seen) | set(second_seen) == acked
    assert committed_offsets(boot, group, topic, partitions) == ends_of(acked)


def test_aiokafka_consumer_commits_and_a_second_resumes(cluster_factory):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("aiokafka"), unique("group-aiokafka"), 3
    create_topic(boot, topic, partitions)
    acked = produce(boot, topic)

    async def consume(count: int) -> tuple[list[Position], dict[int, int | None]]:
        consumer = AIOKafkaConsumer(topic, group_id=group, bootstrap_servers=boot, auto_offset_reset="earliest",
                                    enable_auto_commit=False, session_timeout_ms=10_000, heartbeat_interval_ms=500)
        await consumer.start()
        try:
            seen: list[Position] = []
            deadline = time.monotonic() + WAIT_S
            while len(seen) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=count - len(seen))
                seen.extend((r.partition, r.offset) for records in batches.values() for r in records)
            await consumer.commit()
            committed = {p: await consumer.committed(ATP(topic, p)) for p in range(partitions)}
            return seen, committed
        finally:
            await consumer.stop()

    first_seen, committed = asyncio.run(consume(RECORDS // 2))
    assert len(first_seen) == RECORDS // 2
    positions = next_offsets(first_seen)
    assert from_zero(committed, partitions) == from_zero(positions, partitions)
    second_seen, committed = asyncio.run(consume(len(acked) - len(first_seen)))
    assert not set(first_seen) & set(second_seen)
    assert set(first_seen) | set(second_seen) == acked
    assert committed == ends_of(acked)
    assert committed_offsets(boot, group, topic, partitions) == ends_of(acked)


# ---------------------------------------------------------------------------- coordinator failover


def test_group_survives_its_coordinator_killed(cluster_factory):
    """kill -9 of the coordinator: another broker leads the group's offsets partition, loads
    the commits and the group, and the members go on where they were (nothing read twice)."""
    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("failover"), unique("group-failover"), 4
    create_topic(boot, topic, partitions)
    members = [Member(boot, group, f"member-{i}", **{"partition.assignment.strategy": "range"}) for i in range(2)]
    try:
        for m in members:
            m.subscribe(topic)
        wait_balanced(members, partitions)
        first = produce(boot, topic, RECORDS // 2)
        consume_all(members, first)
        for m in members:
            assert all(tp.error is None for tp in m.consumer.commit(asynchronous=False))
        coordinator = describe_group(boot, group).coordinator.id
        c.kill(coordinator)
        survivors = ",".join(f"{b['host']}:{b['port']}" for b in c.status()["brokers"] if b["id"] != coordinator)

        want = ends_of(first)
        wait_until(lambda: committed_offsets(survivors, group, topic, partitions) == want, WAIT_S,
                   "the commits read back from the new coordinator")
        assert describe_group(survivors, group).coordinator.id != coordinator

        second = produce(survivors, topic, RECORDS // 2)
        consume_all(members, first | second)
        consumed = [pos for m in members for pos in m.consumed]
        assert len(consumed) == len(set(consumed)), "a record was consumed twice"
        assert set(consumed) == first | second
        for m in members:
            assert all(tp.error is None for tp in m.consumer.commit(asynchronous=False))
        assert committed_offsets(survivors, group, topic, partitions) == ends_of(first | second)
    finally:
        close_all(members)


# ---------------------------------------------------------------------------- three clients, one group


AIOKAFKA_MEMBER = r"""
import asyncio, json, sys
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

def say(**event):
    print(json.dumps(event), flush=True)

class Listener(ConsumerRebalanceListener):
    async def on_partitions_revoked(self, revoked):
        say(event="revoked", partitions=sorted(tp.partition for tp in revoked))

    async def on_partitions_assigned(self, assigned):
        say(event="assigned", partitions=sorted(tp.partition for tp in assigned))

async def main(boot, group, topic, instance):
    consumer = AIOKafkaConsumer(
        bootstrap_servers=boot, group_id=group, group_instance_id=instance or None, client_id="aiokafka-member",
        auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10_000, heartbeat_interval_ms=500,
        partition_assignment_strategy=(RoundRobinPartitionAssignor,))
    await consumer.start()
    commands = asyncio.Queue()
    asyncio.get_running_loop().add_reader(sys.stdin.fileno(), lambda: commands.put_nowait(sys.stdin.readline().strip()))
    try:
        consumer.subscribe([topic], listener=Listener())
        while True:
            batches = await consumer.getmany(timeout_ms=100)
            positions = [[r.partition, r.offset] for records in batches.values() for r in records]
            if positions:
                say(event="records", positions=positions)
            while not commands.empty():
                command = commands.get_nowait()
                if command == "commit":
                    await consumer.commit()
                    say(event="committed")
                else:  # "close", or stdin closed
                    return
    finally:
        await consumer.stop()  # a static member does not leave the group

asyncio.run(main(*sys.argv[1:]))
"""


class AioMember:
    """An aiokafka group member in its own process (a real application's shape; in the
    test's process its threads and kafka-python's would compete for one GIL): it reports
    rebalance callbacks and records as JSON lines, and commits or closes on command."""

    def __init__(self, boot: str, group: str, topic: str, group_instance_id: str = "") -> None:
        import sys

        self.events: list[tuple[str, frozenset[int]]] = []  # ("assigned" | "revoked", partitions); aiokafka is eager
        self.consumed: list[Position] = []
        self.committed = threading.Event()
        self.process = subprocess.Popen([sys.executable, "-c", AIOKAFKA_MEMBER, boot, group, topic, group_instance_id],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, name="aiokafka-member-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            event = json.loads(line)
            if event["event"] == "records":
                self.consumed.extend((p, o) for p, o in event["positions"])
            elif event["event"] == "committed":
                self.committed.set()
            else:
                self.events.append((event["event"], frozenset(event["partitions"])))

    @property
    def assigned(self) -> frozenset[int]:
        """The eager protocol revokes everything, then assigns everything anew."""
        events = list(self.events)
        return events[-1][1] if events and events[-1][0] == "assigned" else frozenset()

    def revocations(self) -> int:
        """Revocations of something (aiokafka also calls it with nothing before its first join)."""
        return sum(1 for kind, partitions in self.events if kind == "revoked" and partitions)

    def check_alive(self) -> None:
        assert self.process.poll() is None, f"the aiokafka member exited {self.process.returncode}"

    def commit(self) -> None:
        self.process.stdin.write("commit\n")
        self.process.stdin.flush()

    def close(self) -> None:
        """Close the consumer (static: without leaving) and wait for the process to exit."""
        if self.process.poll() is None:
            try:
                self.process.stdin.write("close\n")
                self.process.stdin.flush()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(timeout=10)
        self.process.stdin.close()
        self.reader.join(timeout=10)
        self.process.stdout.close()


def test_confluent_kafka_python_and_aiokafka_share_one_group(cluster_factory):
    """Three client libraries in one group: the coordinator picks the assignor all of them
    name (roundrobin), whichever leads assigns for all, and each record is read once."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.consumer.subscription_state import ConsumerRebalanceListener as KListener

    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("mixed"), unique("group-mixed"), 6
    create_topic(boot, topic, partitions)
    confluent = Member(boot, group, "confluent-member", **{"partition.assignment.strategy": "range,roundrobin"})
    kafka_python = KafkaConsumer(group_id=group, bootstrap_servers=boot, client_id="kafka-python-member",
                                 auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10_000,
                                 heartbeat_interval_ms=500)
    kafka_python_seen: list[Position] = []
    kafka_python_revocations = [0]

    class Revocations(KListener):
        def on_partitions_revoked(self, revoked) -> None:
            kafka_python_revocations[0] += 1

        def on_partitions_assigned(self, assigned) -> None:
            pass

    aio = AioMember(boot, group, topic)
    try:
        confluent.subscribe(topic)
        kafka_python.subscribe([topic], listener=Revocations())

        def poll_sync_members() -> None:
            confluent.poll()
            for records in kafka_python.poll(timeout_ms=50).values():
                kafka_python_seen.extend((r.partition, r.offset) for r in records)
            aio.check_alive()

        def assignments() -> list[frozenset[int]]:
            return [confluent.assigned(), frozenset(tp.partition for tp in kafka_python.assignment()), aio.assigned]

        def settled() -> bool:
            poll_sync_members()
            sets = assignments()
            return all(len(s) == 2 for s in sets) and len(frozenset().union(*sets)) == partitions
        wait_until(settled, WAIT_S, "three clients sharing six partitions", interval_s=0)
        settled_assignments = assignments()
        before = (len(confluent.events), kafka_python_revocations[0], aio.revocations())
        assert describe_group(boot, group).partition_assignor == "roundrobin"

        acked = produce(boot, topic)
        deadline = time.monotonic() + WAIT_S
        while len(confluent.consumed) + len(kafka_python_seen) + len(aio.consumed) < len(acked) and time.monotonic() < deadline:
            poll_sync_members()
        for _ in range(20):
            poll_sync_members()

        consumed = confluent.consumed + kafka_python_seen + list(aio.consumed)
        assert len(consumed) == len(set(consumed)), "a record was consumed twice"
        assert set(consumed) == acked
        assert (len(confluent.events), kafka_python_revocations[0], aio.revocations()) == before, "a rebalance in steady state"
        assert assignments() == settled_assignments

        assert all(tp.error is None for tp in confluent.consumer.commit(asynchronous=False))
        kafka_python.commit()
        aio.commit()
        wait_until(lambda: (poll_sync_members(), aio.committed.is_set())[1], WAIT_S, "aiokafka's commit")
        assert {p: kafka_python.committed(KTP(topic, p)) for p in settled_assignments[1]} == \
            {p: ends_of(acked)[p] for p in settled_assignments[1]}
        assert committed_offsets(boot, group, topic, partitions) == ends_of(acked)
    finally:
        aio.close()
        kafka_python.close(autocommit=False)
        confluent.close()


# ---------------------------------------------------------------------------- group admin


def test_group_admin_of_confluent_and_kafka_python_admin_clients(cluster_factory):
    """ListGroups, DescribeGroups, OffsetFetch, OffsetCommit of an admin, OffsetDelete,
    LeaveGroup by group.instance.id (KIP-345's removal of a static member) and DeleteGroups,
    as the two admin clients call them, around a static member that closed without leaving."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient, MemberToRemove
    from kafka.errors import NoError

    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("admin"), unique("group-admin"), 3
    create_topic(boot, topic, partitions)
    acked = produce(boot, topic, 300)
    ends = ends_of(acked)
    admin = AdminClient({"bootstrap.servers": boot})
    kadmin = KafkaAdminClient(bootstrap_servers=boot)
    member = Member(boot, group, "admin-member", **{"group.instance.id": "admin-static", **STATIC})
    try:
        member.subscribe(topic)
        consume_all([member], acked)
        assert set(member.consumed) == acked
        offsets = [TopicPartition(topic, p, ends[p], metadata=f"meta-{p}") for p in range(partitions)]
        assert all(tp.error is None for tp in member.consumer.commit(offsets=offsets, asynchronous=False))

        listed = admin.list_consumer_groups().result(timeout=10)
        assert group in {g.group_id for g in listed.valid}, listed.valid
        assert {"group_id": group, "protocol_type": "consumer"} in kadmin.list_groups()
        kdescribed = kadmin.describe_groups([group])[group]
        assert (kdescribed["group_state"], kdescribed["protocol_data"]) == ("Stable", "range")
        assert kdescribed["members"][0]["member_assignment"]["assigned_partitions"] == \
            [{"topic": topic, "partitions": list(range(partitions))}]
        described = describe_group(boot, group)
        assert str(described.state).endswith("STABLE")
        assert described.partition_assignor == "range"
        [only] = described.members
        assert (only.group_instance_id, only.client_id) == ("admin-static", "admin-member")
        assert {tp.partition for tp in only.assignment.topic_partitions} == set(range(partitions))

        def fetched() -> dict[int, tuple[int, str]]:
            request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]
            result = admin.list_consumer_group_offsets(request)[group].result(timeout=10)
            return {tp.partition: (tp.offset, tp.metadata) for tp in result.topic_partitions}
        assert fetched() == {p: (ends[p], f"meta-{p}") for p in range(partitions)}

        # The group has a member: an admin's commit (no generation) and OffsetDelete of a
        # subscribed topic are refused.
        alter = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 5)])]
        refused = admin.alter_consumer_group_offsets(alter)[group].result(timeout=10)
        assert [tp.error.code() for tp in refused.topic_partitions] == [KafkaError.UNKNOWN_MEMBER_ID]
        refused = kadmin.delete_group_offsets(group, [KTP(topic, 0)])
        assert [e.__name__ for e in refused.values()] == ["GroupSubscribedToTopicError"], refused

        # Closed without leaving: still a member until its session ends, or until an admin
        # removes it by its group.instance.id.
        member.close()
        assert len(describe_group(boot, group).members) == 1
        removed = kadmin.remove_group_members(group, [MemberToRemove(group_instance_id="admin-static")])
        assert list(removed.values()) == [NoError], removed
        described = describe_group(boot, group)
        assert str(described.state).endswith("EMPTY") and described.members == [], described

        done = admin.alter_consumer_group_offsets(alter)[group].result(timeout=10)
        assert [(tp.partition, tp.offset, tp.error) for tp in done.topic_partitions] == [(0, 5, None)]
        deleted = kadmin.delete_group_offsets(group, [KTP(topic, 1)])
        assert list(deleted.values()) == [NoError], deleted
        assert fetched() == {0: (5, None), 1: (OFFSET_INVALID, None), 2: (ends[2], "meta-2")}  # librdkafka: "" is None

        admin.delete_consumer_groups([group])[group].result(timeout=10)
        assert fetched() == {p: (OFFSET_INVALID, None) for p in range(partitions)}
        assert group not in {g.group_id for g in admin.list_consumer_groups().result(timeout=10).valid}
    finally:
        member.close()
        kadmin.close()


# ---------------------------------------------------------------------------- a member killed


KILLED_MEMBER = r"""
import sys, time
from confluent_kafka import Consumer
boot, group, topic, count, session_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
consumer = Consumer({"bootstrap.servers": boot, "group.id": group, "client.id": "doomed", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": session_ms, "heartbeat.interval.ms": 500,
                     "partition.assignment.strategy": "range"})
consumer.subscribe([topic])
seen = []
deadline = time.monotonic() + 60
while len(seen) < count and time.monotonic() < deadline:
    seen.extend(m for m in consumer.consume(count - len(seen), 0.5) if m.error() is None)
consumer.pause(consumer.assignment())
consumer.commit(asynchronous=False)
print(" ".join(f"{m.partition()}:{m.offset()}" for m in seen), flush=True)
while True:  # a member that heartbeats until it is killed
    consumer.poll(0.2)
"""


def test_killed_member_is_replaced_after_its_session_and_its_commits_are_resumed(cluster_factory):
    """kill -9 of a member that committed: no LeaveGroup, so the group waits out its
    session timeout, then the survivor owns every partition and resumes at the commits."""
    import sys

    session_ms = 4000
    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("killed"), unique("group-killed"), 4
    create_topic(boot, topic, partitions)
    acked = produce(boot, topic)
    doomed = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, boot, group, topic, str(RECORDS // 3), str(session_ms)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    survivor = None
    try:
        line = doomed.stdout.readline()
        assert line, f"the doomed member exited {doomed.poll()} without reporting"
        doomed_seen = {tuple(int(x) for x in pos.split(":")) for pos in line.split()}
        assert len(doomed_seen) == RECORDS // 3

        survivor = Member(boot, group, "survivor", **{"partition.assignment.strategy": "range", "session.timeout.ms": session_ms})
        survivor.subscribe(topic)

        def sharing() -> bool:
            survivor.poll()
            return len(survivor.assigned()) == partitions // 2
        wait_until(sharing, WAIT_S, "the survivor to share the partitions", interval_s=0)
        doomed.kill()
        doomed.wait(timeout=10)
        killed_at = time.monotonic()

        def owns_all() -> bool:
            survivor.poll()
            return survivor.assigned() == frozenset(range(partitions))
        wait_until(owns_all, WAIT_S, "the survivor to own every partition", interval_s=0)
        assert time.monotonic() - killed_at >= session_ms / 1000 - 1.5, "removed before its session timeout"
        assert survivor.events[-1] == ("assign", frozenset(range(partitions)))
        # It committed nothing itself: from this assignment on, it reads its own partitions
        # again from the start, and the killed member's from where that one committed.
        mark = survivor.consumed_before_event[-1]
        deadline = time.monotonic() + WAIT_S
        while len(survivor.consumed) - mark < len(acked - doomed_seen) and time.monotonic() < deadline:
            survivor.poll()
        poll_all([survivor], rounds=20)
        resumed = survivor.consumed[mark:]
        assert not set(resumed) & doomed_seen, "the survivor read records the killed member committed"
        assert set(resumed) | doomed_seen == acked
        assert len(resumed) == len(set(resumed))
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(timeout=10)
        doomed.stdout.close()
        if survivor is not None:
            survivor.close()


def test_kafka_python_and_aiokafka_static_members_restart_without_rebalance(cluster_factory):
    """KIP-345 with the Python clients: neither sends LeaveGroup when a static member
    closes; each restarts with its group.instance.id and gets its partitions back, and the
    other member is never revoked."""
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener as KListener
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as KRoundRobin

    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    topic, group, partitions = unique("static-py"), unique("group-static-py"), 4
    create_topic(boot, topic, partitions)
    calls = {"revoked": 0, "assigned": 0}

    class Counting(KListener):
        def on_partitions_revoked(self, revoked) -> None:
            calls["revoked"] += 1

        def on_partitions_assigned(self, assigned) -> None:
            calls["assigned"] += 1

    def kafka_python_member() -> KafkaConsumer:
        consumer = KafkaConsumer(group_id=group, bootstrap_servers=boot, group_instance_id="kafka-python-static",
                                 auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10_000,
                                 heartbeat_interval_ms=500, partition_assignment_strategy=(KRoundRobin,))
        consumer.subscribe([topic], listener=Counting())
        return consumer

    kafka_python = kafka_python_member()
    aio = AioMember(boot, group, topic, group_instance_id="aiokafka-static")
    try:
        def kafka_python_assigned() -> frozenset[int]:
            kafka_python.poll(timeout_ms=100)
            aio.check_alive()
            return frozenset(tp.partition for tp in kafka_python.assignment())

        def settled() -> bool:
            mine = kafka_python_assigned()
            return len(mine) == 2 and len(aio.assigned) == 2 and mine | aio.assigned == frozenset(range(partitions))
        wait_until(settled, WAIT_S, "two static members sharing four partitions", interval_s=0)
        before = {"kafka-python": kafka_python_assigned(), "aiokafka": aio.assigned}

        # kafka-python's member restarts; aiokafka's must see nothing.
        aio_events = len(aio.events)
        kafka_python.close(autocommit=False)
        kafka_python = kafka_python_member()
        wait_until(lambda: kafka_python_assigned() == before["kafka-python"], WAIT_S, "kafka-python's member back")
        end = time.monotonic() + 3  # several heartbeat intervals: a rebalance would reach aiokafka's member
        while time.monotonic() < end:
            kafka_python_assigned()
        assert aio.events[aio_events:] == [], "aiokafka's member saw a rebalance"
        assert aio.assigned == before["aiokafka"]

        # aiokafka's member restarts; kafka-python's must see nothing.
        aio.close()
        assert aio.process.returncode == 0
        kafka_python_calls = dict(calls)
        aio = AioMember(boot, group, topic, group_instance_id="aiokafka-static")
        wait_until(lambda: (kafka_python_assigned(), aio.assigned == before["aiokafka"])[1], WAIT_S, "aiokafka's member back")
        end = time.monotonic() + 3
        while time.monotonic() < end:
            assert kafka_python_assigned() == before["kafka-python"]
        assert calls == kafka_python_calls, "kafka-python's member saw a rebalance"
        assert aio.revocations() == 0
        assert [e for e in aio.events if e[0] == "assigned"] == [("assigned", before["aiokafka"])]
    finally:
        aio.close()
        kafka_python.close(autocommit=False)
