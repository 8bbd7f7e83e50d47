"""`bin/chaos`: kill, pause and restart random brokers of a running `bin/cluster` while a
verifying producer writes with acks=all, then check that nothing acknowledged was lost.

At most one broker is down or paused at a time, so with RF 3 and min.insync.replicas=2 the
guarantee of DESIGN.md section 7 applies: every acknowledged write must survive.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from kafkalite.testing.cluster import ClusterError, LocalCluster
from kafkalite.testing.probes import wait_fully_replicated
from kafkalite.testing.verify import VerifyingProducer, verify

ACTIONS = ("kill", "pause", "term", "kill-controller")


def say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def ensure_topic(boot: str, topic: str, partitions: int, rf: int, min_isr: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": boot})
    if topic in admin.list_topics(timeout=10).topics:
        return
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf,
                                           config={"min.insync.replicas": str(min_isr)})]).values():
        f.result(timeout=30)


def wait_healthy(cluster: LocalCluster, topic: str, partitions: int, timeout_s: float) -> bool:
    try:
        wait_fully_replicated(cluster, topic, partitions, timeout_s)
        return True
    except AssertionError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bin/chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=".cluster")
    ap.add_argument("--seconds", type=float, default=60, help="how long to run the chaos (default 60)")
    ap.add_argument("--interval", type=float, default=8, help="seconds between actions (default 8)")
    ap.add_argument("--pause-seconds", type=float, default=9, help="SIGSTOP duration; past the session timeout makes a zombie")
    ap.add_argument("--actions", default=",".join(ACTIONS), help=f"comma-separated subset of {','.join(ACTIONS)}")
    ap.add_argument("--topic", default="chaos")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=float, default=500, help="messages per second")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    actions = [a.strip() for a in args.actions.split(",") if a.strip()]
    bad = [a for a in actions if a not in ACTIONS]
    if bad or not actions:
        print(f"bin/chaos: unknown action(s) {bad}; choose from {', '.join(ACTIONS)}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    try:
        cluster = LocalCluster.load(args.dir)
        status = cluster.status()
    except ClusterError as e:
        print(f"bin/chaos: {e}", file=sys.stderr)
        return 1
    down = [b["id"] for b in status["brokers"] if not b["alive"]]
    if down:
        print(f"bin/chaos: brokers {down} are not running; `bin/cluster start ID` them first", file=sys.stderr)
        return 1
    n = len(status["brokers"])
    rf = min(3, n)
    min_isr = 2 if rf >= 3 else 1
    boot = status["bootstrap"]
    say(f"seed {seed}; {n} brokers; topic {args.topic} ({args.partitions} partitions, RF {rf}, min.insync.replicas {min_isr})")
    ensure_topic(boot, args.topic, args.partitions, rf, min_isr)
    producer = VerifyingProducer(boot, args.topic, rate_per_s=args.rate, seconds_max=args.seconds + 300,
                                 prefix=f"chaos{seed}")
    producer.start()
    done_actions = []
    try:
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            time.sleep(min(args.interval, max(end - time.monotonic(), 0)))
            if time.monotonic() >= end:
                break
            if not wait_healthy(cluster, args.topic, args.partitions, 60):
                say("cluster not fully replicated after 60 s; waiting before the next action")
                continue
            action = rng.choice(actions)
            st = cluster.status()
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
        for b in cluster.status()["brokers"]:
            if b["alive"]:
                try:
                    cluster.kill(b["id"], "CONT")
                except ClusterError:
                    pass
        producer.stop()
        producer.join(180)
    wait_healthy(cluster, args.topic, args.partitions, 120)
    acked, failed = producer.snapshot()
    say(f"producer stopped: {producer.sent} sent, {acked} acknowledged, {failed} failed (failures are allowed; losses are not)")
    verdict = verify(boot, args.topic, args.partitions, producer.acked)
    for p in verdict.problems:
        say(f"  {p}")
    say(f"{len(done_actions)} actions: " + ", ".join(f"{a}({v})" for a, v in done_actions))
    say(("NOTHING ACKNOWLEDGED WAS LOST. " if verdict.ok else "ACKNOWLEDGED DATA WAS LOST OR MOVED. ") + verdict.summary())
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
