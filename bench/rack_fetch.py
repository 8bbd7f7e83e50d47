"""Fetch from the closest replica (KIP-392): the share of consumer bytes served in-rack.

    .venv/bin/python bench/rack_fetch.py                                  # 1M records, rack-aware
    .venv/bin/python bench/rack_fetch.py --num-records 1000000 --compare  # and the leader-only default

Starts its own cluster for each selector measured: ZooKeeper and 3 brokers in racks a, b, c
(`replica.selector.class` = RackAwareReplicaSelector, or LeaderSelector with `--compare`),
on free loopback ports in a temporary directory, stopped at the end. It creates a topic of
`--partitions` partitions, replication factor 3 (one replica per rack), writes
`--num-records` records of `--record-size` bytes with acks=all, waits until every replica
is in the ISR, then starts three confluent-kafka consumers at once, one per rack
(`client.rack` a, b, c), each assigned every partition from the beginning, each reading
every record (or until `--max-seconds`).

Figures, from each broker's /metrics before and after the read
(`kafkalite_consumer_fetch_bytes_total{topic, served_as, locality}`):

  in-rack share   bytes served by a broker in the consumer's own rack / all consumer bytes
  by broker       bytes each broker served as leader and as follower
  redirects       consumer fetches answered with a preferred read replica

and per consumer: records, seconds, records/s, and offset gaps or repeats (must be 0).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from produce_perf import MB, ensure_topic, run_producer
from prometheus_client.parser import text_string_to_metric_families

from kafkalite.testing.cluster import LocalCluster
from kafkalite.testing.ports import free_ports
from kafkalite.testing.probes import metrics_text, wait_fully_replicated

RACKS = ("a", "b", "c")
SELECTORS = ("RackAwareReplicaSelector", "LeaderSelector")
CONSUME_BATCH = 10_000
POLL_TIMEOUT_S = 0.2
REPLICATION_TIMEOUT_S = 120.0


@contextlib.contextmanager
def rack_cluster(selector: str) -> Iterator[LocalCluster]:
    """Three brokers in racks a, b, c with this selector, stopped at the end (also on
    SIGTERM, which unwinds through `finally`)."""
    ports = free_ports(3 * len(RACKS) + 1)
    triples = [(ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(len(RACKS))]
    with tempfile.TemporaryDirectory(prefix="kafkalite-rack-fetch-") as tmp:
        cluster = LocalCluster(tmp, brokers=len(RACKS), zk_port=ports[-1], ports=triples, racks=list(RACKS),
                               overrides={"replica.selector.class": selector, "log.level": "WARNING",
                                          "auto.leader.rebalance.enable": False})
        previous = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            cluster.up()
            yield cluster
        finally:
            cluster.down()
            signal.signal(signal.SIGTERM, previous)


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def served_bytes(cluster: LocalCluster, topic: str) -> dict[tuple[int, str, str], float]:
    """(broker id, served_as, locality) -> consumer bytes served so far, and
    (broker id, "redirects", "") -> preferred-read-replica answers."""
    out: dict[tuple[int, str, str], float] = {}
    for b in cluster.status()["brokers"]:
        for family in text_string_to_metric_families(metrics_text(b["admin_port"])):
            for s in family.samples:
                if s.labels.get("topic") != topic:
                    continue
                if s.name == "kafkalite_consumer_fetch_bytes_total":
                    key = (b["id"], s.labels["served_as"], s.labels["locality"])
                elif s.name == "kafkalite_preferred_read_replica_redirects_total":
                    key = (b["id"], "redirects", "")
                else:
                    continue
                out[key] = out.get(key, 0.0) + s.value
    return out


def read_all(boot: str, topic: str, rack: str, expected: int, max_seconds: float, result: dict) -> None:
    """One consumer in `rack` reads every partition from the beginning until it has
    `expected` records (bounded by `max_seconds`), checking offsets are contiguous."""
    consumer = Consumer({
        "bootstrap.servers": boot, "group.id": f"rack-fetch-{rack}", "client.rack": rack, "enable.auto.commit": False,
        "enable.auto.offset.store": False, "enable.partition.eof": False, "fetch.max.bytes": 50 * MB,
        "max.partition.fetch.bytes": 10 * MB, "queued.max.messages.kbytes": 256 * 1024,
    })
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        next_offset: dict[int, int] = {}
        records = gaps = 0
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = start + max_seconds
        while records < expected and time.perf_counter() < deadline:
            for msg in consumer.consume(CONSUME_BATCH, timeout=POLL_TIMEOUT_S):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise SystemExit(f"consumer in rack {rack}: {err}")
                p, o = msg.partition(), msg.offset()
                if next_offset.get(p, 0) != o:
                    gaps += 1
                next_offset[p] = o + 1
                records += 1
        result.update(rack=rack, records=records, seconds=time.perf_counter() - start, offset_gaps=gaps,
                      capped=records < expected)
    finally:
        consumer.close()


def measure(selector: str, args: argparse.Namespace) -> dict:
    topic = "rack-fetch"
    with rack_cluster(selector) as cluster:
        boot = cluster.status()["bootstrap"]
        ensure_topic(boot, topic, args.partitions, len(RACKS), None)
        produced = run_producer(boot, topic, num_records=args.num_records, record_size=args.record_size, acks="all",
                                max_seconds=args.max_seconds, label="prefill")
        wait_fully_replicated(cluster, topic, args.partitions, timeout_s=REPLICATION_TIMEOUT_S)
        expected = _records_in(boot, topic)
        print(f"# {selector}: {produced.records} records written ({produced.records_per_s:.0f} records/s), "
              f"{expected} in the topic", file=sys.stderr)
        before = served_bytes(cluster, topic)
        results = [{} for _ in RACKS]
        threads = [threading.Thread(target=read_all, args=(boot, topic, rack, expected, args.max_seconds, results[i]),
                                    name=f"consumer-{rack}") for i, rack in enumerate(RACKS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(args.max_seconds + 60)
        after = served_bytes(cluster, topic)
        racks = {b["id"]: b["rack"] for b in cluster.status()["brokers"]}
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)}
    return {"selector": selector, "expected": expected, "consumers": results, "bytes": delta, "racks": racks}


def _records_in(boot: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "rack-fetch-count"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        total = 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += high - low
        return total
    finally:
        consumer.close()


def report(r: dict) -> bool:
    consumer_bytes = {k: v for k, v in r["bytes"].items() if k[1] in ("leader", "follower")}
    total = sum(consumer_bytes.values())
    same = sum(v for k, v in consumer_bytes.items() if k[2] == "same_rack")
    redirects = sum(v for k, v in r["bytes"].items() if k[1] == "redirects")
    print(f"\n{r['selector']}: 3 consumers (racks a, b, c), each reading all {r['expected']} records")
    print(f"{'consumer rack':>13} {'records':>9} {'seconds':>8} {'records/s':>10} {'offset gaps':>11}")
    ok = True
    for c in r["consumers"]:
        if not c:
            print(f"{'?':>13} consumer did not finish")
            ok = False
            continue
        rate = c["records"] / c["seconds"] if c["seconds"] > 0 else 0.0
        print(f"{c['rack']:>13} {c['records']:>9} {c['seconds']:>8.1f} {rate:>10.0f} {c['offset_gaps']:>11}"
              + (" (time cap)" if c["capped"] else ""))
        ok = ok and c["offset_gaps"] == 0 and not c["capped"]
    print(f"{'broker':>13} {'rack':>5} {'as leader MB':>13} {'as follower MB':>15} {'in-rack MB':>11}")
    for broker, rack in sorted(r["racks"].items()):
        lead = sum(v for k, v in consumer_bytes.items() if k[0] == broker and k[1] == "leader") / MB
        follow = sum(v for k, v in consumer_bytes.items() if k[0] == broker and k[1] == "follower") / MB
        local = sum(v for k, v in consumer_bytes.items() if k[0] == broker and k[2] == "same_rack") / MB
        print(f"{broker:>13} {rack or '-':>5} {lead:>13.1f} {follow:>15.1f} {local:>11.1f}")
    share = same / total if total else 0.0
    print(f"in-rack share: {100 * share:.1f}% of {total / MB:.1f} MB served to consumers; "
          f"preferred-read-replica redirects: {redirects:.0f}")
    r["in_rack_share"] = share
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--max-seconds", type=float, default=300.0, help="bound of the write and of each consumer's read")
    parser.add_argument("--compare", action="store_true", help="also measure the leader-only default (LeaderSelector)")
    parser.add_argument("--json", action="store_true", help="also print each result as one JSON line")
    args = parser.parse_args(argv)
    if args.num_records < 1 or args.max_seconds <= 0 or args.partitions < 1 or args.record_size < 1:
        parser.error("--num-records, --max-seconds, --partitions and --record-size must be positive")
    ok = True
    for selector in SELECTORS if args.compare else SELECTORS[:1]:
        r = measure(selector, args)
        ok = report(r) and ok
        if args.json:
            print(json.dumps({**r, "bytes": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in r["bytes"].items()}}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
