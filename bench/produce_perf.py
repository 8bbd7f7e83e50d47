"""Producer throughput and latency, in the spirit of Kafka's kafka-producer-perf-test.

    .venv/bin/python bench/produce_perf.py --bootstrap HOST:PORT[,...] --topic T \\
        [--num-records N] [--record-size 100] [--acks all|1] [--partitions 6] \\
        [--replication-factor R] [--min-insync-replicas M] [--max-seconds 60] [--throughput -1]
    .venv/bin/python bench/produce_perf.py --bootstrap ... --compare
    .venv/bin/python bench/produce_perf.py --local 3 --compare   # starts and stops its own cluster

One confluent-kafka (librdkafka) producer sends `--num-records` records of `--record-size`
random (incompressible) bytes as fast as librdkafka's queue takes them (or at
`--throughput` records/s, as Kafka's tool does, to see latency below saturation); it stops at
that count or after `--max-seconds`, whichever comes first, and then waits (bounded) for
the outstanding deliveries. Figures:

  records/s, MB/s   delivered records (and value bytes, 1 MB = 2^20 bytes as in Kafka's tool)
                    over the time from the first produce() to the last delivery report
  p50/p95/p99/max   per-record latency from produce() to its delivery report
                    (librdkafka's Message.latency(): includes time queued in the client,
                    as Kafka's tool does)

The topic is created if missing (`--partitions`, `--replication-factor`,
`--min-insync-replicas`); an existing topic is used as it is. A short warm-up (not counted)
fetches metadata and opens the connections first.

`--compare` measures, in one run against a cluster of at least 3 brokers, on fresh topics
of 6 partitions: RF3 acks=all (min.insync.replicas 2), RF3 acks=1, RF1 acks=1, RF1 acks=all, RF3 acks=all
without idempotence, and prints a
table plus the acks=all-RF3 / RF1 throughput ratio: the price of durable replication.
`--repeat K` runs the scenarios K times round-robin and reports each one's median run.
Note: acks=all runs with enable.idempotence (as Kafka's clients default to), acks=1
without (librdkafka allows idempotence only with acks=all); the producer is otherwise the
same (linger.ms 5, batch.size 1 MB).

Without `--bootstrap`, `--local N` starts a LocalCluster of N brokers (and its own
ZooKeeper) in a temporary directory on free loopback ports and stops it at the end. It then
also prints, per scenario, what the brokers saw (their /metrics before and after, summed):
the produce handler and total times, the leader append -> follower catch-up, the follower
turnaround, event-loop lag, and the event-loop threads' CPU time against their time waiting
for a CPU; and this client process's CPU and CPU wait (issue 13, item 2).
`--no-idempotence`: acks=all without librdkafka's idempotence (single-scenario runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

MB = 1 << 20
PAYLOAD_POOL = 1024  # distinct random payloads, cycled (random per record would cost more than the send)
WARMUP_RECORDS = 1000
FLUSH_GRACE_S = 30.0  # after the time cap, how long outstanding deliveries may still take
TOPIC_READY_TIMEOUT_S = 60.0
COMPARE_PARTITIONS = 6
THROTTLE_EVERY = 100  # records between delivery-report polls / --throughput checks
THROTTLE_STEP_S = 0.002  # with --throughput: check the pace about this often
POLL_WAIT_MIN_S = 0.001  # the shortest wait poll() blocks for (it counts whole milliseconds)


# -- cluster and topic --------------------------------------------------------------------

@contextlib.contextmanager
def bootstrap_servers(args: argparse.Namespace) -> Iterator[str]:
    """`--bootstrap` as given, or a LocalCluster of `--local` brokers for the duration."""
    if args.bootstrap:
        yield args.bootstrap
        return
    from kafkalite.testing.cluster import LocalCluster
    from kafkalite.testing.ports import free_ports

    brokers = args.local
    ports = free_ports(3 * brokers + 1)
    triples = [(ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(brokers)]
    with tempfile.TemporaryDirectory(prefix="kafkalite-bench-") as tmp:
        cluster = LocalCluster(tmp, brokers=brokers, zk_port=ports[-1], ports=triples,
                               overrides={"log.level": "WARNING", "auto.leader.rebalance.enable": False})
        # SIGTERM/SIGINT unwind through `finally` so the processes we started are stopped.
        previous = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            status = cluster.up()
            LOCAL_ADMIN_PORTS[:] = [b["admin_port"] for b in status["brokers"]]
            print(f"# local cluster: {brokers} broker(s) at {status['bootstrap']} in {tmp}", file=sys.stderr)
            yield status["bootstrap"]
        finally:
            cluster.down()
            signal.signal(signal.SIGTERM, previous)


LOCAL_ADMIN_PORTS: list[int] = []  # with --local: the brokers' /metrics, read around each scenario

# Broker-side figures printed after each scenario with --local (summed over the brokers):
# histogram name, label filter, what it is.
BROKER_HISTOGRAMS = (
    ("kafkalite_request_latency_seconds", {"api": "Produce"}, "produce handler (append -> acks met)"),
    ("kafkalite_request_total_seconds", {"api": "PRODUCE"}, "produce read -> answer written"),
    ("kafkalite_replication_catch_up_seconds", {}, "leader append -> follower fetch shows it"),
    ("kafkalite_replica_fetch_turnaround_seconds", {}, "follower: records in -> next fetch out"),
    ("kafkalite_event_loop_lag_seconds", {}, "event-loop lag (10 ms probes)"),
)
BROKER_COUNTERS = ("kafkalite_event_loop_thread_cpu_seconds", "kafkalite_event_loop_thread_cpu_wait_seconds")


def broker_snapshot() -> dict[str, dict[float, float] | float]:
    """Cumulative bucket counts of BROKER_HISTOGRAMS and the BROKER_COUNTERS, summed over the
    local brokers."""
    from prometheus_client.parser import text_string_to_metric_families

    from kafkalite.testing.probes import metrics_text

    out: dict = {}
    for port in LOCAL_ADMIN_PORTS:
        for family in text_string_to_metric_families(metrics_text(port)):
            for s in family.samples:
                for name, labels, _what in BROKER_HISTOGRAMS:
                    if s.name == name + "_bucket" and all(s.labels.get(k) == v for k, v in labels.items()):
                        buckets = out.setdefault(name, {})
                        le = float(s.labels["le"])
                        buckets[le] = buckets.get(le, 0.0) + s.value
                if s.name in (c + "_total" for c in BROKER_COUNTERS):
                    out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def client_scheduler_seconds() -> tuple[float, float]:
    """This process's threads (librdkafka's and ours): seconds on a CPU and seconds runnable
    but waiting for one (Linux schedstat; zeros elsewhere)."""
    run = wait = 0.0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0.0, 0.0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                r, w, _ = f.read().split()
        except (OSError, ValueError):
            continue
        run += int(r) / 1e9
        wait += int(w) / 1e9
    return run, wait


def broker_report(before: dict, after: dict) -> str:
    """What the brokers saw during one scenario: per histogram the bucket bound that holds
    p50 / p99 / p999 (Prometheus buckets: "<= x ms"), and their CPU time against their time
    spent waiting for a CPU."""
    lines = []
    for name, _labels, what in BROKER_HISTOGRAMS:
        a, b = after.get(name, {}), before.get(name, {})
        delta = sorted((le, a[le] - b.get(le, 0.0)) for le in a)
        total = delta[-1][1] if delta else 0
        if not total:
            continue
        qs = []
        for q in (0.5, 0.99, 0.999):
            le = next(le for le, c in delta if c >= q * total)
            qs.append(f"{le * 1000:g}")
        lines.append(f"#   {what:<42} n={total:>7.0f}  p50/p99/p999 <= {' / '.join(qs)} ms")
    run = after.get(BROKER_COUNTERS[0] + "_total", 0) - before.get(BROKER_COUNTERS[0] + "_total", 0)
    wait = after.get(BROKER_COUNTERS[1] + "_total", 0) - before.get(BROKER_COUNTERS[1] + "_total", 0)
    lines.append(f"#   brokers' event-loop threads: {run:.2f} s on a CPU, {wait:.2f} s runnable but waiting for one")
    return "\n".join(lines)


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def broker_count(boot: str) -> int:
    return len(AdminClient({"bootstrap.servers": boot}).list_topics(timeout=30).brokers)


def ensure_topic(boot: str, topic: str, partitions: int, replication_factor: int, min_insync_replicas: int | None) -> int:
    """Create the topic unless it exists; wait until every partition has a leader; return
    the partition count."""
    admin = AdminClient({"bootstrap.servers": boot})
    config = {} if min_insync_replicas is None else {"min.insync.replicas": str(min_insync_replicas)}
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=config)])[topic]
    try:
        future.result(timeout=TOPIC_READY_TIMEOUT_S)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        print(f"# topic {topic} exists; using it as it is", file=sys.stderr)
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions and all(p.leader >= 0 for p in meta.partitions.values()):
            return len(meta.partitions)
        time.sleep(0.1)
    raise SystemExit(f"topic {topic}: partitions without a leader after {TOPIC_READY_TIMEOUT_S:.0f} s")


# -- the measurement ----------------------------------------------------------------------

@dataclass
class Result:
    label: str
    records: int
    failed: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    p999_ms: float
    capped: bool  # stopped by --max-seconds before --num-records


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_producer(boot: str, topic: str, *, num_records: int, record_size: int, acks: str, max_seconds: float,
                 label: str, throughput: float = -1, extra: dict | None = None, linger_ms: float = 5,
                 timeline: bool = False) -> Result:
    config = {
        "bootstrap.servers": boot, "acks": acks, "linger.ms": linger_ms, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 512 * 1024,
        "enable.idempotence": acks == "all", "message.timeout.ms": int((max_seconds + FLUSH_GRACE_S) * 1000),
    }
    config.update(extra or {})
    producer = Producer(config)
    payloads = [os.urandom(record_size) for _ in range(PAYLOAD_POOL)]

    warm_errors: list = []
    for i in range(WARMUP_RECORDS):
        producer.produce(topic, payloads[i % PAYLOAD_POOL], on_delivery=lambda err, msg: err and warm_errors.append(err))
    producer.flush(TOPIC_READY_TIMEOUT_S)
    if warm_errors:
        raise SystemExit(f"{label}: warm-up failed: {warm_errors[0]}")

    before = broker_snapshot() if LOCAL_ADMIN_PORTS else None
    client_before = client_scheduler_seconds()
    latencies: list[float] = []
    failures: list = []
    last_delivery = [0.0]
    sent_at: list[tuple[float, float]] = []  # (when produced, latency), for --timeline

    def on_delivery(err, msg):
        last_delivery[0] = time.perf_counter()
        if err is None:
            latencies.append(msg.latency())
            if timeline:
                sent_at.append((last_delivery[0] - msg.latency(), msg.latency()))
        else:
            failures.append(err)

    produce, poll = producer.produce, producer.poll
    # At a fixed rate, pace in steps of THROTTLE_STEP_S (as Kafka's ThroughputThrottler
    # sleeps once 2 ms are due): checking only every 100 records would send bursts of
    # 20 ms worth at 5,000 records/s, and the latency would measure the bursts.
    check_every = THROTTLE_EVERY if throughput <= 0 else max(1, min(THROTTLE_EVERY, int(throughput * THROTTLE_STEP_S)))
    start = time.perf_counter()
    deadline = start + max_seconds
    sent = 0
    capped = False
    while sent < num_records:
        try:
            produce(topic, payloads[sent % PAYLOAD_POOL], on_delivery=on_delivery)
            sent += 1
        except BufferError:  # librdkafka's queue is full: serve delivery reports, retry
            poll(0.01)
            if time.perf_counter() > deadline:
                capped = True
                break
            continue
        if sent % check_every == 0:
            poll(0)
            now = time.perf_counter()
            if now > deadline:
                capped = True
                break
            # Ahead of --throughput: wait. poll() returns as soon as it served one delivery
            # report, so it is called until the time has come (else the rate overshoots).
            # It waits in whole milliseconds (confluent-kafka truncates the timeout), so a
            # wait under 1 ms is asked as 1 ms: poll(0) would return at once, and the loop
            # would spin on a CPU the brokers need until the time came (0.4 of a core at
            # 500 records/s). Delivery reports still end the wait as they come, so they
            # are served (and their latency taken) as promptly as before.
            while throughput > 0 and start + sent / throughput > now:
                poll(max(start + sent / throughput - now, POLL_WAIT_MIN_S))
                now = time.perf_counter()
    left = producer.flush(FLUSH_GRACE_S)
    elapsed = max(last_delivery[0] - start, 1e-9)
    if left:
        print(f"# {label}: {left} records still undelivered after {FLUSH_GRACE_S:.0f} s; not counted", file=sys.stderr)
    if failures:
        print(f"# {label}: {len(failures)} failed deliveries, first: {failures[0]}", file=sys.stderr)
    if before is not None:
        run, wait = (a - b for a, b in zip(client_scheduler_seconds(), client_before))
        print(f"# {label}, broker side:\n{broker_report(before, broker_snapshot())}\n"
              f"#   this client's threads: {run:.2f} s on a CPU, {wait:.2f} s runnable but waiting for one", file=sys.stderr)
    if timeline:
        print_timeline(label, start, sent_at)
    latencies.sort()
    ms = 1000.0
    return Result(label=label, records=len(latencies), failed=len(failures), seconds=elapsed,
                  records_per_s=len(latencies) / elapsed, mb_per_s=len(latencies) * record_size / MB / elapsed,
                  p50_ms=percentile(latencies, 0.50) * ms, p95_ms=percentile(latencies, 0.95) * ms,
                  p99_ms=percentile(latencies, 0.99) * ms, max_ms=(latencies[-1] if latencies else float("nan")) * ms,
                  p999_ms=percentile(latencies, 0.999) * ms, capped=capped)


def print_timeline(label: str, start: float, sent_at: list[tuple[float, float]], window_s: float = 1.0) -> None:
    """Per `window_s` of the run (by when each record was produced): how many, their p50,
    p99 and max latency, and how many took over 10 ms; then the ten worst 100 ms windows.
    A tail made of a few stalls shows as a few bad windows; a tail from steady queueing
    as every window's p99 being high."""
    def stats(lat: list[float]) -> str:
        lat.sort()
        return (f"n={len(lat):>6} p50 {percentile(lat, 0.5) * 1000:7.1f}  p99 {percentile(lat, 0.99) * 1000:7.1f}  "
                f"max {lat[-1] * 1000:7.1f} ms  >10 ms: {sum(1 for x in lat if x > 0.010):>5}")

    by_window: dict[int, list[float]] = {}
    fine: dict[int, list[float]] = {}
    for at, latency in sent_at:
        by_window.setdefault(int((at - start) / window_s), []).append(latency)
        fine.setdefault(int((at - start) / 0.1), []).append(latency)
    print(f"# {label}: timeline (by time produced)", file=sys.stderr)
    for w in sorted(by_window):
        print(f"#   {w * window_s:6.1f} s  {stats(by_window[w])}", file=sys.stderr)
    worst = sorted(fine, key=lambda w: max(fine[w]), reverse=True)[:10]
    print("#   the ten worst 100 ms windows:", file=sys.stderr)
    for w in sorted(worst):
        print(f"#   {w * 0.1:6.1f} s  {stats(fine[w])}", file=sys.stderr)


# -- output -------------------------------------------------------------------------------

HEADER = (f"{'scenario':<34} {'records':>9} {'records/s':>10} {'MB/s':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
          f"{'p999 ms':>8} {'max ms':>8}")


def row(r: Result) -> str:
    note = " (time cap)" if r.capped else ""
    note += f" ({r.failed} failed)" if r.failed else ""
    return (f"{r.label:<34} {r.records:>9} {r.records_per_s:>10.0f} {r.mb_per_s:>7.2f} {r.p50_ms:>8.1f} "
            f"{r.p95_ms:>8.1f} {r.p99_ms:>8.1f} {r.p999_ms:>8.1f} {r.max_ms:>8.1f}{note}")


def single(args: argparse.Namespace, boot: str) -> list[Result]:
    rf = args.replication_factor or min(3, broker_count(boot))
    ensure_topic(boot, args.topic, args.partitions, rf, args.min_insync_replicas)
    label = f"{args.topic} acks={args.acks}"
    return [run_producer(boot, args.topic, num_records=args.num_records, record_size=args.record_size,
                         acks=args.acks, max_seconds=args.max_seconds, label=label, throughput=args.throughput,
                         linger_ms=args.linger_ms, extra={"enable.idempotence": False} if args.no_idempotence else None,
                         timeline=args.timeline)]


COMPARE_SCENARIOS = (
    # (label, replication factor, min.insync.replicas, acks, extra producer config)
    ("RF3 acks=all min.insync=2", 3, 2, "all", {}),
    ("RF3 acks=1", 3, 1, "1", {}),
    ("RF1 acks=1", 1, 1, "1", {}),
    # The same producer as the first (acks=all, idempotent) without replication: what
    # RF 3 adds to acks=all latency is the difference between the two.
    ("RF1 acks=all", 1, 1, "all", {}),
    # acks=all without idempotence: librdkafka's idempotent producer (5 requests in
    # flight) has tails of its own, even at RF 1 where the broker answers in < 2.5 ms.
    ("RF3 acks=all min.insync=2 no-idem", 3, 2, "all", {"enable.idempotence": False}),
)


def compare(args: argparse.Namespace, boot: str) -> list[Result]:
    """The three scenarios, round-robin `--repeat` times (so a slow moment of a shared
    machine does not land on one scenario only); per scenario the run with the median
    throughput is reported."""
    brokers = broker_count(boot)
    if brokers < 3:
        raise SystemExit(f"--compare needs a cluster of at least 3 brokers; this one has {brokers}")
    run_id = time.strftime("%Y%m%d%H%M%S")
    topics = []
    for i, (_label, rf, min_isr, acks, _extra) in enumerate(COMPARE_SCENARIOS):
        topic = f"{args.topic}-{i}-rf{rf}-acks{acks}-{run_id}"
        ensure_topic(boot, topic, COMPARE_PARTITIONS, rf, min_isr)
        topics.append(topic)
    runs: list[list[Result]] = [[] for _ in COMPARE_SCENARIOS]
    for round_index in range(args.repeat):
        for i, (label, _rf, _min_isr, acks, extra) in enumerate(COMPARE_SCENARIOS):
            r = run_producer(boot, topics[i], num_records=args.num_records, record_size=args.record_size,
                             acks=acks, max_seconds=args.max_seconds, label=label, throughput=args.throughput,
                             linger_ms=args.linger_ms, extra=extra)
            runs[i].append(r)
            print(f"round {round_index + 1}: {row(r)}", file=sys.stderr)
    return [sorted(rs, key=lambda r: r.records_per_s)[len(rs) // 2] for rs in runs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap", help="bootstrap servers of a running cluster")
    where.add_argument("--local", type=int, metavar="N", help="start a local cluster of N brokers for this run")
    parser.add_argument("--topic", default="perf-produce", help="topic (with --compare: the prefix of the fresh topics)")
    parser.add_argument("--num-records", type=int, default=500_000)
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record (no key)")
    parser.add_argument("--acks", choices=["all", "1"], default="all")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=None, help="default: min(3, brokers)")
    parser.add_argument("--min-insync-replicas", type=int, default=None, help="topic config; default: the broker's")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="stop producing after this long (per scenario)")
    parser.add_argument("--throughput", type=float, default=-1,
                        help="records/s to aim at (-1: as fast as possible); latency is only meaningful below saturation")
    parser.add_argument("--linger-ms", type=float, default=5,
                        help="librdkafka linger.ms (default 5; 0 sends each record at once: small-batch latency)")
    parser.add_argument("--no-idempotence", action="store_true", help="acks=all without enable.idempotence (librdkafka then "
                        "keeps up to 1,000,000 requests in flight instead of 5)")
    parser.add_argument("--compare", action="store_true", help="RF3 acks=all vs RF3 acks=1 vs RF1 acks=1 vs RF1 acks=all vs RF3 acks=all not idempotent (needs >= 3 brokers)")
    parser.add_argument("--repeat", type=int, default=1, help="with --compare: rounds over the scenarios; the median is reported")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    parser.add_argument("--timeline", action="store_true", help="(single-scenario runs) latency per second of the run, "
                        "and the ten worst 100 ms windows: stalls or steady queueing")
    args = parser.parse_args(argv)
    if args.local is not None and args.local < 1:
        parser.error("--local needs at least 1 broker")
    if args.num_records < 1 or args.record_size < 1 or args.max_seconds <= 0 or args.repeat < 1:
        parser.error("--num-records, --record-size, --max-seconds and --repeat must be positive")

    with bootstrap_servers(args) as boot:
        results = compare(args, boot) if args.compare else single(args, boot)
    print(f"# {args.record_size}-byte records, confluent-kafka {__import__('confluent_kafka').version()} "
          f"(librdkafka {__import__('confluent_kafka').libversion()[0]})")
    print(HEADER)
    for r in results:
        print(row(r))
    if args.compare:
        ratio = results[0].records_per_s / results[2].records_per_s
        print(f"throughput ratio RF3 acks=all / RF1 acks=1: {ratio:.2f}")
    if args.json:
        print(json.dumps([asdict(r) for r in results]))
    return 0 if all(r.failed == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
