"""The streaming pipeline (kafkalite.pipeline.job) on a local SparkSession: sustained
throughput, and end-to-end latency at a fixed input rate.

    .venv/bin/python bench/pipeline_throughput.py [--records 100000] [--max-offsets-per-trigger 20000]
                                                  [--rate 500] [--seconds 60] [--trigger-seconds 1]
                                                  [--master local[2]] [--skip-throughput] [--skip-latency]

Starts its own 3-broker cluster (bench/local_cluster.py), topics with 3 partitions, RF 3.

1. Throughput: `--records` seeded events (5% malformed, 2% late) are written up front; the
   job then runs with Trigger.AvailableNow and `--max-offsets-per-trigger`, so it works
   through a backlog in several micro-batches, both queries (aggregates and dead letters)
   at once. Figures: records/s of the whole pipeline (every input record through both
   queries: records / wall time from the first micro-batch's start to the last one's end;
   JVM and query start-up excluded, reported separately), and each query's own mean rate.
2. Latency: the job runs with a `--trigger-seconds` processing-time trigger while events are
   produced at `--rate` records/s for `--seconds`, with event time = produce time. Figures:
   - dead-letter latency per malformed record: its dead-letter record's timestamp minus its
     input record's timestamp (both CreateTime, set by producers on this machine);
   - window latency: an output window row's timestamp minus the earliest moment it could
     be final, window end + the 10 s watermark delay (the event that moves the watermark
     past the window is produced then);
   - whether the job kept up: the input records still unread when production stopped + 10 s.
   A record's latency is bounded below by the trigger interval's phase and by a micro-batch's
   duration; on 2 shared cores a micro-batch of the stateful query takes ~1-2 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from local_cluster import local_cluster

from kafkalite.cli.pipeline_run import ensure_topics
from kafkalite.pipeline import job
from kafkalite.pipeline.events import GeneratorConfig, Rejection, generate, parse_event_time, validate
from kafkalite.pipeline.reference import WATERMARK_DELAY_MS, WINDOW_MS

PARTITIONS = 3
QUERY_TIMEOUT_S = 1800
CATCH_UP_S = 10.0  # after the last input record: time to read everything and write dead letters


def produce(boot: str, topic: str, records, rate: float | None = None) -> float:
    """Write the records (paced at `rate`/s if given); returns the seconds it took."""
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    failures: list = []

    def done(err, _msg):
        if err is not None:
            failures.append(err)

    began = time.monotonic()
    for i, r in enumerate(records):
        if rate is not None:
            delay_s = began + i / rate - time.monotonic()
            if delay_s > 0:
                producer.poll(delay_s)
        while True:
            try:
                producer.produce(topic, key=r.key, value=r.value, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert not failures, failures[0]
    return time.monotonic() - began


def read_topic(boot: str, topic: str) -> list:
    consumer = Consumer({"bootstrap.servers": boot, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out, pending = [], {p for p, end in ends.items() if end > 0}
    while pending:
        for m in consumer.consume(10_000, 0.5):
            if m.error() is None:
                out.append(m)
                if m.offset() + 1 >= ends[m.partition()]:
                    pending.discard(m.partition())
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(m.error())
    consumer.close()
    return out


def lag(boot: str, topic: str, progress: list) -> int:
    """Input records not yet covered by the query's latest end offsets."""
    import json

    consumer = Consumer({"bootstrap.servers": boot, "group.id": "bench-lag"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.close()
    done = {}
    if progress:
        end = progress[-1]["sources"][0]["endOffset"]
        done = {int(p): o for p, o in (json.loads(end) if isinstance(end, str) else end)[topic].items()}
    return sum(ends[p] - done.get(p, 0) for p in ends)


def config_for(boot: str, directory: str, name: str, **kwargs) -> job.PipelineConfig:
    names = {"input_topic": f"{name}-in", "output_topic": f"{name}-windows", "dead_letter_topic": f"{name}-dead"}
    ensure_topics(boot, list(names.values()), PARTITIONS)
    return job.PipelineConfig(bootstrap=boot, checkpoint_dir=os.path.join(directory, name, "ck"),
                              parquet_dir=os.path.join(directory, name, "pq"), **names, **kwargs)


def _batch_span_s(progress: list) -> tuple[float, float]:
    """(start, end) epoch seconds of a query's micro-batches with input."""
    import datetime as dt

    def at(p) -> float:
        return dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    data = [p for p in progress if p["numInputRows"] > 0]
    return at(data[0]), max(at(p) + p["durationMs"]["triggerExecution"] / 1000 for p in data)


def throughput(spark, boot: str, directory: str, args) -> None:
    config = config_for(boot, directory, "tput", available_now=True, max_offsets_per_trigger=args.max_offsets_per_trigger)
    records = generate(GeneratorConfig(seed=1, rate_per_s=1000), args.records)
    produce_s = produce(boot, config.input_topic, records)
    began = time.time()
    pipeline = job.start(spark, config)
    assert pipeline.await_termination(QUERY_TIMEOUT_S), "the pipeline did not finish"
    for q in pipeline.queries:
        assert q.exception() is None, q.exception()
    total_s = time.time() - began
    spans = {q.name: _batch_span_s(q.recentProgress) for q in pipeline.queries}
    first, last = min(s for s, _ in spans.values()), max(e for _, e in spans.values())
    rows = {q.name: sum(p["numInputRows"] for p in q.recentProgress) for q in pipeline.queries}
    assert all(n == args.records for n in rows.values()), rows
    batches = sum(1 for p in pipeline.aggregates.recentProgress if p["numInputRows"] > 0)
    print(f"# throughput: {args.records} records (prefilled in {produce_s:.1f} s), {batches} micro-batches of at most "
          f"{args.max_offsets_per_trigger}, master {args.master}")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| pipeline records/s (both queries, first batch start to last batch end) | {args.records / (last - first):,.0f} |")
    for name, (s, e) in spans.items():
        print(f"| {name} query alone: records/s over its batches | {rows[name] / (e - s):,.0f} |")
    print(f"| start-up: start() to the first micro-batch | {first - began:.1f} s |")
    print(f"| wall time, start() to both queries done | {total_s:.1f} s |")


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    if not values:
        return "- | - | - | -"
    q = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else values * 99
    return f"{q[49]:,.0f} | {q[94]:,.0f} | {q[98]:,.0f} | {values[-1]:,.0f}"


def latency(spark, boot: str, directory: str, args) -> None:
    config = config_for(boot, directory, "lat", trigger_interval_s=args.trigger_seconds)
    pipeline = job.start(spark, config)
    try:
        time.sleep(20)  # let both queries get through their first (empty) micro-batches: start-up is not latency
        start_ms = int(time.time() * 1000)
        count = int(args.rate * args.seconds)
        records = generate(GeneratorConfig(seed=2, start_ms=start_ms, rate_per_s=args.rate), count)
        produced_s = produce(boot, config.input_topic, records, rate=args.rate)
        time.sleep(CATCH_UP_S)
        behind = lag(boot, config.input_topic, list(pipeline.aggregates.recentProgress))
        behind_letters = lag(boot, config.input_topic, list(pipeline.dead_letters.recentProgress))
        time.sleep(args.trigger_seconds * 2)
    finally:
        pipeline.stop()
    for q in pipeline.queries:
        assert q.exception() is None, q.exception()
    inputs = {(m.key(), m.value()): m.timestamp()[1] for m in read_topic(boot, config.input_topic)}
    letters = read_topic(boot, config.dead_letter_topic)
    letter_ms = [m.timestamp()[1] - inputs[(m.key(), m.value())] for m in letters]
    bad = sum(1 for r in records if isinstance(validate(r.value), Rejection))
    windows = read_topic(boot, config.output_topic)
    window_ms = []
    for m in windows:
        start = parse_event_time(m.key().decode().split("|")[0])
        if start >= start_ms - start_ms % WINDOW_MS:  # not the windows of late events (60 s old)
            window_ms.append(m.timestamp()[1] - (start + WINDOW_MS + WATERMARK_DELAY_MS))
    print(f"# latency: {count} records at {args.rate}/s for {args.seconds} s (took {produced_s:.1f} s), "
          f"trigger every {args.trigger_seconds} s, master {args.master}")
    print(f"# input records unread {CATCH_UP_S:.0f} s after the last was produced: aggregates {behind}, "
          f"dead letters {behind_letters}")
    print("| latency ms | n | p50 | p95 | p99 | max |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| malformed record -> its dead letter | {len(letter_ms)} of {bad} | {percentiles(letter_ms)} |")
    print(f"| window due (end + 10 s watermark) -> its output row | {len(window_ms)} | {percentiles(window_ms)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    with local_cluster(3, {}, "bench-pipeline-") as cluster, tempfile.TemporaryDirectory(prefix="bench-pipeline-") as directory:
        boot = cluster.status()["bootstrap"]
        spark = job.build_session(args.master, app_name="bench-pipeline")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            if not args.skip_throughput:
                throughput(spark, boot, directory, args)
            if not args.skip_latency:
                latency(spark, boot, directory, args)
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
