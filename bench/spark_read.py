"""Spark batch read throughput of the `kafkalite` PySpark data source, against a plain
confluent-kafka consumer reading the same records in the same run.

    .venv/bin/python bench/spark_read.py [--num-records 1000000] [--repeat 3] [--json]
    .venv/bin/python bench/spark_read.py --bootstrap HOST:PORT[,...] [--topic T] ...

Unless `--bootstrap` is given, a local cluster of `--brokers` brokers (default 1) is started
for the run and stopped at the end. A fresh topic (`--partitions` 6, `--replication-factor`
1) is filled with `--num-records` records of `--record-size` random value bytes, each with a
key and two headers (confluent-kafka producer, linger.ms 5, batch.size 1 MB), bounded by
`--max-seconds`. Then, per round (`--repeat` rounds, each scenario once per round so a slow
moment of a shared machine is spread over them):

  consumer        bench/consume_perf.py's consume(): one confluent-kafka consumer assigned
                  every partition from the beginning, reading every record (the baseline),
                  with the fetch.queue.backoff.ms the Spark source's consumers use (10 ms;
                  librdkafka's default 1000 ms pauses a fast reader, see kafkalite.spark.client)
  spark count     spark.read.format("kafkalite")...load().count()
  spark parquet   the same read written with .write.parquet() into a temporary directory
  spark count minPartitions=N
                  count() with minPartitions (default 2x the partitions, since a value at or
                  below the partition count splits nothing); `--min-partitions 0` skips it

Figures: records/s and MB/s (MB = 2^20 bytes of key + value, as in Kafka's tools) over the
whole operation, i.e. for Spark including the driver's planning (metadata, watermarks) and
task scheduling, and each Spark figure as a % of the consumer's in the same round. Each
Spark read checks its count against what was produced. SparkSession start-up (`--master`,
default local[2]) is printed but not part of any rate, and one untimed warm-up count()
runs first (JVM JIT, Python worker start-up). With `--repeat` every round is printed and
the medians last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import Producer
from consume_perf import consume
from local_cluster import local_cluster
from produce_perf import MB, ensure_topic

from kafkalite.spark.client import FETCH_QUEUE_BACKOFF_MS

PAYLOAD_POOL = 1024  # distinct random values, cycled
POLL_EVERY = 1000  # produce() calls between delivery-report polls
FLUSH_GRACE_S = 60.0
BASELINE = "consumer"
# The baseline consumer waits between fetches as the Spark source's consumers do (see
# kafkalite.spark.client.FETCH_QUEUE_BACKOFF_MS), so the comparison is of the read paths.
BASELINE_FETCH = {"fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS}


# -- the data --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Produced:
    records: int
    bytes: int  # key + value, as the consumer baseline counts them
    seconds: float


def produce(boot: str, topic: str, num_records: int, record_size: int, max_seconds: float) -> Produced:
    """`num_records` records with a key and two headers, as fast as librdkafka takes them,
    stopping early at `max_seconds`; returns what was acknowledged."""
    producer = Producer({"bootstrap.servers": boot, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 512 * 1024,
                         "message.timeout.ms": int((max_seconds + FLUSH_GRACE_S) * 1000)})
    payloads = [os.urandom(record_size) for _ in range(PAYLOAD_POOL)]
    acked = [0, 0]
    failed: list = []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)
            return
        acked[0] += 1
        acked[1] += len(msg.key()) + len(msg.value())

    start = time.perf_counter()
    deadline = start + max_seconds
    sent = 0
    while sent < num_records and time.perf_counter() < deadline:
        try:
            producer.produce(topic, payloads[sent % PAYLOAD_POOL], key=b"key-%06d" % (sent % 100_000),
                             headers=[("source", b"spark-read-bench"), ("seq", b"%d" % sent)], on_delivery=on_delivery)
            sent += 1
        except BufferError:  # librdkafka's queue is full: serve delivery reports, retry
            producer.poll(0.01)
            continue
        if sent % POLL_EVERY == 0:
            producer.poll(0)
    left = producer.flush(FLUSH_GRACE_S)
    seconds = time.perf_counter() - start
    if failed or left:
        raise SystemExit(f"produce: {len(failed)} failed, {left} undelivered; first error: {failed[:1]}")
    if sent < num_records:
        print(f"# produce: time cap after {sent} of {num_records} records", file=sys.stderr)
    return Produced(acked[0], acked[1], seconds)


# -- Spark -----------------------------------------------------------------------------------

def spark_session(master: str, confs: list[tuple[str, str]]):
    """A local SparkSession as the data source's tests build one: loopback, this interpreter
    for Python workers, no UI."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from kafkalite.spark import KafkaliteDataSource

    builder = (SparkSession.builder.master(master).appName("kafkalite-bench-spark-read")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.showConsoleProgress", "false"))
    for key, value in confs:
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(KafkaliteDataSource)
    return session


def reader(spark, boot: str, topic: str, options: dict[str, str]):
    read = (spark.read.format("kafkalite").option("kafka.bootstrap.servers", boot).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("endingOffsets", "latest"))
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


# -- the measurement -------------------------------------------------------------------------

@dataclass
class Figure:
    scenario: str
    round: int
    records: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    pct_of_baseline: float | None = None


def timed(fn: Callable[[], int]) -> tuple[int, float]:
    start = time.perf_counter()
    records = fn()
    return records, time.perf_counter() - start


def scenarios(spark, boot: str, topic: str, produced: Produced, options: dict[str, str], min_partitions: int,
              out_dir: str, max_seconds: float) -> list[tuple[str, Callable[[], tuple[int, float]]]]:
    """(name, run) pairs; run returns (records read, seconds)."""

    def baseline() -> tuple[int, float]:
        r = consume(boot, topic, produced.records, max_seconds, extra=BASELINE_FETCH)
        if r["offset_gaps"] or r["capped"]:
            raise SystemExit(f"consumer: {r['offset_gaps']} offset gaps, capped={r['capped']}")
        return r["records"], r["seconds"]

    writes = [0]

    def parquet() -> int:
        writes[0] += 1
        path = os.path.join(out_dir, f"write-{writes[0]}")
        reader(spark, boot, topic, options).write.parquet(path)
        return path

    def spark_parquet() -> tuple[int, float]:
        path, seconds = timed(parquet)
        return spark.read.parquet(path).count(), seconds  # the check, untimed

    result = [(BASELINE, baseline),
              ("spark count", lambda: timed(lambda: reader(spark, boot, topic, options).count())),
              ("spark parquet", spark_parquet)]
    if min_partitions:
        split = {**options, "minPartitions": str(min_partitions)}
        result.append((f"spark count minPartitions={min_partitions}",
                       lambda: timed(lambda: reader(spark, boot, topic, split).count())))
    return result


def run_rounds(args: argparse.Namespace, boot: str) -> tuple[Produced, float, list[Figure]]:
    topic = args.topic or f"bench-spark-read-{time.strftime('%Y%m%d%H%M%S')}"
    ensure_topic(boot, topic, args.partitions, args.replication_factor, None)
    produced = produce(boot, topic, args.num_records, args.record_size, args.max_seconds)
    print(f"# produced {produced.records} records to {topic} in {produced.seconds:.1f} s", file=sys.stderr)

    start = time.perf_counter()
    spark = spark_session(args.master, args.conf)
    session_s = time.perf_counter() - start
    print(f"# SparkSession {args.master}: {session_s:.1f} s (not in any rate)", file=sys.stderr)
    options = dict(args.option)
    try:
        warm, warm_s = timed(lambda: reader(spark, boot, topic, options).count())
        print(f"# warm-up count() (untimed): {warm} records in {warm_s:.1f} s", file=sys.stderr)
        figures: list[Figure] = []
        with tempfile.TemporaryDirectory(prefix="kafkalite-bench-spark-") as out_dir:
            runs = scenarios(spark, boot, topic, produced, options, args.min_partitions, out_dir, args.max_seconds)
            for round_index in range(1, args.repeat + 1):
                for name, run in runs:
                    records, seconds = run()
                    if records != produced.records:
                        raise SystemExit(f"{name}: read {records} records, {produced.records} were produced")
                    f = Figure(name, round_index, records, seconds, records / seconds,
                               produced.bytes / MB / seconds)
                    figures.append(f)
                    print(f"round {round_index}: {f.scenario:<34} {f.records_per_s:>10.0f} records/s "
                          f"{f.mb_per_s:>7.2f} MB/s ({f.seconds:.2f} s)", file=sys.stderr)
                base = next(f for f in figures if f.round == round_index and f.scenario == BASELINE)
                for f in figures:
                    if f.round == round_index:
                        f.pct_of_baseline = 100 * f.records_per_s / base.records_per_s
    finally:
        spark.stop()
    return produced, session_s, figures


def medians(figures: list[Figure]) -> list[Figure]:
    names = list(dict.fromkeys(f.scenario for f in figures))
    result = []
    for name in names:
        fs = [f for f in figures if f.scenario == name]
        result.append(Figure(name, 0, fs[0].records, statistics.median(f.seconds for f in fs),
                             statistics.median(f.records_per_s for f in fs), statistics.median(f.mb_per_s for f in fs),
                             statistics.median(f.pct_of_baseline for f in fs)))
    return result


HEADER = f"{'scenario':<34} {'round':>6} {'records':>9} {'seconds':>8} {'records/s':>10} {'MB/s':>7} {'% of consumer':>13}"


def row(f: Figure) -> str:
    return (f"{f.scenario:<34} {f.round or 'median':>6} {f.records:>9} {f.seconds:>8.2f} {f.records_per_s:>10.0f} "
            f"{f.mb_per_s:>7.2f} {f.pct_of_baseline:>12.0f}%")


@contextlib.contextmanager
def cluster_or_given(args: argparse.Namespace) -> Iterator[str]:
    if args.bootstrap:
        yield args.bootstrap
        return
    with local_cluster(args.brokers, {}, "kafkalite-bench-spark-") as cluster:
        yield cluster.status()["bootstrap"]


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap servers of a running cluster (default: start a local one)")
    parser.add_argument("--brokers", type=int, default=1, help="brokers of the local cluster")
    parser.add_argument("--topic", help="topic to create and fill (default: a fresh bench-spark-read-<time>)")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="bound on producing, and on each consumer read")
    parser.add_argument("--master", default="local[2]", help="Spark master URL")
    parser.add_argument("--min-partitions", type=int, default=None,
                        help="minPartitions of the last scenario (default: 2x --partitions; 0: skip it)")
    parser.add_argument("--option", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="extra data source option for every Spark read, e.g. kafka.fetch.max.bytes=52428800")
    parser.add_argument("--conf", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="extra SparkSession config, e.g. spark.python.worker.reuse=false")
    parser.add_argument("--repeat", type=int, default=1, help="rounds over the scenarios; every round and the medians are printed")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = parser.parse_args(argv)
    if args.min_partitions is None:
        args.min_partitions = 2 * args.partitions
    if min(args.brokers, args.partitions, args.replication_factor, args.num_records, args.record_size, args.repeat) < 1:
        parser.error("--brokers, --partitions, --replication-factor, --num-records, --record-size and --repeat must be positive")
    if args.max_seconds <= 0 or args.min_partitions < 0:
        parser.error("--max-seconds must be positive and --min-partitions not negative")

    with cluster_or_given(args) as boot:
        produced, session_s, figures = run_rounds(args, boot)
    import confluent_kafka
    import pyspark

    print(f"# {produced.records} records of {args.record_size}-byte values with keys and 2 headers, "
          f"{args.partitions} partitions RF {args.replication_factor}; {produced.bytes / MB:.1f} MB of key + value; "
          f"master {args.master}, pyspark {pyspark.__version__}, confluent-kafka {confluent_kafka.version()} "
          f"(librdkafka {confluent_kafka.libversion()[0]}); SparkSession start-up {session_s:.1f} s (excluded); "
          f"one warm-up count() before timing; options {dict(args.option) or '-'}; confs {dict(args.conf) or '-'}")
    print(HEADER)
    summary = medians(figures)
    for f in figures + (summary if args.repeat > 1 else []):
        print(row(f))
    if args.json:
        print(json.dumps({"records": produced.records, "mb": produced.bytes / MB, "session_start_s": session_s,
                          "master": args.master, "partitions": args.partitions, "options": dict(args.option),
                          "confs": dict(args.conf), "rounds": [asdict(f) for f in figures],
                          "median": [asdict(f) for f in summary]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
