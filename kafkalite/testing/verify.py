"""Produce-consume-validate: the workload chaos tests and `bin/chaos` run under failures.

A VerifyingProducer thread writes unique values with acks=all (idempotent) and records
every acknowledgement (partition, offset). Afterwards `verify` reads each partition from
its log start to the HW and checks guarantee 1 and 3 of DESIGN.md section 7: every
acknowledged value is at its acknowledged offset, offsets are contiguous (none skipped or
repeated), and no acknowledged value appears twice. `replica_logs_identical` checks
guarantee 2 on the segment files of every replica (`replicas_identical_below_hw`: of every
partition of a running cluster, once its replicas have reached the HW). With a `history`
(kafkalite.testing.history) the producer also records every invocation and answer, so the
run can be held against the final log by the history checker.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kafkalite import leader_lookups
from kafkalite.cli import client_security
from kafkalite.testing.client_resends import ClientAccount, ClientAccountLog, ResendCheck, segment_batches
from kafkalite.testing.history import NO_OFFSET, FinalLog, History
from kafkalite.testing.probes import UNANSWERED, broker_state, partition_view


@dataclasses.dataclass
class Acked:
    partition: int
    offset: int  # NO_OFFSET: acknowledged without one (history.py, `ok`)


def librdkafka_debug(debug_file: str | None, contexts: str | None) -> str:
    """The verifying producer's librdkafka `debug` setting: always `eos` (its epoch bumps are
    the evidence client_resends needs), and with a debug file the contexts asked for
    (KAFKALITE_VERIFY_DEBUG, default eos,broker,topic)."""
    asked = (contexts or "eos,broker,topic").split(",") if debug_file else []
    return ",".join(dict.fromkeys(["eos", *(c.strip() for c in asked if c.strip())]))


@dataclasses.dataclass(frozen=True)
class PartitionWait:
    """A partition the producer sent to after its last acknowledgement there."""

    waiting_s: float  # since the first of those sends
    sent: int  # records sent to it since its last acknowledgement
    failed: int  # ... of which failed


def partition_of(key: bytes, partitions: int) -> int:
    """The partition librdkafka's default partitioner (consistent_random) picks for a keyed
    record: CRC-32 of the key modulo the partition count."""
    return zlib.crc32(key) % partitions


class VerifyingProducer(threading.Thread):
    """Bounded in count and time; `stop()` then `join()`.

    With `partitions` (the topic's partition count) it names each record's partition itself,
    the one librdkafka's default partitioner would pick for its key, so that it knows, per
    partition, how long it has been sending there without an acknowledgement
    (`partition_waits`): a partition stranded while the others are acknowledged. Without
    it, librdkafka partitions and only the producer-wide silence is known."""

    def __init__(self, bootstrap: str, topic: str, *, count_max: int = 1_000_000, seconds_max: float = 600,
                 rate_per_s: float = 2000, prefix: str = "v", history: History | None = None,
                 process: str = "producer-1", partitions: int | None = None):
        super().__init__(daemon=True, name="verifying-producer")
        self.bootstrap = bootstrap
        self.topic = topic
        self.count_max = count_max
        self.seconds_max = seconds_max
        self.rate_per_s = rate_per_s
        self.prefix = prefix
        self.history = history
        self.process = process
        self.acked: dict[bytes, Acked] = {}
        self.failed: dict[bytes, str] = {}
        self.sent = 0
        self._acked_index_max = -1  # the highest send index acknowledged
        self._last_ack_at = time.monotonic()
        self.partitions = partitions
        # Per partition, since its last acknowledgement: when the first record sent there was
        # sent, how many were sent and how many of those failed. No entry: nothing unanswered
        # sent there since an acknowledgement (or never sent there).
        self._waiting_since: dict[int, float] = {}
        self._sent_since_ack: dict[int, int] = {}
        self._failed_since_ack: dict[int, int] = {}
        self._halt = threading.Event()
        self.lock = threading.Lock()
        # librdkafka's reason when the idempotent producer hit a fatal error (it then refuses
        # every produce); the checks print it.
        self.fatal: str | None = None
        # librdkafka's account of its epochs and bumps (client_resends.ClientAccount).
        self._account_log = ClientAccountLog()
        # Records still unanswered after the final flush (librdkafka's flush(120) result);
        # None until run() has ended.
        self.unflushed: int | None = None

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        conf = {
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "message.timeout.ms": 60000, "linger.ms": 5, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, "log_level": 3, **client_security.librdkafka_config(),
        }
        # librdkafka's account of its idempotence (debug "eos": a few lines per epoch bump or
        # drain, none per message) goes to a logger of this producer's own: its epoch bumps
        # tell a duplicate it wrote itself from one the broker failed to drop
        # (kafkalite.testing.client_resends); its errors still go to stderr.
        rdkafka_log = logging.Logger("kafkalite.verify.librdkafka", logging.DEBUG)  # this producer's own, unregistered
        rdkafka_log.addHandler(self._account_log)
        errors = logging.StreamHandler(sys.stderr)
        errors.setLevel(logging.ERROR)
        errors.setFormatter(logging.Formatter("%(message)s"))
        rdkafka_log.addHandler(errors)
        debug_file = os.environ.get("KAFKALITE_VERIFY_DEBUG_FILE")
        if debug_file:  # more of librdkafka's account of idempotence and retries, for post-mortems
            handler = logging.FileHandler(debug_file)
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            rdkafka_log.addHandler(handler)
        conf.update({"debug": librdkafka_debug(debug_file, os.environ.get("KAFKALITE_VERIFY_DEBUG")),
                     "log_level": 7, "logger": rdkafka_log})
        try:
            self._produce(conf)
        finally:
            for h in list(rdkafka_log.handlers):
                rdkafka_log.removeHandler(h)
                h.close()

    def _produce(self, conf: dict[str, Any]) -> None:
        def on_error(err) -> None:
            if err.fatal():
                with self.lock:
                    self.fatal = self.fatal or f"{err.name()}: {err.str()}"

        conf["error_cb"] = on_error
        p = Producer(conf)

        history, process = self.history, self.process

        def on_delivery(err, msg) -> None:
            offset = NO_OFFSET if msg.offset() is None else msg.offset()  # None: see history.py, `ok`
            if history is not None:
                if err is None:
                    history.ok(process, msg.value(), msg.partition(), offset)
                else:
                    history.fail(process, msg.value(), str(err))
            with self.lock:
                if err is None:
                    self.acked[msg.value()] = Acked(msg.partition(), offset)
                    self._acked_index_max = max(self._acked_index_max, int(msg.value().rsplit(b"-", 1)[1]))
                    self._last_ack_at = time.monotonic()
                else:
                    self.failed[msg.value()] = str(err)
            self.note_answer(msg.partition(), err is None)

        start = time.monotonic()
        interval = 1.0 / self.rate_per_s
        next_at = start
        last_invoked = b""  # a value retried after BufferError is invoked once
        not_produced: bytes | None = None  # invoked, not (yet) accepted by the client
        while not self._halt.is_set() and self.sent < self.count_max and time.monotonic() - start < self.seconds_max:
            value = f"{self.prefix}-{self.sent}".encode()
            partition = NO_OFFSET if self.partitions is None else partition_of(value, self.partitions)
            if history is not None and value != last_invoked:
                history.invoke(process, value, partition)
                last_invoked = value
            not_produced = value
            try:
                if partition == NO_OFFSET:  # librdkafka's partitioner picks
                    p.produce(self.topic, value=value, key=value, on_delivery=on_delivery)
                else:
                    p.produce(self.topic, value=value, key=value, partition=partition, on_delivery=on_delivery)
                    self.note_sent(partition)
                self.sent += 1
                not_produced = None
            except BufferError:
                p.poll(0.05)
                continue
            except KafkaException as e:  # fatal: nothing more can be produced; say why, and stop
                p.poll(1.0)  # serves error_cb and the debug log's last lines
                with self.lock:
                    self.fatal = self.fatal or str(e)
                print(f"verifying producer: FATAL {self.fatal}", flush=True)
                break
            p.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        if history is not None and not_produced is not None:  # never handed over: it cannot be written
            history.fail(process, not_produced, "not produced: the client refused it and the producer stopped")
        unanswered = p.flush(120)
        with self.lock:
            self.unflushed = unanswered

    @property
    def client_account(self) -> ClientAccount:
        """What librdkafka said so far about its epochs and the refusals that bumped them."""
        return self._account_log.account()

    def snapshot(self) -> tuple[int, int]:
        with self.lock:
            return len(self.acked), len(self.failed)

    def acked_index_max(self) -> int:
        """The highest send index (the n of `prefix-n`) acknowledged so far: a record sent
        after a fault is acknowledged once this passes `sent` as it was at the fault."""
        with self.lock:
            return self._acked_index_max

    def seconds_since_last_ack(self) -> float:
        with self.lock:
            return time.monotonic() - self._last_ack_at

    def note_sent(self, partition: int, now: float | None = None) -> None:
        """A record was handed to the client for `partition` (run() calls it)."""
        with self.lock:
            self._waiting_since.setdefault(partition, time.monotonic() if now is None else now)
            self._sent_since_ack[partition] = self._sent_since_ack.get(partition, 0) + 1

    def note_answer(self, partition: int, acked: bool) -> None:
        """The client answered a record of `partition` (the delivery callback calls it)."""
        with self.lock:
            if acked:
                self._waiting_since.pop(partition, None)
                self._sent_since_ack.pop(partition, None)
                self._failed_since_ack.pop(partition, None)
            elif partition in self._waiting_since:
                self._failed_since_ack[partition] = self._failed_since_ack.get(partition, 0) + 1

    def partition_waits(self, now: float | None = None) -> dict[int, PartitionWait]:
        """Partitions sent to since their last acknowledgement, and for how long (empty
        without `partitions`: the producer does not know where its records go)."""
        with self.lock:
            at = time.monotonic() if now is None else now
            return {p: PartitionWait(at - since, self._sent_since_ack.get(p, 0), self._failed_since_ack.get(p, 0))
                    for p, since in self._waiting_since.items()}


@dataclasses.dataclass
class Verdict:
    ok: bool
    acked: int
    read: int
    problems: list[str]
    # Duplicates librdkafka wrote itself, re-sending under a bumped epoch records it had been
    # told were not written (kafkalite.testing.client_resends): not the broker's failure.
    client_resends: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        state = "OK" if self.ok else "FAILED"
        resent = f", {len(self.client_resends)} records re-sent by the client under a new epoch" if self.client_resends else ""
        return f"{state}: {self.acked} acknowledged, {self.read} read back, {len(self.problems)} problems{resent}"


def read_partition(bootstrap: str, topic: str, partition: int, timeout_s: float = 60) -> list[tuple[int, bytes]]:
    """Every record from the log start to the HW (ListOffsets latest at the start), each
    batch's CRC checked by the client (check.crcs): a leader serving a corrupt batch is caught
    here, not taken for the log."""
    c = Consumer({**client_security.librdkafka_config(), "bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                  "enable.partition.eof": True, "check.crcs": True, "log_level": 3})
    try:
        deadline = time.monotonic() + timeout_s
        low, high = leader_lookups.watermarks(c, topic, partition, timeout_s=timeout_s, retries=int(timeout_s * 2),
                                              retry_interval_s=0.5)
        out: list[tuple[int, bytes]] = []
        if high <= low:
            return out
        c.assign([TopicPartition(topic, partition, low)])
        while time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is not None:
                    continue
                out.append((m.offset(), m.value()))
            if out and out[-1][0] >= high - 1:
                break
        return [(o, v) for o, v in out if o < high]
    finally:
        c.close()


def read_final_log(bootstrap: str, topic: str, partitions: int) -> FinalLog:
    """Every partition from its log start to its HW, read once for `verify` and the history
    checker."""
    return FinalLog({p: read_partition(bootstrap, topic, p) for p in range(partitions)})


Explain = Callable[[int, int, int], str | None]  # (partition, first offset, second offset) -> why, or None


def verify(bootstrap: str, topic: str, partitions: int, acked: dict[bytes, Acked], final: FinalLog | None = None,
           explain: Explain | None = None) -> Verdict:
    """`explain`: ResendCheck.explain, which accepts a duplicate as the client's own re-send
    on the evidence kafkalite.testing.client_resends describes; without it every duplicate of
    an acknowledged value is a problem."""
    problems: list[str] = []
    resends: list[str] = []
    read = 0
    where: dict[bytes, list[tuple[int, int]]] = {}
    if final is None:
        final = read_final_log(bootstrap, topic, partitions)
    for p in range(partitions):
        records = final.partitions.get(p, [])
        read += len(records)
        offsets = [o for o, _ in records]
        if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            gaps = [(a, b) for a, b in zip(offsets, offsets[1:]) if b != a + 1][:5]
            problems.append(f"partition {p}: offsets not contiguous, e.g. {gaps}")
        for o, v in records:
            places = where.setdefault(v, [])
            if places and v in acked:
                prev = places[-1]  # each copy is held against the one before it
                # librdkafka re-sends only what it had no acknowledgement for
                why = (explain(p, prev[1], o) if explain is not None and prev[0] == p and (acked[v].partition, acked[v].offset) != prev
                       else None)
                if why is None:
                    problems.append(f"acknowledged value {v!r} appears twice: {prev} and {(p, o)}")
                else:
                    resends.append(why)
            places.append((p, o))
    for v, a in acked.items():
        got = where.get(v)
        if got is None:
            problems.append(f"LOST: acknowledged {v!r} at {a.partition}:{a.offset} is not in the log")
        elif a.offset == NO_OFFSET and any(p == a.partition for p, _ in got):
            continue  # acknowledged without an offset: anywhere in its partition (history.py, `ok`)
        elif (a.partition, a.offset) not in got:
            problems.append(f"MOVED: acknowledged {v!r} at {a.partition}:{a.offset} found at "
                            + ", ".join(f"{p}:{o}" for p, o in got))
    return Verdict(not problems, len(acked), read, problems[:50], resends)


def resend_check(status: dict[str, Any], topic: str, partitions: int, final: FinalLog,
                 account: ClientAccount) -> ResendCheck:
    """A ResendCheck over a local cluster's replica directories (its `status()`), bounded by
    the final log each partition was read to."""
    everyone = [b["id"] for b in status["brokers"]]
    dirs = {p: partition_dirs(status, topic, p, everyone) for p in range(partitions)}
    ends = {p: records[-1][0] + 1 for p, records in final.partitions.items() if records}
    return ResendCheck(topic, account, dirs, ends)


def replica_logs_identical(replica_dirs: list[str], hw: int) -> list[str]:
    """Guarantee 2: below the HW every replica holds byte-identical batches."""
    problems = []
    views = {}
    for d in replica_dirs:
        views[d] = [(base, last, data) for base, last, data in segment_batches(d) if last < hw]
    ref_dir, ref = next(iter(views.items()))
    for d, batches in views.items():
        if [x[2] for x in batches] != [x[2] for x in ref]:
            first = next((i for i, (a, b) in enumerate(zip(batches, ref)) if a[2] != b[2]), min(len(batches), len(ref)))
            problems.append(f"{d} differs from {ref_dir} below HW {hw} at batch #{first}")
    return problems


def _replica_leos(cluster, name: str, replicas: list[int]) -> dict[int, int | None]:
    """Each replica's LEO as its broker reports it (None: it did not answer, or has no such
    replica)."""
    out: dict[int, int | None] = {}
    for r in replicas:
        try:
            b = cluster.broker(r)
            out[r] = broker_state(b["admin_port"], host=b["host"])["partitions"][name]["leo"]
        except (*UNANSWERED, KeyError):
            out[r] = None
    return out


def replicas_identical_below_hw(cluster, topic: str, partitions: int, timeout_s: float = 60.0,
                                interval_s: float = 0.5) -> list[str]:
    """Guarantee 2 on a running cluster, partition by partition: the leader's HW, a wait (all
    partitions together at most `timeout_s`) for every replica's LEO to reach it, then
    `replica_logs_identical` on the replicas' directories. Each problem names its partition;
    a partition whose replicas could not be compared is one too."""
    problems: list[str] = []
    deadline = time.monotonic() + timeout_s
    status = cluster.status()
    for p in range(partitions):
        name = f"{topic}-{p}"
        view = partition_view(cluster, topic, p)
        if view is None or view["leader"] < 0:
            problems.append(f"{name}: no leader; its replicas were not compared")
            continue
        try:
            leader = cluster.broker(view["leader"])
            hw = broker_state(leader["admin_port"], host=leader["host"])["partitions"][name]["hw"]
        except (*UNANSWERED, KeyError) as e:
            problems.append(f"{name}: its leader {view['leader']} did not tell its HW ({type(e).__name__}: {e}); "
                            f"its replicas were not compared")
            continue
        replicas = list(view["replicas"])
        while True:
            behind = {r: leo for r, leo in _replica_leos(cluster, name, replicas).items() if leo is None or leo < hw}
            if not behind or time.monotonic() >= deadline:
                break
            time.sleep(interval_s)
        if behind:
            problems.append(f"{name}: replicas did not reach the HW {hw} within {timeout_s:.0f} s (LEO "
                            + ", ".join(f"{r}: {'unknown' if leo is None else leo}" for r, leo in sorted(behind.items()))
                            + "); its replicas were not compared")
            continue
        dirs = partition_dirs(status, topic, p, replicas)
        if len(dirs) != len(replicas):
            problems.append(f"{name}: {len(dirs)} replica directories found for replicas {replicas}: {dirs}")
            continue
        problems += [f"{name}: {x}" for x in replica_logs_identical(dirs, hw)]
    return problems


def partition_dirs(status: dict[str, Any], topic: str, partition: int, replicas: list[int]) -> list[str]:
    out = []
    for b in status["brokers"]:
        if b["id"] in replicas:
            for ld in b["log_dirs"]:
                d = os.path.join(ld, f"{topic}-{partition}")
                if os.path.isdir(d):
                    out.append(d)
    return out
