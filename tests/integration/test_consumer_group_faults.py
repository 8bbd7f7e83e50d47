"""Consumer groups under failure and bad input, on real brokers (issue 10): three brokers on
a real ZooKeeper, confluent-kafka (librdkafka) consumers, raw Kafka requests.

- three consumers of a 6-partition topic get two partitions each;
- a member killed with SIGKILL: its partitions move to the others within its session
  timeout plus a rebalance; every record is consumed; the only records read twice are those
  the killed member read after its last acknowledged commit of their partition;
- the coordinator killed with kill -9, in a stable group and in the middle of a rebalance,
  its offsets topic compacted as it goes: the group goes on on the new leader of its offsets
  partition (in a stable group, with the same members and partitions); the new
  coordinator's first answer has every OffsetCommit acknowledged before the kill, and the
  committed offsets at the end every one acknowledged at all; a consumer joining later
  starts at the committed offsets; the killed broker comes back, becomes the coordinator
  again, and the group still works;
- bad group requests (unknown member, wrong generation, member id required, oversized
  metadata, another protocol, a full group, the wrong broker, a negative rebalance timeout,
  an int64 retention, the longest client id, an assignment too big to store) get Kafka's
  error codes, and the coordinator goes on serving a well-behaved consumer in that group.

Consumers that are killed run as processes (kafkalite.testing.group_member), which journal
every record they processed and every commit they attempted and had acknowledged.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.core.group_messages import partition_for
from kafkalite.protocol.codec import decode_response, encode_request
from kafkalite.protocol.schema import ApiKey
from kafkalite.testing.cluster import pid_alive
from kafkalite.testing.probes import broker_state, partition_view, wait_until

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 6
PARTITIONS = 6
SESSION_TIMEOUT_MS = 3000
GROUP_OVERRIDES = {
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
}
# What a rebalance may take on a loaded 2-core machine, after the session timeout.
REBALANCE_S = 20.0
# A coordinator killed: ZooKeeper's session (3 s in tests), a new leader, a load, clients
# finding it again.
FAILOVER_S = 45.0
# Members outlive a coordinator failover (librdkafka drops its member id when the session
# timeout passes without an answer from a coordinator).
FAILOVER_SESSION_TIMEOUT_MS = 15_000


# ------------------------------------------------------------------ helpers: topics, records


def create_topic(boot: str, topic: str, partitions: int = PARTITIONS, replication_factor: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)]).values():
        future.result(timeout=30)


def produce(boot: str, topic: str, per_partition: int, partitions: int = PARTITIONS, tag: str = "") -> dict[int, list[int]]:
    """acks=all records, `per_partition` in each partition; the offsets acknowledged."""
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000})
    acked: dict[int, list[int]] = defaultdict(list)
    errors: list[object] = []

    def done(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.partition()].append(msg.offset())

    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, value=f"{tag}{p}-{i}".encode(), partition=p, on_delivery=done)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == [], errors[:3]
    return dict(acked)


def high_watermarks(boot: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "hw-probe", "enable.auto.commit": False})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def committed(boot: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch through librdkafka), -1001 for none."""
    consumer = Consumer({"bootstrap.servers": boot, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def coordinator_of(cluster, group: str) -> int:
    """The coordinator: the leader of the group's offsets partition, as the cluster sees it."""
    def leader() -> int | None:
        view = partition_view(cluster, OFFSETS_TOPIC, partition_for(group, OFFSETS_PARTITIONS))
        return view["leader"] if view is not None and view["leader"] >= 0 else None
    return wait_until(leader, 30, f"a leader of the offsets partition of {group}")


def broker_port(cluster, broker_id: int) -> int:
    return cluster.broker(broker_id)["port"]


# ------------------------------------------------------------------ helpers: raw requests


class Wire:
    """One connection to one broker speaking our own codec; requests may be left parked
    (`send`) and their answers read later (`receive`), in order."""

    def __init__(self, port: int, client_id: str = "raw", timeout_s: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.client_id = client_id
        self.cid = 0
        self.sent: list[tuple[int, int, int]] = []  # (correlation id, api key, version) awaiting answers
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, api: ApiKey, version: int, body: dict) -> None:
        self.cid += 1
        self.sock.sendall(encode_request(api, version, self.cid, self.client_id, body))
        self.sent.append((self.cid, api, version))

    def receive(self) -> dict:
        cid, api, version = self.sent.pop(0)
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">i", self.buf[:4])
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    got_cid, body = decode_response(api, version, frame)
                    assert got_cid == cid
                    return body
            chunk = self.sock.recv(65536)
            assert chunk, "the broker closed the connection"
            self.buf += chunk

    def call(self, api: ApiKey, version: int, body: dict) -> dict:
        self.send(api, version, body)
        return self.receive()


def group_state(port: int, group: str) -> str:
    wire = Wire(port, timeout_s=5)
    try:
        (described,) = wire.call(ApiKey.DESCRIBE_GROUPS, 0, {"groups": [group]})["groups"]
        return described["group_state"] if described["error_code"] == 0 else f"error {described['error_code']}"
    finally:
        wire.close()


# ------------------------------------------------------------------ helpers: member processes


@dataclass
class Journal:
    """What one group_member process wrote (see its docstring for the line format)."""

    reads: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset)
    attempts: list[tuple[float, int, int]] = field(default_factory=list)  # (ts, partition, offset)
    acked: list[tuple[float, int, int]] = field(default_factory=list)
    failed: list[tuple[float, int, int, str]] = field(default_factory=list)
    assigned: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    revoked: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    closed: bool = False

    @classmethod
    def read(cls, path: Path) -> Journal:
        j = cls()
        if not path.exists():
            return j
        lines = path.read_text().split("\n")[:-1]  # the last one, without its newline, is still being written
        for line in lines:
            f = line.split()
            kind = f[0]
            if kind == "R":
                j.reads.append((int(f[2]), int(f[3])))
            elif kind in ("T", "C"):
                (j.attempts if kind == "T" else j.acked).append((float(f[1]), int(f[2]), int(f[3])))
            elif kind == "F":
                j.failed.append((float(f[1]), int(f[2]), int(f[3]), f[4]))
            elif kind in ("A", "V"):
                parts = () if f[2] == "-" else tuple(int(x) for x in f[2].split(","))
                (j.assigned if kind == "A" else j.revoked).append((float(f[1]), parts))
            elif kind == "X":
                j.closed = True
        return j

    def assignment(self) -> tuple[int, ...]:
        """What it holds now: the last assignment, unless revoked since."""
        if not self.assigned:
            return ()
        ts, parts = self.assigned[-1]
        if self.revoked and self.revoked[-1][0] >= ts:
            return ()
        return parts

    def last_acked(self, partition: int) -> int | None:
        offsets = [o for _, p, o in self.acked if p == partition]
        return offsets[-1] if offsets else None


class Members:
    """group_member processes of one test; every one is killed at the end, pass or fail."""

    def __init__(self, tmp: Path, boot: str, group: str, topic: str) -> None:
        self.tmp, self.boot, self.group, self.topic = tmp, boot, group, topic
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, commit_every: int = 25, session_timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        log = open(self.tmp / f"{name}.stderr", "ab")
        try:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "kafkalite.testing.group_member", self.boot, self.group, self.topic,
                 str(self.journal_path(name)), "--commit-every", str(commit_every), "--session-timeout-ms",
                 str(session_timeout_ms), "--client-id", name],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def journal_path(self, name: str) -> Path:
        return self.tmp / f"{name}.journal"

    def journal(self, name: str) -> Journal:
        return Journal.read(self.journal_path(name))

    def journals(self) -> dict[str, Journal]:
        return {name: self.journal(name) for name in self.procs}

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self, name: str, timeout_s: float = 30) -> None:
        """SIGTERM: it closes its consumer (committing what it processed) and exits."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout_s)
        assert proc.returncode == 0, f"member {name} exited with {proc.returncode}: {self.stderr(name)}"
        assert self.journal(name).closed, f"member {name} did not close its consumer"

    def stderr(self, name: str) -> str:
        path = self.tmp / f"{name}.stderr"
        return path.read_text()[-2000:] if path.exists() else ""

    def assignments(self, names: list[str]) -> dict[str, tuple[int, ...]]:
        return {n: self.journal(n).assignment() for n in names}

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)


def balanced(assignments: dict[str, tuple[int, ...]], per_member: int) -> bool:
    """Every member holds `per_member` partitions and together they hold all, once each."""
    every = [p for parts in assignments.values() for p in parts]
    return all(len(parts) == per_member for parts in assignments.values()) and sorted(every) == list(range(PARTITIONS))


def reads_by_partition(journals: dict[str, Journal]) -> dict[int, dict[int, list[str]]]:
    """partition -> offset -> the members that processed it."""
    out: dict[int, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, j in journals.items():
        for p, o in j.reads:
            out[p][o].append(name)
    return out


def all_consumed(members: Members, hw: dict[int, int]) -> bool:
    reads = reads_by_partition(members.journals())
    return all(set(reads[p]) >= set(range(n)) for p, n in hw.items())


def check_acked_commits_kept(journals: dict[str, Journal], final: dict[int, int]) -> None:
    """Every acknowledged commit is there: the committed offset is at least each acked one,
    and equals the last one attempted when that attempt was acknowledged (a failed attempt
    may still have been written)."""
    attempts: dict[int, list[tuple[float, int, bool]]] = defaultdict(list)
    for j in journals.values():
        acked = {(p, o) for _, p, o in j.acked}
        for ts, p, o in j.attempts:
            attempts[p].append((ts, o, (p, o) in acked))
        for _, p, o in j.acked:
            assert final[p] >= o, f"partition {p}: committed {final[p]}, but a commit of {o} was acknowledged"
    for p, tried in attempts.items():
        ts, offset, was_acked = max(tried)
        if was_acked:
            assert final[p] == offset, f"partition {p}: committed {final[p]}, the last commit (acknowledged) was {offset}"


# ------------------------------------------------------------------ 1. balance


def test_three_consumers_of_six_partitions_get_two_each(cluster_factory):
    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    create_topic(boot, "balanced")
    consumers = [Consumer({"bootstrap.servers": boot, "group.id": "balance", "session.timeout.ms": SESSION_TIMEOUT_MS,
                           "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range", "client.id": f"c{i}"})
                 for i in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe(["balanced"])

        def settled() -> bool:
            for consumer in consumers:
                consumer.poll(0.1)
            assignments = {str(i): tuple(tp.partition for tp in cons.assignment()) for i, cons in enumerate(consumers)}
            return balanced(assignments, 2)

        wait_until(settled, 60, "three consumers with two partitions each", interval_s=0)
        admin = AdminClient({"bootstrap.servers": boot})
        (described,) = admin.describe_consumer_groups(["balance"]).values()
        group = described.result(timeout=30)
        assert group.state.name == "STABLE"
        assert len(group.members) == 3
        assert sorted(tp.partition for m in group.members for tp in m.assignment.topic_partitions) == list(range(PARTITIONS))
    finally:
        for consumer in consumers:
            consumer.close()


# ------------------------------------------------------------------ 2. a member killed


def test_member_killed_its_partitions_move_and_only_its_uncommitted_records_are_read_twice(cluster_factory, tmp_path):
    c = cluster_factory(3, overrides=GROUP_OVERRIDES)
    boot = c.status()["bootstrap"]
    create_topic(boot, "work")
    members = Members(tmp_path, boot, "workers", "work")
    names = ["m1", "m2", "m3"]
    try:
        for name in names:
            members.start(name, commit_every=37)  # not a divisor of what each reads: a tail stays uncommitted
        wait_until(lambda: balanced(members.assignments(names), 2), 60, "three members with two partitions each")
        produce(boot, "work", 300)
        victim = "m2"
        wait_until(lambda: len(members.journal(victim).acked) >= 2 and len(members.journal(victim).reads) >= 300, 60,
                   f"{victim} to read and commit")
        victim_parts = members.journal(victim).assignment()
        members.kill(victim)
        killed_at = time.monotonic()
        survivors = [n for n in names if n != victim]
        produce(boot, "work", 300, tag="after-")
        wait_until(lambda: balanced(members.assignments(survivors), 3), SESSION_TIMEOUT_MS / 1000 + REBALANCE_S,
                   f"{victim}'s partitions {victim_parts} to move to {survivors}")
        moved_s = time.monotonic() - killed_at
        hw = high_watermarks(boot, "work")
        assert hw == dict.fromkeys(range(PARTITIONS), 600)
        wait_until(lambda: all_consumed(members, hw), 60, "every record to be consumed")

        journals = members.journals()
        reads = reads_by_partition(journals)
        victim_journal = journals[victim]
        for p, by_offset in reads.items():
            for offset, readers in by_offset.items():
                if len(readers) == 1:
                    continue
                # Read twice: only the killed member's records after its last acknowledged
                # commit of the partition, read again by the member that took it over.
                last = victim_journal.last_acked(p)
                assert len(readers) == 2 and readers.count(victim) == 1, f"partition {p} offset {offset} read by {readers}"
                assert last is None or offset >= last, f"partition {p} offset {offset} read again, but {victim} committed {last}"
        duplicates = sum(len(r) - 1 for by_offset in reads.values() for r in by_offset.values())
        print(f"partitions moved {moved_s:.1f} s after the kill; {duplicates} records read twice")
        for name in survivors:
            members.stop(name)
        final = committed(boot, "workers", "work")
        assert final == hw, f"committed {final}, end {hw}"
        check_acked_commits_kept(members.journals(), final)
    finally:
        members.kill_all()


# ------------------------------------------------------------------ 3. the coordinator killed


class BackgroundProducer:
    """Keeps writing one record per partition every `interval_s` (acks=all) until stopped,
    so that members keep reading and committing across a failure."""

    def __init__(self, boot: str, topic: str, interval_s: float = 0.05) -> None:
        self.producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000})
        self.topic, self.interval_s = topic, interval_s
        self.errors: list[object] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="background-producer", daemon=True)
        self._thread.start()

    def _done(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                self.producer.produce(self.topic, value=b"bg-%d" % i, partition=p, on_delivery=self._done)
            i += 1
            self.producer.poll(self.interval_s)

    def stop(self) -> None:
        """Stop writing; every record written is acknowledged."""
        self.halt()
        assert self.producer.flush(120) == 0
        assert self.errors == [], self.errors[:3]

    def halt(self) -> None:
        self._stop.set()
        self._thread.join(10)


def consume_in_group(boot: str, group: str, topic: str, end: dict[int, int], timeout_s: float = 60) -> dict[int, int]:
    """Join the group, read every partition up to `end` (each must have records to read
    from its committed offset), commit, leave. Returns the first offset read per partition."""
    consumer = Consumer({"bootstrap.servers": boot, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 500})
    first: dict[int, int] = {}
    position: dict[int, int] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                first.setdefault(msg.partition(), msg.offset())
                position[msg.partition()] = msg.offset() + 1
                assert position[msg.partition()] <= end[msg.partition()], f"read past {end}: {msg.partition()}@{msg.offset()}"
            if position == end:
                consumer.commit(asynchronous=False)
                return first
        raise AssertionError(f"{group}: read {position} of {end} in {timeout_s} s")
    finally:
        consumer.close()


def fetch_offsets(port: int, group: str, topic: str) -> dict[int, int] | None:
    """OffsetFetch of every partition at one broker; None unless it answers without error."""
    wire = Wire(port, timeout_s=5)
    try:
        body = wire.call(ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(range(PARTITIONS))}]})
    finally:
        wire.close()
    if body["error_code"] != 0:
        return None
    return {r["partition_index"]: r["committed_offset"] for t in body["topics"] for r in t["partitions"]}


def wait_state(port: int, group: str, states: set[str], timeout_s: float) -> str:
    return wait_until(lambda: (s := group_state(port, group)) in states and s, timeout_s, f"{group} in {states}", interval_s=0.01)


# The offsets topic in small segments, compacted as the test goes: the new coordinator loads
# a log the cleaner has rewritten (and keeps rewriting while it loads).
COMPACTING_OVERRIDES = {**GROUP_OVERRIDES, "offsets.topic.segment.bytes": 8192, "log.cleaner.backoff.ms": 200,
                        "log.cleaner.min.cleanable.ratio": 0.1, "log.cleaner.dedupe.buffer.size": 16 << 20}


def check_first_answer(c, broker_id: int, group: str, topic: str, members: Members, before: float) -> None:
    """The first answer of a new coordinator already has every commit acknowledged before
    `before` (members commit again soon after, which could hide a loss)."""
    first = wait_until(lambda: fetch_offsets(broker_port(c, broker_id), group, topic), FAILOVER_S,
                       f"broker {broker_id} to load {group}", interval_s=0.01)
    for name, j in members.journals().items():
        for ts, p, o in j.acked:
            if ts < before:
                assert first[p] >= o, f"partition {p}: {name}'s commit of {o} was acknowledged, broker {broker_id} has {first[p]}"


def wait_going_on(members: Members, names: list[str], per_member: int, since: float, what: str) -> None:
    """Every member holds its share of partitions and has had a commit acknowledged since."""
    def going_on() -> bool:
        journals = {n: members.journal(n) for n in names}
        return balanced({n: j.assignment() for n, j in journals.items()}, per_member) and \
            all(any(ts > since for ts, _, _ in j.acked) for j in journals.values())
    wait_until(going_on, FAILOVER_S, f"{what} (members {names} assigned and committing)")


def run_coordinator_failure(c, tmp_path, during_rebalance: bool) -> None:
    """Members read and commit all along, under a producer that keeps writing, while the
    coordinator is killed, restarted, and made the coordinator again."""
    boot = c.status()["bootstrap"]
    group, topic = "g-orders", "orders"
    create_topic(boot, topic)
    members = Members(tmp_path, boot, group, topic)
    names = ["m1", "m2"]
    producer = None
    try:
        for name in names:
            members.start(name, commit_every=20, session_timeout_ms=FAILOVER_SESSION_TIMEOUT_MS)
        wait_until(lambda: balanced(members.assignments(names), 3), 60, "two members with three partitions each")
        producer = BackgroundProducer(boot, topic)
        wait_until(lambda: all(len(members.journal(n).acked) >= 6 for n in names), 60, "both members to commit")
        coordinator = coordinator_of(c, group)
        if during_rebalance:
            names.append("m3")
            members.start("m3", commit_every=20, session_timeout_ms=FAILOVER_SESSION_TIMEOUT_MS)
            seen = wait_state(broker_port(c, coordinator), group, {"PreparingRebalance", "CompletingRebalance"}, 30)
            print(f"killing coordinator {coordinator} while {group} is {seen}")
        c.kill(coordinator)
        killed_at = time.time()
        new = wait_until(lambda: (b := coordinator_of(c, group)) != coordinator and b, FAILOVER_S, "a new coordinator")
        check_first_answer(c, new, group, topic, members, killed_at)
        per_member = 2 if during_rebalance else 3
        wait_going_on(members, names, per_member, killed_at, f"{group} to go on at broker {new}")
        print(f"{group} recovered on broker {new} {time.time() - killed_at:.1f} s after broker {coordinator} was killed")
        assert group_state(broker_port(c, new), group) == "Stable"
        if not during_rebalance:
            # The members outlived the failover: they kept their ids, generation and
            # partitions (no commit refused, nothing revoked).
            for name, j in members.journals().items():
                changes = [e for e in (*j.assigned, *j.revoked, *j.failed) if e[0] > killed_at]
                assert changes == [], f"{name} after the failover: {changes}"

        # The killed broker back; once in the ISR again, the preferred replica of the offsets
        # partition: the group moves back to it (unloaded on one live broker, loaded from
        # what the other copied as a follower), members still committing.
        c.start(coordinator)
        offsets_tp = TopicPartition(OFFSETS_TOPIC, partition_for(group, OFFSETS_PARTITIONS))
        wait_until(lambda: coordinator in partition_view(c, OFFSETS_TOPIC, offsets_tp.partition)["isr"], 60,
                   f"broker {coordinator} back in the ISR of {offsets_tp}")
        moved_at = time.time()
        admin = AdminClient({"bootstrap.servers": boot})  # (held: its futures fail once it is collected)
        admin.elect_leaders(ElectionType.PREFERRED, [offsets_tp]).result(timeout=30)
        wait_until(lambda: coordinator_of(c, group) == coordinator, 30, f"broker {coordinator} to coordinate {group} again")
        check_first_answer(c, coordinator, group, topic, members, moved_at)
        wait_going_on(members, names, per_member, moved_at, f"{group} to go on at broker {coordinator} again")

        producer.stop()
        producer = None
        hw = high_watermarks(boot, topic)
        wait_until(lambda: all_consumed(members, hw), 60, "every record to be consumed")
        for name in names:
            members.stop(name)
        journals = members.journals()
        final = committed(boot, group, topic)
        failed = sorted({f[3] for j in journals.values() for f in j.failed})
        print(f"commits: {sum(len(j.acked) for j in journals.values())} acknowledged, "
              f"{sum(len(j.failed) for j in journals.values())} failed {failed}")
        check_acked_commits_kept(journals, final)
        assert final == hw, f"committed {final}, end {hw} (members commit what they read when they leave)"

        # A consumer joining now starts at the committed offsets.
        produce(boot, topic, 10, tag="later-")
        first = consume_in_group(boot, group, topic, {p: n + 10 for p, n in hw.items()})
        assert first == final, f"a new member started at {first}, committed {final}"
        assert committed(boot, group, topic) == {p: n + 10 for p, n in hw.items()}
        assert all(b["alive"] for b in c.status()["brokers"]), "a broker died"
    finally:
        if producer is not None:
            producer.halt()
        members.kill_all()


def test_coordinator_killed_in_a_stable_group_keeps_acknowledged_commits(cluster_factory, tmp_path):
    c = cluster_factory(3, overrides=COMPACTING_OVERRIDES)
    run_coordinator_failure(c, tmp_path, during_rebalance=False)


def test_coordinator_killed_during_a_rebalance_keeps_acknowledged_commits(cluster_factory, tmp_path):
    c = cluster_factory(3, overrides=COMPACTING_OVERRIDES)
    run_coordinator_failure(c, tmp_path, during_rebalance=True)


# ------------------------------------------------------------------ 4. bad input

BAD_INPUT_OVERRIDES = {**GROUP_OVERRIDES, "group.max.size": 2, "offset.metadata.max.bytes": 64}
RAW_SESSION_TIMEOUT_MS = 20_000  # raw members heartbeat by hand, now and then


def encode_assignment(topic: str, partitions: list[int]) -> bytes:
    """A v0 ConsumerProtocolAssignment of one topic."""
    name = topic.encode()
    return (struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


class RawMember:
    """Group requests of one (would-be) member over its own connection, at the newest
    versions we serve (JoinGroup v5: KIP-394's member id required)."""

    def __init__(self, port: int, group: str, name: str) -> None:
        self.wire = Wire(port, client_id=name)
        self.group = group

    def join_body(self, member_id: str, *, protocol_type: str = "consumer", protocols: list[tuple[str, bytes]] | None = None,
                  session_timeout_ms: int = RAW_SESSION_TIMEOUT_MS, group: str | None = None) -> dict:
        from kafkalite.core.consumer_protocol import encode_subscription

        protocols = protocols if protocols is not None else [("range", encode_subscription(["events"]))]
        return {"group_id": self.group if group is None else group, "session_timeout_ms": session_timeout_ms,
                "rebalance_timeout_ms": RAW_SESSION_TIMEOUT_MS, "member_id": member_id, "group_instance_id": None,
                "protocol_type": protocol_type, "protocols": [{"name": n, "metadata": m} for n, m in protocols]}

    def join(self, member_id: str, **kwargs) -> dict:
        return self.wire.call(ApiKey.JOIN_GROUP, 5, self.join_body(member_id, **kwargs))

    def sync_body(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> dict:
        return {"group_id": self.group, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
                "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> dict:
        return self.wire.call(ApiKey.SYNC_GROUP, 3, self.sync_body(member_id, generation, assignments))

    def heartbeat(self, member_id: str, generation: int) -> int:
        return self.wire.call(ApiKey.HEARTBEAT, 3, {"group_id": self.group, "generation_id": generation, "member_id": member_id,
                                                    "group_instance_id": None})["error_code"]

    def commit(self, member_id: str, generation: int, offsets: dict[int, int], *, topic: str = "events",
               metadata: dict[int, str] | None = None) -> dict[int, int]:
        """partition -> error code."""
        body = {"group_id": self.group, "generation_id_or_member_epoch": generation, "member_id": member_id,
                "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                     "committed_metadata": (metadata or {}).get(p, "")} for p, o in offsets.items()]}]}
        (answered,) = self.wire.call(ApiKey.OFFSET_COMMIT, 7, body)["topics"]
        return {r["partition_index"]: r["error_code"] for r in answered["partitions"]}

    def fetch(self, partitions: list[int]) -> tuple[int, dict[int, tuple[int, str | None]]]:
        """(error, partition -> (offset, metadata))."""
        body = self.wire.call(ApiKey.OFFSET_FETCH, 5, {"group_id": self.group, "topics": [{"name": "events", "partition_indexes": partitions}]})
        got = {r["partition_index"]: (r["committed_offset"], r["metadata"]) for t in body["topics"] for r in t["partitions"]}
        return body["error_code"], got

    def leave(self, member_ids: list[str]) -> tuple[int, list[int]]:
        body = self.wire.call(ApiKey.LEAVE_GROUP, 3, {"group_id": self.group, "members": [
            {"member_id": m, "group_instance_id": None} for m in member_ids]})
        return body["error_code"], [m["error_code"] for m in body["members"]]


def find_coordinator(port: int, group: str) -> dict:
    def found() -> dict | None:
        wire = Wire(port)
        try:
            body = wire.call(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
        finally:
            wire.close()
        return body if body["error_code"] == 0 else None
    return wait_until(found, 60, f"the coordinator of {group}", interval_s=0.2)


def test_bad_group_requests_get_kafka_error_codes_and_the_group_still_serves(cluster_factory):
    from kafkalite.core.codes import ErrorCode as E

    c = cluster_factory(3, overrides=BAD_INPUT_OVERRIDES)
    boot = c.status()["bootstrap"]
    create_topic(boot, "events")
    produce(boot, "events", 20)
    group = "g-bad"
    found = find_coordinator(c.broker(1)["port"], group)
    coordinator = found["node_id"]
    assert coordinator == coordinator_of(c, group)
    port = found["port"]
    assert port == broker_port(c, coordinator)
    a, b, z = (RawMember(port, group, name) for name in ("raw-a", "raw-b", "raw-z"))
    try:
        # Before there is a group: bad ids and timeouts, a member id nobody gave.
        assert a.join("", group="")["error_code"] == E.INVALID_GROUP_ID
        assert a.join("", session_timeout_ms=100)["error_code"] == E.INVALID_SESSION_TIMEOUT
        assert a.join("", session_timeout_ms=2_000_000)["error_code"] == E.INVALID_SESSION_TIMEOUT
        assert a.join("nobody")["error_code"] == E.UNKNOWN_MEMBER_ID
        assert a.sync("nobody", 1)["error_code"] == E.UNKNOWN_MEMBER_ID
        assert a.heartbeat("nobody", 1) == E.UNKNOWN_MEMBER_ID
        assert set(a.commit("nobody", 1, {0: 1}).values()) == {E.ILLEGAL_GENERATION}  # a generation of no group

        # KIP-394: JoinGroup v4+ without a member id is given one, and joins with it.
        first = a.join("")
        assert first["error_code"] == E.MEMBER_ID_REQUIRED
        x = first["member_id"]
        assert x.startswith("raw-a-")
        joined = a.join(x)
        assert joined["error_code"] == E.NONE, joined
        assert (joined["member_id"], joined["leader"], joined["generation_id"]) == (x, x, 1)
        assert [m["member_id"] for m in joined["members"]] == [x]
        gen = 1

        # Unknown member, wrong generation: SyncGroup, Heartbeat, OffsetCommit.
        assert a.sync("nobody", gen)["error_code"] == E.UNKNOWN_MEMBER_ID
        assert a.sync(x, gen + 1)["error_code"] == E.ILLEGAL_GENERATION
        assignment = encode_assignment("events", list(range(PARTITIONS)))
        synced = a.sync(x, gen, {x: assignment})
        assert (synced["error_code"], synced["assignment"]) == (E.NONE, assignment)
        assert a.heartbeat("nobody", gen) == E.UNKNOWN_MEMBER_ID
        assert a.heartbeat(x, gen + 5) == E.ILLEGAL_GENERATION
        assert a.heartbeat(x, gen) == E.NONE
        assert set(a.commit("nobody", gen, {0: 1}).values()) == {E.UNKNOWN_MEMBER_ID}
        assert set(a.commit(x, gen + 1, {0: 1}).values()) == {E.ILLEGAL_GENERATION}
        assert set(a.commit(x, gen - 1, {0: 1}).values()) == {E.ILLEGAL_GENERATION}

        # Metadata over offset.metadata.max.bytes: that partition refused, the others kept.
        answered = a.commit(x, gen, {0: 4, 1: 7}, metadata={0: "m" * 64, 1: "m" * 65})
        assert answered == {0: E.NONE, 1: E.OFFSET_METADATA_TOO_LARGE}
        assert set(a.commit(x, gen, {0: 1}, topic="no-such-topic").values()) == {E.UNKNOWN_TOPIC_OR_PARTITION}
        assert a.fetch([0, 1]) == (E.NONE, {0: (4, "m" * 64), 1: (-1, "")})
        assert set(a.commit(x, gen, dict.fromkeys(range(PARTITIONS), 5)).values()) == {E.NONE}

        # Another protocol type, or an assignor no member supports.
        assert z.join("", protocol_type="connect")["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
        assert z.join("", protocols=[("no-such-assignor", b"")])["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
        assert a.join(x, protocol_type="connect")["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL

        # group.max.size=2: a second member joins (parked until the first rejoins) ...
        second = b.join("")
        assert second["error_code"] == E.MEMBER_ID_REQUIRED
        y = second["member_id"]
        b.wire.send(ApiKey.JOIN_GROUP, 5, b.join_body(y))
        wait_until(lambda: a.heartbeat(x, gen) == E.REBALANCE_IN_PROGRESS, 10, "the group to rebalance")
        rejoined = a.join(x)
        assert rejoined["error_code"] == E.NONE, rejoined
        gen = rejoined["generation_id"]
        assert gen == 2
        assert sorted(m["member_id"] for m in rejoined["members"]) == sorted([x, y])
        assert b.wire.receive()["error_code"] == E.NONE
        # ... and a third is refused, while the group completes the rebalance and once Stable.
        assert z.join("")["error_code"] == E.GROUP_MAX_SIZE_REACHED
        b.wire.send(ApiKey.SYNC_GROUP, 3, b.sync_body(y, gen))
        split = {x: encode_assignment("events", [0, 1, 2]), y: encode_assignment("events", [3, 4, 5])}
        assert a.sync(x, gen, split)["error_code"] == E.NONE
        assert b.wire.receive()["assignment"] == split[y]
        assert z.join("")["error_code"] == E.GROUP_MAX_SIZE_REACHED
        # The generation before is stale now.
        assert a.heartbeat(x, gen - 1) == E.ILLEGAL_GENERATION
        assert set(a.commit(x, gen - 1, {0: 9}).values()) == {E.ILLEGAL_GENERATION}
        assert a.heartbeat(x, gen) == E.NONE
        assert b.heartbeat(y, gen) == E.NONE

        # Any other broker is not the coordinator.
        for other in (b["id"] for b in c.status()["brokers"] if b["id"] != coordinator):
            wrong = RawMember(broker_port(c, other), group, "raw-wrong")
            try:
                assert wrong.join("")["error_code"] == E.NOT_COORDINATOR
                assert wrong.join(x)["error_code"] == E.NOT_COORDINATOR
                assert wrong.sync(x, gen)["error_code"] == E.NOT_COORDINATOR
                assert wrong.heartbeat(x, gen) == E.NOT_COORDINATOR
                assert set(wrong.commit(x, gen, {0: 9}).values()) == {E.NOT_COORDINATOR}
                assert wrong.fetch([0])[0] == E.NOT_COORDINATOR
                assert wrong.leave([x])[0] == E.NOT_COORDINATOR
            finally:
                wrong.wire.close()

        # A negative rebalance timeout (Kafka takes it: its rebalance deadlines pass at once),
        # in another group with the same coordinator.
        other_group = next(g for g in (f"g-bad-{i}" for i in range(1000))
                           if partition_for(g, OFFSETS_PARTITIONS) == partition_for(group, OFFSETS_PARTITIONS))
        body = z.join_body("", group=other_group)
        body["rebalance_timeout_ms"] = -1
        required = z.wire.call(ApiKey.JOIN_GROUP, 5, body)
        assert required["error_code"] == E.MEMBER_ID_REQUIRED
        body["member_id"] = required["member_id"]
        assert z.wire.call(ApiKey.JOIN_GROUP, 5, body)["error_code"] == E.NONE
        assert a.heartbeat(x, gen) == E.NONE

        # OffsetCommit v2-v4 retention: any int64 (the expiry used to overflow the record).
        for retention_ms in (2**63 - 1, -(2**63)):
            body = {"group_id": group, "generation_id_or_member_epoch": gen, "member_id": x, "retention_time_ms": retention_ms,
                    "topics": [{"name": "events", "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}]}
            (answered,) = a.wire.call(ApiKey.OFFSET_COMMIT, 2, body)["topics"]
            assert [r["error_code"] for r in answered["partitions"]] == [E.NONE]
        assert set(a.commit(x, gen, {0: 5}).values()) == {E.NONE}  # the broker's retention again

        # A client id as long as the protocol allows: the member id made of it still fits.
        long = RawMember(port, other_group, "c" * 32767)
        try:
            first = long.join("")
            assert first["error_code"] == E.MEMBER_ID_REQUIRED
            assert len(first["member_id"].encode()) <= 32767
            joined = long.join(first["member_id"])
            assert (joined["error_code"], joined["leader"]) == (E.NONE, first["member_id"])
            # An assignment over the offsets topic's largest batch: the group's record is
            # refused, the sync fails as in Kafka (UNKNOWN_SERVER_ERROR) and the group rebalances.
            too_big = long.sync(first["member_id"], joined["generation_id"], {first["member_id"]: b"a" * (2 << 20)})
            assert too_big["error_code"] == E.UNKNOWN_SERVER_ERROR
            joined = long.join(first["member_id"])
            assert (joined["error_code"], joined["leader"]) == (E.NONE, first["member_id"])
            assert long.sync(first["member_id"], joined["generation_id"], {first["member_id"]: assignment})["error_code"] == E.NONE
            assert long.leave([first["member_id"]]) == (E.NONE, [E.NONE])
        finally:
            long.wire.close()

        # Leaving: unknown members are told so; the two members go.
        assert a.leave(["nobody"]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])
        assert a.leave([x, y]) == (E.NONE, [E.NONE, E.NONE])
        assert a.heartbeat(x, gen) == E.UNKNOWN_MEMBER_ID
        assert a.fetch([0, 1]) == (E.NONE, {0: (5, ""), 1: (5, "")})
    finally:
        for member in (a, b, z):
            member.wire.close()

    # The coordinator is alive and serves a well-behaved consumer, from the commits above.
    assert pid_alive(c.broker(coordinator)["pid"])
    assert broker_state(c.broker(coordinator)["admin_port"])["broker_id"] == coordinator
    first = consume_in_group(boot, group, "events", dict.fromkeys(range(PARTITIONS), 20))
    assert first == dict.fromkeys(range(PARTITIONS), 5)
    assert committed(boot, group, "events") == dict.fromkeys(range(PARTITIONS), 20)
    assert all(b["alive"] for b in c.status()["brokers"])
