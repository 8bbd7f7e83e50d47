"""`bin/chaos`: kill, pause and restart random brokers of a running `bin/cluster` while a
verifying producer writes with acks=all, then check that nothing acknowledged was lost.

At most one broker is down or paused at a time, so with RF 3 and min.insync.replicas=2 the
guarantee of DESIGN.md section 7 applies: every acknowledged write must survive.

A consumer group reads the topic meanwhile (`--group-members`, kafkalite.testing.group_watch):
its members commit synchronously, and an assigned partition must never start below a
commit acknowledged before; at the end the commits read back must be the acknowledged ones.

At the end, once every ISR is full, it waits (60 s at most) for every replica's LEO to
reach its leader's HW and compares the replicas' segment files below the HW (guarantee 2,
as tests/chaos/test_chaos.py does): with `--disk bitflip` a flipped batch must have been
refetched. The final log is read with the client's CRC check on.

Liveness counts as much as safety, so these stalls fail the run too: the producer getting
no acknowledgement for `--stall-seconds` while every partition has a leader (a client
stranded by the cluster), or getting none for that long from one partition with a leader
that it kept sending to (a partition stranded), the group consuming nothing for
`--group-stall-seconds` while the producer is acknowledged, the group not catching up with
the producer 120 s after the end, and a live cluster not fully replicated 60 s after an
action (a live broker left out of the ISR). So does a fatal error of the producer
(librdkafka's idempotent producer refusing every produce after it), printed when the stall
watch sees it and at the end.

With `--netns` (a cluster started with `bin/cluster up --netns`, each member in its own
network namespace) it also makes network faults, each held for a few seconds and then
healed: a broker isolated from ZooKeeper and the other brokers while clients still reach
it, ZooKeeper isolated, the controller cut from the other brokers, packets dropped one way
between two brokers, and 50 ms delay with 5% loss of every broker's packets.

Everything the producer and the group's members did is recorded as a history (every
invocation, acknowledgement, failure, read and rebalance, kafkalite.testing.history), and
at the end the history checker holds it against the final log: nothing acknowledged lost,
no duplicates, contiguous offsets never reused, no read of data later truncated, one order
per partition for every consumer, every offset up to the highest acknowledged one read by
the group, and each member reading in log order between rebalances. Its first violation is
printed with its context, and the history is written to `--history` (or, on a violation, to
the cluster directory).

A traceback any broker logged during the run fails it too: an operating error (a disk
fault, a peer gone) is logged as one line, so a traceback is a bug whatever the fault.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time

from kafkalite.cli import client_security
from kafkalite.core.group_messages import OFFSETS_TOPIC
from kafkalite.testing.cluster import ClusterError, LocalCluster
from kafkalite.testing.disk_faults import fill, flip_bit
from kafkalite.testing.group_watch import GroupWatch
from kafkalite.testing.history import History, check
from kafkalite.testing.probes import UNANSWERED, partition_view, topic_fully_replicated, wait_fully_replicated, wait_until
from kafkalite.testing.verify import VerifyingProducer, read_final_log, replicas_identical_below_hw, resend_check, verify

ACTIONS = ("kill", "pause", "term", "kill-controller")
# With --netns (a cluster started with `bin/cluster up --netns`): network faults, each held
# for a few seconds and then healed (kafkalite.testing.netns).
NET_ACTIONS = ("isolate", "isolate-zk", "split-controller", "oneway", "netem")
# With --disk: disk faults. `disk-full` fills a broker's second log dir (bin/cluster up
# --small-log-dir) until it goes offline (KIP-112), frees it and restarts the broker;
# `bitflip` kills a follower, flips a bit in a batch of its active segment and restarts it
# (its recovery must catch it by the CRC and refetch).
DISK_ACTIONS = ("disk-full", "bitflip")


def say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


class TopicMismatch(Exception):
    """The chaos topic exists with a shape the run's checks cannot hold it to."""


def topic_mismatches(found_partitions: int, found_rfs: set[int], found_min_isr: int, partitions: int, rf: int,
                     min_isr: int) -> list[str]:
    """Why an existing topic does not fit the run. The producer, the final reader and the
    checks cover exactly `partitions`; the guarantee tested (nothing acknowledged lost with
    one broker down) needs `rf` replicas and at least `min_isr` of them in sync for a write.
    A higher min.insync.replicas (up to the RF) only refuses more writes: accepted."""
    out = []
    if found_partitions != partitions:
        out.append(f"it has {found_partitions} partitions, not {partitions} (--partitions)")
    if found_rfs != {rf}:
        out.append(f"its replication factor is {'/'.join(map(str, sorted(found_rfs))) or 'unknown'}, not {rf}")
    if found_min_isr < min_isr:
        out.append(f"its min.insync.replicas is {found_min_isr}, below {min_isr}: an acknowledged write may then be lost "
                   f"with one broker down")
    elif found_min_isr > rf:
        out.append(f"its min.insync.replicas is {found_min_isr}, above its replication factor {rf}: no write can succeed")
    return out


def ensure_topic(boot: str, topic: str, partitions: int, rf: int, min_isr: int) -> None:
    """Create the chaos topic, or check that the existing one fits (TopicMismatch if not)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

    admin = AdminClient({"bootstrap.servers": boot, **client_security.librdkafka_config()})
    existing = admin.list_topics(timeout=10).topics.get(topic)
    if existing is not None:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        config = admin.describe_configs([resource])[resource].result(timeout=30)
        found_min_isr = int(config["min.insync.replicas"].value)
        problems = topic_mismatches(len(existing.partitions), {len(p.replicas) for p in existing.partitions.values()},
                                    found_min_isr, partitions, rf, min_isr)
        if problems:
            raise TopicMismatch(f"topic {topic} exists and does not fit this run: " + "; ".join(problems)
                                + f". Use another --topic, or delete {topic} first")
        if found_min_isr != min_isr:
            say(f"topic {topic} exists with min.insync.replicas {found_min_isr} (bin/chaos would create it with "
                f"{min_isr}): its writes fail with fewer replicas in sync (a stall, not a loss)")
        return
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf,
                                           config={"min.insync.replicas": str(min_isr)})]).values():
        f.result(timeout=30)


def wait_healthy(cluster: LocalCluster, topic: str, partitions: int, timeout_s: float) -> bool:
    """The chaos topic and the consumer group's offsets topic fully replicated within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    try:
        wait_fully_replicated(cluster, topic, partitions, timeout_s)
        wait_until(lambda: topic_fully_replicated(cluster, OFFSETS_TOPIC), max(deadline - time.monotonic(), 1),
                   f"every {OFFSETS_TOPIC} partition to have its full ISR")
        return True
    except (AssertionError, ClusterError, OSError):
        return False


def every_partition_led(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    """Every partition has a leader, as far as can be seen now: False when the brokers cannot
    tell (a broker killed mid-answer cuts its /state short: http.client.IncompleteRead)."""
    try:
        return all((v := partition_view(cluster, topic, p)) is not None and v["leader"] >= 0 for p in range(partitions))
    except (ClusterError, *UNANSWERED):
        return False


def partition_leader(cluster: LocalCluster, topic: str, partition: int) -> int | None:
    """The partition's leader as far as can be seen now; None if it has none or the brokers
    cannot tell."""
    try:
        view = partition_view(cluster, topic, partition)
    except (ClusterError, *UNANSWERED):
        return None
    return view["leader"] if view is not None and view["leader"] >= 0 else None


class StallWatch(threading.Thread):
    """Every `interval_s`: has the producer been without an acknowledgement for `stall_s`
    while every partition has a leader? Or, while it was acknowledged elsewhere, has one
    partition with a leader gone `stall_s` without acknowledging anything the producer sent it
    (`producer.partition_waits()`: partitions the producer did not send to are not looked
    at)? Each such stall is reported once, when it is seen.

    A look that fails (a broker answering garbage as it dies, say) is logged and counts as
    not knowing; the next look goes on. Should the thread still end before `stop()`, `died()`
    says so, and bin/chaos fails the run: no stall could be seen after that."""

    def __init__(self, cluster: LocalCluster, producer: VerifyingProducer, topic: str, partitions: int, stall_s: float,
                 group: GroupWatch | None = None, group_stall_s: float = 60, interval_s: float = 1.0):
        super().__init__(daemon=True, name="stall-watch")
        self.cluster, self.producer, self.topic, self.partitions, self.stall_s = cluster, producer, topic, partitions, stall_s
        self.group, self.group_stall_s, self.interval_s = group, group_stall_s, interval_s
        self.stalls: list[str] = []
        self.failed_looks = 0
        self._halt = threading.Event()
        self._in_stall = self._group_stall = False
        self._stalled_partitions: set[int] = set()
        self._fatal_said = False
        self._death: str | None = None  # what ended the thread, if anything did
        self._ended_before_stop = False

    def stop(self) -> None:
        self._ended_before_stop = self.ident is not None and not self.is_alive()
        self._halt.set()

    def died(self) -> str | None:
        """Why the watch ended before `stop()`, or None if it was watching until then."""
        if not self._ended_before_stop:
            return None
        return self._death or "it ended without an exception"

    def run(self) -> None:
        try:
            while not self._halt.wait(self.interval_s):
                try:
                    self._look()
                except Exception as e:  # noqa: BLE001 - unknown this time; the next look may see
                    self.failed_looks += 1
                    say(f"  stall watch: this look failed ({type(e).__name__}: {e}); looking again")
        except BaseException as e:
            self._death = f"{type(e).__name__}: {e}"
            raise

    def _look(self) -> None:
        if self.producer.fatal is not None and not self._fatal_said:  # when it happened; the run fails at the end
            self._fatal_said = True
            say(f"PRODUCER FATAL: {self.producer.fatal}")
        if self.group is not None:
            self._group_stall = self._check_group(self._group_stall)
        silent_s = self.producer.seconds_since_last_ack()
        if silent_s < self.stall_s:
            if self._in_stall:
                say(f"  producer acknowledged again after {silent_s:.0f} s of silence")
            self._in_stall = False
        elif not self._in_stall and every_partition_led(self.cluster, self.topic, self.partitions):
            self._in_stall = True
            acked, failed = self.producer.snapshot()
            msg = (f"STALL: no acknowledgement for {silent_s:.0f} s while every partition has a leader "
                   f"(acked {acked}, failed {failed}, sent {self.producer.sent})")
            self.stalls.append(msg)
            say(msg)
        self._check_partitions()

    def _check_partitions(self) -> None:
        """One partition stranded: what the producer sent it for `stall_s` got no
        acknowledgement while it had a leader. Not reported while the whole producer's
        silence is (that covers every partition)."""
        waits = self.producer.partition_waits()
        for p in sorted(self._stalled_partitions):
            if p not in waits or waits[p].waiting_s < self.stall_s:
                self._stalled_partitions.discard(p)
                say(f"  partition {p} acknowledged again")
        if self._in_stall:
            return
        for p, wait in sorted(waits.items()):
            if wait.waiting_s < self.stall_s or p in self._stalled_partitions:
                continue
            leader = partition_leader(self.cluster, self.topic, p)
            if leader is None:
                continue
            self._stalled_partitions.add(p)
            msg = (f"STALL: partition {p} acknowledged nothing sent to it for {wait.waiting_s:.0f} s while it has leader "
                   f"{leader} ({wait.sent} sent there since its last acknowledgement, {wait.failed} of them failed)")
            self.stalls.append(msg)
            say(msg)

    def _check_group(self, in_stall: bool) -> bool:
        """The group consumed nothing for `group_stall_s` while the producer was acknowledged
        and every partition had a leader: a group stranded by the cluster. Returns whether
        the group is in such a stall now.

        Why longer than the producer's limit: when its coordinator fails, a member whose
        heartbeats go unanswered for its session timeout gives up its member id and its
        partitions (librdkafka does) and joins again with a new id; the new coordinator,
        which loaded the group with the old ids, then waits a session timeout for them before
        it completes the rebalance (as Kafka does). A 10 s session costs up to ~25 s, and a
        second coordinator failure during that rebalance (seed 31: two 9 s pauses 13 s apart)
        starts it again: 34 s without a record."""
        assert self.group is not None
        idle_s = self.group.ledger.stalled_s()
        if idle_s < self.group_stall_s:
            if in_stall:
                say(f"  the consumer group consumed again after {idle_s:.0f} s")
            return False
        if in_stall or self.producer.seconds_since_last_ack() >= self.group_stall_s or \
                not every_partition_led(self.cluster, self.topic, self.partitions):
            return in_stall
        ledger = self.group.ledger
        msg = (f"GROUP STALL: the consumer group consumed nothing for {idle_s:.0f} s while the producer was acknowledged "
               f"(consumed {ledger.consumed}, commits {ledger.commits}, assignments {ledger.rebalances})")
        self.stalls.append(msg)
        say(msg)
        return True


def producer_problems(producer: VerifyingProducer) -> list[str]:
    """What makes the producer's part of the run a failure whatever the checks find: a fatal
    error of librdkafka's idempotent producer (it refuses every produce after it, so the run
    stopped testing anything; kafkalite should never cause one), records neither acknowledged
    nor failed by the end of its final flush (every record is answered within
    message.timeout.ms), or a producer that did not finish at all."""
    with producer.lock:
        fatal, unflushed = producer.fatal, producer.unflushed
    out = [] if fatal is None else [f"PRODUCER FATAL: {fatal} (no record could be produced after it)"]
    if producer.is_alive():
        out.append("PRODUCER UNFINISHED: it was still running 180 s after it was stopped (its final flush did not end)")
    elif unflushed:
        out.append(f"UNANSWERED: {unflushed} records were neither acknowledged nor failed after the producer's final "
                   f"120 s flush")
    return out


def liveness_report(stalls: list[str], not_replicated: list[str], watch_died: str | None, stall_s: float,
                    replication_s: float) -> tuple[bool, list[str]]:
    """Whether the run was live, and the lines saying so. A stall watch that died before the
    end saw nothing after it, so the run cannot be called live."""
    died = [] if watch_died is None else [f"STALL WATCH DIED before the end ({watch_died}): no stall was looked for after that"]
    failures = died + stalls + not_replicated
    if failures:
        head = (f"LIVENESS FAILED: {len(stalls)} producer stalls, {len(not_replicated)} times not fully replicated"
                + (", the stall watch died" if watch_died is not None else ""))
        return False, [head] + [f"  {msg}" for msg in failures[:20]]
    return True, [f"LIVENESS OK: the producer was never silent for {stall_s:.0f} s and the cluster was fully "
                  f"replicated within {replication_s:.0f} s of every action"]


TRACEBACK_HEAD = "Traceback (most recent call last):"


def log_marks(status: dict) -> dict[str, int]:
    """Each broker log's size now: where this run's lines begin (the logs are appended to,
    across restarts)."""
    marks = {}
    for b in status["brokers"]:
        try:
            marks[b["log"]] = os.path.getsize(b["log"])
        except OSError:
            marks[b["log"]] = 0
    return marks


def tracebacks_since(marks: dict[str, int], context_lines: int = 3) -> list[str]:
    """The tracebacks the brokers logged after `marks`, each as its log's name, the line
    before it (what was logged with it) and its last lines (the exception). A traceback in a
    broker's log is a bug whatever the fault: an operating error is logged as one line."""
    found = []
    for path, start in marks.items():
        try:
            with open(path, "rb") as f:
                f.seek(start)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines):
            if line.strip() != TRACEBACK_HEAD:
                continue
            end = i + 1
            while end < len(lines) and (lines[end][:1].isspace() or not lines[end].strip()):
                end += 1  # the frames are indented; the exception line is the first that is not
            before = lines[i - 1] if i > 0 else ""
            tail = lines[max(i + 1, end + 1 - context_lines):end + 1]
            found.append(f"{os.path.basename(os.path.dirname(path))}: {before.strip()} | " + " | ".join(t.strip() for t in tail))
    return found


def disk_fault(cluster: LocalCluster, action: str, rng: random.Random, topic: str, partitions: int, say_, progress: str) -> str | None:
    """One disk fault, repaired before it returns; what was done, or None if not possible now."""
    from pathlib import Path

    from kafkalite.testing.probes import broker_state

    st = cluster.status()
    if action == "disk-full":
        candidates = [b for b in st["brokers"] if b.get("small_log_dir") and b["alive"]]
        if not candidates:
            return None
        b = rng.choice(candidates)
        small = Path(b["small_log_dir"])
        say_(f"disk-full: fill broker {b['id']}'s log dir {small}  {progress}")
        filler = fill(small, "chaos-filler")
        try:
            wait_until(lambda: str(small) in broker_state(b["admin_port"], host=b["host"])["log_dirs"]["offline"], 30,
                       f"broker {b['id']} to take {small} offline")
            say_(f"  broker {b['id']} took {small} offline")
        except AssertionError as e:
            say_(f"  {e} (nothing was written there meanwhile?)")
        finally:
            filler.unlink(missing_ok=True)
        cluster.stop_broker(b["id"])
        cluster.start(b["id"])
        say_(f"  space freed, broker {b['id']} restarted")
        return f"broker {b['id']}"
    if action == "bitflip":
        p = rng.randrange(partitions)
        view = partition_view(cluster, topic, p)
        if view is None or view["leader"] < 0:
            return None
        followers = [r for r in view["replicas"] if r != view["leader"]]
        if not followers:
            return None
        victim = rng.choice(followers)
        b = cluster.broker(victim)
        say_(f"bitflip: kill broker {victim}, flip a bit in its copy of {topic}-{p}, restart  {progress}")
        cluster.kill(victim, "KILL")
        flipped = None
        for d in b["log_dirs"]:
            segments = sorted((Path(d) / f"{topic}-{p}").glob("*.log"))
            if segments:
                flipped = flip_bit(segments[-1], rng)
        cluster.start(victim)
        say_(f"  flipped the batch at offset {flipped}; broker {victim} restarted" if flipped is not None
             else "  its active segment had no batch to flip")
        return f"broker {victim} {topic}-{p}"
    raise AssertionError(action)


def network_fault(net, action: str, rng: random.Random, ids: list[int], controller: int | None) -> str | None:
    """Make one network fault (undone by net.heal()); what was done, or None if it cannot be now."""
    if action == "isolate":
        victim = rng.choice(ids)
        net.isolate(str(victim))
        return f"isolate broker {victim} (clients still reach it)"
    if action == "isolate-zk":
        member = rng.choice(net.zookeepers)  # "zk", or one member of an ensemble
        net.isolate(member)
        return f"isolate ZooKeeper ({member})"
    if action == "split-controller":
        if controller is None:
            return None
        net.between([str(controller)], [str(b) for b in ids if b != controller])
        return f"cut controller {controller} from the other brokers (not from ZooKeeper)"
    if action == "oneway":
        src, dst = rng.sample(ids, 2)
        net.oneway(str(src), str(dst))
        return f"drop packets from broker {src} to broker {dst}"
    if action == "netem":
        for b in ids:
            net.netem(str(b), delay_ms=50, loss=0.05)
        return "50 ms delay and 5% loss of every broker's packets"
    raise AssertionError(action)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bin/chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=".cluster")
    ap.add_argument("--seconds", type=float, default=60, help="how long to run the chaos (default 60)")
    ap.add_argument("--interval", type=float, default=8, help="seconds between actions (default 8)")
    ap.add_argument("--pause-seconds", type=float, default=9, help="SIGSTOP duration; past the session timeout makes a zombie")
    ap.add_argument("--actions", default=None,
                    help=f"comma-separated subset of {','.join(ACTIONS)} (default all), and with --netns of "
                         f"{','.join(NET_ACTIONS)}")
    ap.add_argument("--disk", action="store_true",
                    help=f"also make disk faults ({', '.join(DISK_ACTIONS)}; disk-full needs bin/cluster up --small-log-dir)")
    ap.add_argument("--netns", action="store_true",
                    help="also make network faults (the cluster must run in network namespaces: bin/cluster up --netns)")
    ap.add_argument("--topic", default="chaos")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=float, default=500, help="messages per second")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--stall-seconds", type=float, default=30,
                    help="fail when the producer gets no acknowledgement this long while every partition has a leader, "
                         "or none from one partition with a leader that it kept sending to")
    ap.add_argument("--group-members", type=int, default=2, help="consumers in the verifying consumer group (0: none)")
    ap.add_argument("--group-stall-seconds", type=float, default=60,
                    help="fail when the consumer group consumes nothing this long while the producer is acknowledged "
                         "(a coordinator failure legitimately costs up to two member session timeouts of 10 s, and "
                         "two in a row twice that)")
    ap.add_argument("--replication-seconds", type=float, default=60,
                    help="fail when the cluster is not fully replicated this long after an action")
    ap.add_argument("--history", default=None,
                    help="write the run's history (JSON lines) here; by default it is written to the cluster "
                         "directory only when the checker finds a violation")
    args = ap.parse_args(argv)
    allowed = ACTIONS + (NET_ACTIONS if args.netns else ()) + (DISK_ACTIONS if args.disk else ())
    actions = [a.strip() for a in (args.actions or ",".join(allowed)).split(",") if a.strip()]
    bad = [a for a in actions if a not in allowed]
    if bad or not actions:
        hint = "" if args.netns and args.disk else (f" (network faults {', '.join(NET_ACTIONS)} need --netns, "
                                                    f"disk faults {', '.join(DISK_ACTIONS)} --disk)")
        print(f"bin/chaos: unknown action(s) {bad}; choose from {', '.join(allowed)}{hint}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    try:
        cluster = LocalCluster.load(args.dir)
        status = cluster.status()
    except ClusterError as e:
        print(f"bin/chaos: {e}", file=sys.stderr)
        return 1
    net = None
    if args.netns:
        try:
            net = cluster.network()
        except ClusterError as e:
            print(f"bin/chaos: --netns: {e}", file=sys.stderr)
            return 1
    down = [b["id"] for b in status["brokers"] if not b["alive"]]
    if down:
        print(f"bin/chaos: brokers {down} are not running; `bin/cluster start ID` them first", file=sys.stderr)
        return 1
    n = len(status["brokers"])
    rf = min(3, n)
    min_isr = 2 if rf >= 3 else 1
    boot = status["bootstrap"]
    if status.get("client_config"):  # a `bin/cluster up --secure` cluster: every client (and helper process) uses it
        os.environ[client_security.COMMAND_CONFIG_ENV] = status["client_config"]
        client_security.configure(status["client_config"])
    marks = log_marks(status)
    say(f"seed {seed}; {n} brokers; topic {args.topic} ({args.partitions} partitions, RF {rf}, min.insync.replicas {min_isr})")
    try:
        ensure_topic(boot, args.topic, args.partitions, rf, min_isr)
    except TopicMismatch as e:
        print(f"bin/chaos: {e}", file=sys.stderr)
        return 1
    history = History()
    producer = VerifyingProducer(boot, args.topic, rate_per_s=args.rate, seconds_max=args.seconds + 300,
                                 prefix=f"chaos{seed}", history=history, partitions=args.partitions)
    producer.start()
    group = None
    if args.group_members > 0:
        group = GroupWatch(boot, args.topic, f"chaos{seed}-group", members=args.group_members, seconds_max=args.seconds + 600,
                           history=history)
        group.start()
    watch = StallWatch(cluster, producer, args.topic, args.partitions, args.stall_seconds, group, args.group_stall_seconds)
    watch.start()
    done_actions = []
    not_replicated: list[str] = []
    try:
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            time.sleep(min(args.interval, max(end - time.monotonic(), 0)))
            if time.monotonic() >= end:
                break
            if not wait_healthy(cluster, args.topic, args.partitions, args.replication_seconds):
                last = f"{done_actions[-1][0]} broker {done_actions[-1][1]}" if done_actions else "the start"
                msg = f"NOT REPLICATED: cluster not fully replicated {args.replication_seconds:.0f} s after {last}"
                not_replicated.append(msg)
                say(msg + "; waiting before the next action")
                continue
            action = rng.choice(actions)
            st = cluster.status()
            if action in NET_ACTIONS:
                assert net is not None
                ids = [b["id"] for b in st["brokers"]]
                described = network_fault(net, action, rng, ids, st["controller"])
                if described is None:
                    continue
                acked, failed = producer.snapshot()
                held = rng.uniform(3, 12) if action != "netem" else rng.uniform(10, 20)
                say(f"{described} for {held:.1f} s  (acked so far {acked}, failed {failed})")
                try:
                    time.sleep(held)
                finally:
                    net.heal()
                done_actions.append((action, described))
                say("  healed")
                continue
            if action in DISK_ACTIONS:
                acked, failed = producer.snapshot()
                described = disk_fault(cluster, action, rng, args.topic, args.partitions, say,
                                       f"(acked so far {acked}, failed {failed})")
                if described is not None:
                    done_actions.append((action, described))
                continue
            victim = st["controller"] if action == "kill-controller" else rng.choice([b["id"] for b in st["brokers"]])
            if victim is None:
                continue
            acked, failed = producer.snapshot()
            say(f"{action} broker {victim}  (acked so far {acked}, failed {failed})")
            if action in ("kill", "kill-controller"):
                cluster.kill(victim, "KILL")
                time.sleep(rng.uniform(1, 4))
                cluster.start(victim)
            elif action == "pause":
                cluster.kill(victim, "STOP")
                time.sleep(args.pause_seconds)
                cluster.kill(victim, "CONT")
            elif action == "term":
                cluster.stop_broker(victim)
                cluster.start(victim)
            done_actions.append((action, victim))
            say(f"  broker {victim} is back")
    except KeyboardInterrupt:
        say("interrupted; verifying what was written so far")
    finally:
        if net is not None:
            net.heal()
        for b in cluster.status()["brokers"]:
            if b["alive"]:
                try:
                    cluster.kill(b["id"], "CONT")
                except ClusterError:
                    pass
        watch.stop()
        watch_died = watch.died()
        producer.stop()
        producer.join(180)
    replica_problems: list[str] = []
    if not wait_healthy(cluster, args.topic, args.partitions, 120):
        not_replicated.append("NOT REPLICATED: cluster not fully replicated 120 s after the last action")
        say("replicas not compared below the HW: the cluster is not fully replicated")
    else:
        replica_problems = replicas_identical_below_hw(cluster, args.topic, args.partitions, timeout_s=60)
        say("REPLICAS IDENTICAL BELOW THE HW" if not replica_problems else
            f"REPLICAS DIFFER BELOW THE HW (or could not be compared) in {len(replica_problems)} partitions:")
        for msg in replica_problems[:20]:
            say(f"  {msg}")
    acked, failed = producer.snapshot()
    say(f"producer stopped: {producer.sent} sent, {acked} acknowledged, {failed} failed (failures are allowed; losses are not)")
    producer_failures = producer_problems(producer)
    for msg in producer_failures:
        say(msg)
    final = read_final_log(boot, args.topic, args.partitions)
    # A duplicate librdkafka wrote itself (re-sent under a bumped epoch what it had been told
    # was not written, librdkafka issue #4953) is reported, not counted against the brokers.
    account = producer.client_account
    for bump in account.skipped[:10]:  # librdkafka's own account, for a later look at any re-send
        say(f"  librdkafka bumped producer {bump.producer_id} out of epoch {bump.producer_epoch}: {args.topic}-{bump.partition}'s "
            f"sequence {bump.refused_seq} refused as out of order after {bump.failed_error} (sequences "
            f"{bump.failed_first_seq}..{bump.failed_last_seq}), next unacknowledged {bump.next_seq}")
    explain = resend_check(cluster.status(), args.topic, args.partitions, final, account).explain
    verdict = verify(boot, args.topic, args.partitions, producer.acked, final, explain)
    for p in verdict.problems:
        say(f"  {p}")
    for why in verdict.client_resends[:10]:
        say(f"  client re-send: {why}")
    say(f"{len(done_actions)} actions: " + ", ".join(f"{a}({v})" if a not in NET_ACTIONS else a for a, v in done_actions))
    say(("NOTHING ACKNOWLEDGED WAS LOST. " if verdict.ok else "ACKNOWLEDGED DATA WAS LOST OR MOVED. ") + verdict.summary())
    group_problems: list[str] = []
    if group is not None:
        acked_max: dict[int, int] = {}
        for a in list(producer.acked.values()):  # (an offset may be NO_OFFSET, -1: see testing/history.py)
            acked_max[a.partition] = max(acked_max.get(a.partition, -1), a.offset)
        deadline = time.monotonic() + 120
        while not group.caught_up(acked_max) and time.monotonic() < deadline:
            time.sleep(1)
        unconsumed = group.unconsumed(acked_max)
        if unconsumed:
            not_replicated.append("GROUP STALL: the consumer group did not consume every acknowledged record within 120 s of "
                                  "the end: " + "; ".join(unconsumed[:6]))
        group.stop()
        group_problems = group.ledger.problems + group.lost_commits(args.partitions)
        ledger = group.ledger
        say(f"consumer group: {ledger.consumed} records consumed, {ledger.commits} commits acknowledged, "
            f"{ledger.rebalances} assignments; " + ("NO ACKNOWLEDGED COMMIT WAS LOST" if not group_problems else "COMMITS WERE LOST"))
        for p in group_problems[:20]:
            say(f"  {p}")
    # The topic may hold earlier runs' records; this run's values carry its seed.
    prefix = f"chaos{seed}-".encode()
    checked = check(history.events(), final, ours=lambda v: v.startswith(prefix), explain=explain)
    say(checked.report())
    history_path = args.history or (None if checked.ok else os.path.join(args.dir, f"chaos-history-{seed}.jsonl"))
    if history_path:
        history.dump(history_path)
        say(f"history of {len(history)} events written to {history_path}")
    live, lines = liveness_report(watch.stalls, not_replicated, watch_died, args.stall_seconds, args.replication_seconds)
    for line in lines:
        say(line)
    tracebacks = tracebacks_since(marks)
    say("NO TRACEBACK IN THE BROKERS' LOGS" if not tracebacks else f"TRACEBACKS IN THE BROKERS' LOGS: {len(tracebacks)}")
    for tb in tracebacks[:10]:
        say(f"  {tb}")
    safe = verdict.ok and checked.ok and not group_problems and not replica_problems
    return 0 if safe and live and not producer_failures and not tracebacks else 1


if __name__ == "__main__":
    sys.exit(main())
