"""Consumer throughput, in the spirit of Kafka's kafka-consumer-perf-test.

    .venv/bin/python bench/consume_perf.py --bootstrap HOST:PORT[,...] --topic T [--num-records N] [--max-seconds 60]
    .venv/bin/python bench/consume_perf.py --local 3 --num-records 1000000   # own cluster, pre-filled

One confluent-kafka (librdkafka) consumer is assigned every partition of the topic from the
beginning (no consumer group: assign(), not subscribe()) and reads until it has
`--num-records` records or `--max-seconds` have passed. Figures:

  first record ms   from assign() to the first record (metadata, ListOffsets, first fetch)
  records/s, MB/s   over the whole read, assign() to the last record; MB = 2^20 bytes of
                    key + value, as in Kafka's tool
  steady records/s  from the first record to the last (without the start-up)

It also checks that offsets are contiguous per partition (a gap or a repeat is reported),
so a run doubles as a sanity check of what the producer benchmark wrote.

`--prefill` (implied by `--local`) first writes `--num-records` records of
`--record-size` bytes with bench/produce_perf.py's producer (acks=1), creating the topic
(`--partitions`, replication factor min(3, brokers)) if it is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from produce_perf import MB, bootstrap_servers, broker_count, ensure_topic, run_producer

CONSUME_BATCH = 10_000
POLL_TIMEOUT_S = 0.2


def prefill(args: argparse.Namespace, boot: str) -> None:
    ensure_topic(boot, args.topic, args.partitions, min(3, broker_count(boot)), None)
    r = run_producer(boot, args.topic, num_records=args.num_records, record_size=args.record_size, acks="1",
                     max_seconds=args.max_seconds, label="prefill")
    print(f"# prefilled {r.records} records ({r.records_per_s:.0f} records/s)", file=sys.stderr)


def consume(boot: str, topic: str, num_records: int, max_seconds: float, extra: dict | None = None) -> dict:
    """`extra`: more consumer configuration (bench/spark_read.py gives its baseline the
    fetch settings of the Spark source's consumers)."""
    consumer = Consumer({
        "bootstrap.servers": boot, "group.id": "kafkalite-consume-perf", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "fetch.max.bytes": 50 * MB, "max.partition.fetch.bytes": 10 * MB,
        "queued.max.messages.kbytes": 256 * 1024, "enable.partition.eof": False, **(extra or {}),
    })
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise SystemExit(f"topic {topic}: {meta.error if meta else 'not found'} (use --prefill to create and fill it)")
        partitions = sorted(meta.partitions)
        next_offset: dict[int, int] = {}
        gaps = 0
        records = 0
        size = 0
        first = last = None
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = start + max_seconds
        while records < num_records and time.perf_counter() < deadline:
            # No more than are still wanted: consume() waits out its timeout for a count that never comes.
            for msg in consumer.consume(min(CONSUME_BATCH, num_records - records), timeout=POLL_TIMEOUT_S):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise SystemExit(f"consume error: {err}")
                p, o = msg.partition(), msg.offset()
                if next_offset.get(p, 0) != o:
                    gaps += 1
                next_offset[p] = o + 1
                records += 1
                size += len(msg.value() or b"") + len(msg.key() or b"")
                if first is None:
                    first = time.perf_counter()
            if records:
                last = time.perf_counter()
        return {"topic": topic, "partitions": len(partitions), "records": records, "mb": size / MB,
                "first_record_ms": (first - start) * 1000 if first else float("nan"),
                "seconds": (last - start) if last else float("nan"),
                "steady_seconds": (last - first) if last and first and last > first else float("nan"),
                "offset_gaps": gaps, "capped": records < num_records}
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap", help="bootstrap servers of a running cluster")
    where.add_argument("--local", type=int, metavar="N", help="start a local cluster of N brokers for this run (implies --prefill)")
    parser.add_argument("--topic", default="perf-consume")
    parser.add_argument("--num-records", type=int, default=500_000)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="stop reading after this long")
    parser.add_argument("--prefill", action="store_true", help="first produce --num-records records into the topic")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record (with --prefill)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of a topic created by --prefill")
    parser.add_argument("--json", action="store_true", help="also print the result as one JSON line")
    args = parser.parse_args(argv)
    if args.local is not None and args.local < 1:
        parser.error("--local needs at least 1 broker")
    if args.num_records < 1 or args.max_seconds <= 0:
        parser.error("--num-records and --max-seconds must be positive")

    with bootstrap_servers(args) as boot:
        if args.prefill or args.local:
            prefill(args, boot)
        r = consume(boot, args.topic, args.num_records, args.max_seconds)
    rate = r["records"] / r["seconds"] if r["records"] else 0.0
    steady = r["records"] / r["steady_seconds"] if r["records"] else 0.0
    print(f"{'topic':<20} {'partitions':>10} {'records':>9} {'first record ms':>15} {'records/s':>10} {'MB/s':>7} {'steady records/s':>16} {'offset gaps':>11}")
    print(f"{r['topic']:<20} {r['partitions']:>10} {r['records']:>9} {r['first_record_ms']:>15.1f} {rate:>10.0f} "
          f"{r['mb'] / r['seconds'] if r['records'] else 0.0:>7.2f} {steady:>16.0f} {r['offset_gaps']:>11}"
          + (" (time cap)" if r["capped"] else ""))
    if args.json:
        print(json.dumps({**r, "records_per_s": rate, "steady_records_per_s": steady}))
    return 0 if r["offset_gaps"] == 0 and not r["capped"] else 1


if __name__ == "__main__":
    sys.exit(main())
