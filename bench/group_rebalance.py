"""Consumer-group rebalance time: confluent-kafka consumers subscribing to one topic.

    .venv/bin/python bench/group_rebalance.py                      # 10 members, 60 partitions, range
    .venv/bin/python bench/group_rebalance.py --repeat 5 --strategy cooperative-sticky
    .venv/bin/python bench/group_rebalance.py --initial-rebalance-delay-ms 3000   # Kafka's default

Starts its own cluster (ZooKeeper and `--brokers` brokers, default 3, on free loopback ports
in a temporary directory, stopped at the end, also on SIGTERM), or uses `--bootstrap`
(then the broker settings are that cluster's own). It creates a topic of `--partitions`
partitions (RF min(3, brokers)), creates `__consumer_offsets` with a warm-up FindCoordinator
(not counted), and then, per round (`--repeat`, each round a fresh group):

  (a) initial join   `--members` consumers subscribe at once; from the first subscribe() until
                     every member has its assignment and every partition is assigned exactly once
  (b) one joins      one more consumer subscribes; from its subscribe() until every member
                     (old and new) holds the new assignment, again every partition exactly once
  (c) one leaves     member 0 (one of the first ten) calls close(), which sends LeaveGroup;
                     from close() until the remaining members hold a complete assignment

"Holds the new assignment" is observed in the members' rebalance callbacks (on_assign,
on_revoke, on_lost), stamped with time.monotonic() in the member (CLOCK_MONOTONIC, shared by
the processes of one machine). The phase is done at the first callback after which the live
members' partitions are disjoint, cover the topic and are balanced (sizes differ by at most
one, as both strategies produce for one topic) and, for the eager range strategy, every live
member has had an on_assign since the phase began. After each phase the group must stay
unchanged for `--settle-s` plus a pause that moves the next phase's start through the
members' heartbeat cycle (round r of R: (r + 1/2) / R of `heartbeat.interval.ms`); a callback
in that time is reported.

Each member is its own process (multiprocessing, spawn), driven over a pipe. Threads would
share one GIL: the members' callbacks and poll loops would queue behind one another, and the
figure would partly measure Python in the benchmark process. With processes each member is an
independent client, as in a real deployment (11 small processes on this machine's 2 cores).

What the times are made of: a member learns that the group is rebalancing from its next
heartbeat response (`heartbeat.interval.ms`, librdkafka's default 3000 ms), so (b) and (c) are
up to one heartbeat interval plus JoinGroup/SyncGroup round trips; (a) is bounded below by the
broker's `group.initial.rebalance.delay.ms` (KIP-134; Kafka's default 3000 ms, which this
benchmark sets to `--initial-rebalance-delay-ms`, default 0; it is printed). Every wait is
bounded by `--max-seconds`; a phase that does not complete is reported with the members'
assignments at that moment.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from local_cluster import local_cluster, settings_line
from produce_perf import ensure_topic

from kafkalite.testing.probes import wait_fully_replicated

TOPIC = "rebalance"
OFFSETS_TOPIC = "__consumer_offsets"
POLL_S = 0.05  # a member's poll() timeout: rebalance callbacks wake it at once; commands wait at most this
MEMBER_LIFETIME_S = 3600.0  # a member process exits by itself after this, whatever happens to the parent
WARMUP_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 60.0
# Client settings printed with the results; librdkafka's defaults unless given.
SESSION_TIMEOUT_MS = 45000
HEARTBEAT_INTERVAL_MS = 3000
MAX_POLL_INTERVAL_MS = 300000  # also the JoinGroup rebalance timeout
STRATEGIES = {"range": "eager", "roundrobin": "eager", "cooperative-sticky": "cooperative"}


# -- a member (runs in its own process) ---------------------------------------------------

def member_main(index: int, conn: Connection) -> None:
    """Commands from the parent: ("open", config, topic), ("subscribe",), ("close",), ("exit",).
    Events to the parent: (kind, index, monotonic time, sorted partitions held)."""
    consumer: Consumer | None = None
    held: set[int] = set()
    cooperative = False
    subscribed = False
    topic = ""

    def send(kind: str, stamp: float) -> None:
        conn.send((kind, index, stamp, sorted(held)))

    def on_assign(c, partitions):
        stamp = time.monotonic()
        if not cooperative:
            held.clear()
        held.update(p.partition for p in partitions)
        send("assign", stamp)

    def on_revoke(c, partitions):
        stamp = time.monotonic()
        if cooperative:
            held.difference_update(p.partition for p in partitions)
        else:
            held.clear()
        send("revoke", stamp)

    def on_lost(c, partitions):
        stamp = time.monotonic()
        held.clear()
        send("lost", stamp)

    deadline = time.monotonic() + MEMBER_LIFETIME_S
    try:
        while time.monotonic() < deadline:
            if conn.poll(0.0 if subscribed else POLL_S):
                command = conn.recv()
                if command[0] == "open":
                    _, config, topic = command
                    cooperative = STRATEGIES[config["partition.assignment.strategy"]] == "cooperative"
                    consumer, held, subscribed = Consumer(config), set(), False
                elif command[0] == "subscribe":
                    stamp = time.monotonic()
                    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
                    subscribed = True
                    send("subscribed", stamp)
                elif command[0] == "close":
                    stamp = time.monotonic()
                    send("closing", stamp)
                    consumer.close()
                    consumer, subscribed = None, False
                    held.clear()
                    send("closed", time.monotonic())
                elif command[0] == "exit":
                    return
            if subscribed:
                msg = consumer.poll(POLL_S)
                if msg is not None and msg.error() is not None:
                    conn.send(("error", index, time.monotonic(), str(msg.error())))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the parent is gone or stopping us
    finally:
        if consumer is not None:
            consumer.close()


# -- the parent's view of the group -------------------------------------------------------

class GroupView:
    """What the members have reported: partitions held, and when each last had on_assign."""

    def __init__(self, conns: list[Connection], partitions: int, eager: bool) -> None:
        self.conns = conns
        self.partitions = partitions
        self.eager = eager
        self.held: dict[int, list[int]] = {}
        self.last_assign: dict[int, float] = {}
        self.stamps: dict[tuple[str, int], float] = {}
        self.callbacks = 0
        self.errors: list[str] = []

    def next_event(self, deadline: float) -> tuple | None:
        """Apply and return the next event, or None at the deadline."""
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            return None
        ready = wait(self.conns, timeout)
        if not ready:
            return None
        event = ready[0].recv()
        kind, index, stamp, payload = event
        if kind == "error":
            self.errors.append(f"member {index}: {payload}")
            return event
        self.stamps[(kind, index)] = stamp
        self.held[index] = payload
        if kind in ("assign", "revoke", "lost"):
            self.callbacks += 1
        if kind == "assign":
            self.last_assign[index] = stamp
        return event

    def settled(self, live: set[int], since: float) -> bool:
        """Every partition held by exactly one live member, sizes within one, and (eager)
        every live member assigned since `since`."""
        held = [self.held.get(i) for i in live]
        if any(h is None for h in held):
            return False
        flat = sorted(p for h in held for p in h)
        if flat != list(range(self.partitions)):
            return False
        sizes = [len(h) for h in held]
        if max(sizes) - min(sizes) > 1:
            return False
        return not self.eager or all(self.last_assign.get(i, -1.0) >= since for i in live)

    def describe(self, live: set[int]) -> str:
        return "; ".join(f"member {i}: {self.held.get(i)}" for i in sorted(live))


def wait_phase(view: GroupView, live: set[int], start_kind: str, starters: set[int], deadline: float) -> dict:
    """Until the phase's start events (`start_kind` from every member of `starters`) are in
    and the live members are settled; returns {"seconds", "callbacks"} or {"error"}."""
    callbacks_before = view.callbacks
    since = None
    first_revoke = None  # the first live member told to give partitions up: it has noticed the rebalance
    while True:
        if since is None and all((start_kind, i) in view.stamps for i in starters):
            since = min(view.stamps[(start_kind, i)] for i in starters)
        event = view.next_event(deadline)
        if event is None:
            return {"error": f"not complete after --max-seconds: {view.describe(live)}"}
        if since is None and all((start_kind, i) in view.stamps for i in starters):
            since = min(view.stamps[(start_kind, i)] for i in starters)
        if event[0] == "revoke" and event[1] in live and first_revoke is None:
            first_revoke = event[2]
        if since is not None and view.settled(live, since):
            return {"seconds": event[2] - since, "callbacks": view.callbacks - callbacks_before,
                    "spread_ms": 1000 * (max(view.stamps[(start_kind, i)] for i in starters) - since),
                    "after_revoke_ms": None if first_revoke is None else 1000 * (event[2] - first_revoke)}


def hold_still(view: GroupView, live: set[int], settle_s: float) -> str | None:
    """Events during `settle_s` after a phase; a complaint if the assignment moved (a
    cooperative member's late on_assign with nothing new is not a move)."""
    held = {i: view.held.get(i) for i in live}
    deadline = time.monotonic() + settle_s
    moved = []
    while (event := view.next_event(deadline)) is not None:
        if event[0] in ("assign", "revoke", "lost") and event[1] in live and event[3] != held[event[1]]:
            moved.append(f"{event[0]} member {event[1]} {held[event[1]]} -> {event[3]}")
            held[event[1]] = event[3]
    if moved:
        return f"assignment changed after the phase completed: {', '.join(moved)}"
    return None


# -- one round ----------------------------------------------------------------------------

def client_config(boot: str, group: str, index: int, args: argparse.Namespace) -> dict[str, Any]:
    return {"bootstrap.servers": boot, "group.id": group, "client.id": f"member-{index}",
            "partition.assignment.strategy": args.strategy, "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": args.heartbeat_interval_ms, "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
            "enable.auto.commit": False, "auto.offset.reset": "latest", **({"debug": args.client_debug} if args.client_debug else {})}


def run_round(boot: str, round_index: int, conns: list[Connection], args: argparse.Namespace) -> dict:
    group = f"rebalance-{os.getpid()}-{round_index}"
    members = list(range(args.members))
    joiner = args.members
    view = GroupView(conns, args.partitions, STRATEGIES[args.strategy] == "eager")
    for i, conn in enumerate(conns):
        conn.send(("open", client_config(boot, group, i, args), TOPIC))
    result: dict[str, Any] = {"round": round_index + 1, "group": group}
    closing: set[int] = set()
    try:
        for i in members:
            conns[i].send(("subscribe",))
        live = set(members)
        phases = (("initial", "subscribed", set(members), lambda: None),
                  ("join", "subscribed", {joiner}, lambda: (conns[joiner].send(("subscribe",)), live.add(joiner))),
                  ("leave", "closing", {0}, lambda: (conns[0].send(("close",)), closing.add(0), live.discard(0))))
        for n, (name, start_kind, starters, start) in enumerate(phases):
            start()
            outcome = wait_phase(view, set(live), start_kind, starters, time.monotonic() + args.max_seconds)
            result[name] = outcome
            if "error" in outcome:
                break
            last = n == len(phases) - 1
            complaint = hold_still(view, set(live), args.settle_s + (0.0 if last else heartbeat_offset_s(round_index, args)))
            if complaint:
                outcome["after"] = complaint
        result["coordinator"] = coordinator_of(boot, group)
        result["errors"] = view.errors
    finally:
        close_all(view, closing)
    return result


def heartbeat_offset_s(round_index: int, args: argparse.Namespace) -> float:
    """Members heartbeat right after SyncGroup and then every heartbeat.interval.ms, and they
    learn of a rebalance from a heartbeat: a fixed pause before (b) and (c) would always land
    at the same point of that cycle. Round r of R waits (r + 1/2) / R of an interval more, so
    the rounds sample the cycle evenly."""
    return (round_index + 0.5) / args.repeat * args.heartbeat_interval_ms / 1000


def close_all(view: GroupView, closing: set[int]) -> None:
    """Close every member not closing yet, at once; wait (bounded) until all have closed."""
    for i in range(len(view.conns)):
        if i not in closing:
            view.conns[i].send(("close",))
    deadline = time.monotonic() + CLOSE_TIMEOUT_S
    while any(("closed", i) not in view.stamps for i in range(len(view.conns))):
        if view.next_event(deadline) is None:
            open_ = [i for i in range(len(view.conns)) if ("closed", i) not in view.stamps]
            raise SystemExit(f"members {open_} did not close within {CLOSE_TIMEOUT_S:.0f} s")


def coordinator_of(boot: str, group: str) -> int | None:
    admin = AdminClient({"bootstrap.servers": boot})  # kept referenced until the future resolves
    try:
        return admin.describe_consumer_groups([group])[group].result(timeout=10).coordinator.id
    except (KafkaException, TimeoutError):
        return None


# -- set-up ---------------------------------------------------------------------------------

def warm_up(boot: str) -> None:
    """The first FindCoordinator creates __consumer_offsets; wait until a group's committed
    offsets can be read, so that the creation is not part of the first round."""
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "rebalance-warm-up"})
    deadline = time.monotonic() + WARMUP_TIMEOUT_S
    try:
        while True:
            try:
                consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
                return
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise SystemExit(f"warm-up: no group coordinator after {WARMUP_TIMEOUT_S:.0f} s: {e}") from None
                time.sleep(0.2)
    finally:
        consumer.close()


def start_members(count: int) -> tuple[list[multiprocessing.Process], list[Connection]]:
    context = multiprocessing.get_context("spawn")  # no fork of a process that runs librdkafka threads
    procs, conns = [], []
    for i in range(count):
        parent_end, child_end = context.Pipe()
        proc = context.Process(target=member_main, args=(i, child_end), name=f"member-{i}", daemon=True)
        proc.start()
        child_end.close()
        procs.append(proc)
        conns.append(parent_end)
    return procs, conns


def stop_members(procs: list[multiprocessing.Process], conns: list[Connection]) -> None:
    for conn in conns:
        try:
            conn.send(("exit",))
        except (BrokenPipeError, OSError):
            pass
    for proc in procs:
        proc.join(10)
        if proc.is_alive():
            proc.terminate()  # our own child, by its Process handle
            proc.join(5)


def measure(boot: str, args: argparse.Namespace, cluster=None) -> list[dict]:
    rf = min(3, len(AdminClient({"bootstrap.servers": boot}).list_topics(timeout=30).brokers))
    ensure_topic(boot, TOPIC, args.partitions, rf, None)
    warm_up(boot)
    if cluster is not None:
        wait_fully_replicated(cluster, OFFSETS_TOPIC, args.offsets_partitions, timeout_s=120)
    procs, conns = start_members(args.members + 1)
    try:
        rounds = []
        for r in range(args.repeat):
            result = run_round(boot, r, conns, args)
            print(f"# round {r + 1}: " + ", ".join(_cell(result.get(k)) for k in ("initial", "join", "leave")),
                  file=sys.stderr)
            rounds.append(result)
        return rounds
    finally:
        stop_members(procs, conns)


# -- output -------------------------------------------------------------------------------

def _cell(outcome: dict | None) -> str:
    if outcome is None:
        return "-"
    if "error" in outcome:
        return "FAIL"
    return f"{outcome['seconds']:.3f}"


PHASES = ("initial", "join", "leave")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def report(rounds: list[dict], args: argparse.Namespace, broker_settings: str) -> bool:
    eager = STRATEGIES[args.strategy]
    print(f"\ngroup rebalance: {args.members} members (+1 joining, then member 0 leaving), one topic of "
          f"{args.partitions} partitions, {args.strategy} ({eager})")
    print(f"broker settings: {broker_settings}")
    print(f"client settings: session.timeout.ms={args.session_timeout_ms}, heartbeat.interval.ms="
          f"{args.heartbeat_interval_ms}, max.poll.interval.ms={MAX_POLL_INTERVAL_MS}; one process per member")
    print(f"{'round':>5} {'coordinator':>11} {'(a) initial join s':>18} {'(b) +1 member s':>15} "
          f"{'(c) -1 member s':>15} {'after 1st revoke ms a/b/c':>25} {'callbacks a/b/c':>15} {'subscribe spread ms':>19}")
    ok = True
    for r in rounds:
        callbacks = "/".join(str(r.get(k, {}).get("callbacks", "-")) for k in PHASES)
        after_revoke = "/".join(_ms(r.get(k, {}).get("after_revoke_ms")) for k in PHASES)
        spread = r.get("initial", {}).get("spread_ms")
        print(f"{r['round']:>5} {r.get('coordinator') or '?':>11} {_cell(r.get('initial')):>18} "
              f"{_cell(r.get('join')):>15} {_cell(r.get('leave')):>15} {after_revoke:>25} {callbacks:>15} "
              f"{'-' if spread is None else f'{spread:.1f}':>19}")
        for k in PHASES:
            outcome = r.get(k)
            if outcome is None or "error" in outcome:
                ok = False
                if outcome is not None:
                    print(f"      {k}: {outcome['error']}")
            elif "after" in outcome:
                print(f"      {k}: {outcome['after']}")
        for e in r.get("errors", []):
            print(f"      consumer error: {e}")
    medians = {}
    for k in PHASES:
        values = [r[k]["seconds"] for r in rounds if "seconds" in r.get(k, {})]
        medians[k] = statistics.median(values) if values else None
    revoke_medians = []
    for k in PHASES:
        values = [r[k]["after_revoke_ms"] for r in rounds if r.get(k, {}).get("after_revoke_ms") is not None]
        revoke_medians.append(statistics.median(values) if values else None)
    print(f"{'median':>5} {'':>11} " + " ".join(
        f"{'-' if medians[k] is None else f'{medians[k]:.3f}':>{w}}" for k, w in (("initial", 18), ("join", 15), ("leave", 15)))
        + f" {'/'.join(_ms(v) for v in revoke_medians):>25}")
    print("after 1st revoke: from the first on_revoke of a live member (it has noticed the rebalance, usually from a "
          "heartbeat) to the end of the phase")
    print(f"every partition assigned exactly once after every phase: {'OK' if ok else 'FAIL'}")
    if args.json:
        print(json.dumps({"members": args.members, "partitions": args.partitions, "strategy": args.strategy,
                          "broker_settings": broker_settings, "session_timeout_ms": args.session_timeout_ms,
                          "heartbeat_interval_ms": args.heartbeat_interval_ms, "rounds": rounds, "median_s": medians,
                          "ok": ok}))
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="HOST:PORT,... of a running cluster (default: start 3 brokers)")
    parser.add_argument("--brokers", type=int, default=3, help="brokers of the cluster started")
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=60)
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="range", help="partition.assignment.strategy")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, each with a fresh group")
    parser.add_argument("--initial-rebalance-delay-ms", type=int, default=0,
                        help="the broker's group.initial.rebalance.delay.ms (Kafka's default 3000)")
    parser.add_argument("--offsets-partitions", type=int, default=50, help="the broker's offsets.topic.num.partitions")
    parser.add_argument("--session-timeout-ms", type=int, default=SESSION_TIMEOUT_MS)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=HEARTBEAT_INTERVAL_MS)
    parser.add_argument("--settle-s", type=float, default=1.0, help="after each phase, the assignment must hold this long")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="bound of each phase")
    parser.add_argument("--client-debug", help="librdkafka debug contexts for the members (e.g. cgrp), logged to stderr")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = parser.parse_args(argv)
    if min(args.members, args.partitions, args.repeat, args.brokers) < 1 or args.max_seconds <= 0 or args.settle_s < 0:
        parser.error("--members, --partitions, --repeat, --brokers and --max-seconds must be positive")
    if args.bootstrap:
        rounds = measure(args.bootstrap, args)
        return 0 if report(rounds, args, f"those of the cluster at {args.bootstrap}") else 1
    overrides = {"group.initial.rebalance.delay.ms": args.initial_rebalance_delay_ms,
                 "offsets.topic.num.partitions": args.offsets_partitions}
    with local_cluster(args.brokers, overrides, "kafkalite-group-rebalance-") as cluster:
        rounds = measure(cluster.status()["bootstrap"], args, cluster)
    defaults = "group.min.session.timeout.ms=6000, group.max.session.timeout.ms=1800000 (defaults)"
    return 0 if report(rounds, args, f"{settings_line(overrides)}, {defaults}; {args.brokers} brokers") else 1


if __name__ == "__main__":
    sys.exit(main())
