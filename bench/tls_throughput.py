"""Produce and consume throughput over PLAINTEXT, SSL (mutual TLS) and SASL_SSL
(SCRAM-SHA-512), side by side in one run against the same broker (issue 15).

    .venv/bin/python bench/tls_throughput.py [--num-records 200000] [--record-size 512] [--repeat 3]

Starts one broker (and its ZooKeeper) with `LocalCluster(secure=True)`: a dev CA, the
`admin` SCRAM user, and three listeners on the same process: PLAINTEXT, SSL with
ssl.client.auth=required, SASL_SSL. One broker, replication factor 1: what is measured is
the client connection's cost, not replication (the inter-broker RPC is the same for all).
For each protocol (round-robin, `--repeat` times, the median run reported) a fresh topic of
6 partitions; one confluent-kafka producer (acks=all, linger.ms 5, batch.size 1 MB) sends
`--num-records` random records of `--record-size` bytes, then one consumer assigned every
partition reads them back from the beginning. Figures: records/s and MB/s (1 MB = 2^20
bytes of values) of each, and each protocol's share of PLAINTEXT's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.cli.client_security import parse_properties
from kafkalite.testing.cluster import LocalCluster
from kafkalite.testing.ports import free_ports
from kafkalite.testing.zookeeper import ZooKeeperServer

PARTITIONS = 6
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


def client_configs(cluster: LocalCluster, ports: dict[str, int]) -> dict[str, dict[str, str]]:
    sec = cluster.state["secure"]
    sasl = parse_properties(Path(sec["client_config"]).read_text())
    return {
        "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"},
        "SSL": {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL", "ssl.ca.location": sec["ca"],
                "ssl.certificate.location": sec["client"], "ssl.key.location": sec["client_key"]},
        "SASL_SSL": sasl,
    }


def produce(conf: dict[str, str], topic: str, count: int, size: int) -> float:
    """Seconds from the first produce() to the last delivery report."""
    payload = os.urandom(size)
    producer = Producer({**conf, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})
    failed = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failed.append(err)

    producer.produce(topic, payload, on_delivery=on_delivery)  # warm-up: metadata and connections
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left or failed:
        raise SystemExit(f"{topic}: {left} undelivered, {len(failed)} failed ({failed[:1]})")
    return elapsed


def consume(conf: dict[str, str], topic: str, count: int) -> float:
    """Seconds from assign() to the last of `count` (+1 warm-up) records."""
    consumer = Consumer({**conf, "group.id": f"bench-{topic}", "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    try:
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = 0
        deadline = time.monotonic() + 300
        while got < count + 1 and time.monotonic() < deadline:
            for m in consumer.consume(10000, timeout=0.5):
                if m.error() is None:
                    got += 1
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    if got < count + 1:
        raise SystemExit(f"{topic}: read {got} of {count + 1} records")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-records", type=int, default=200000)
    parser.add_argument("--record-size", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kafkalite-tls-bench-") as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zk")
        zk.start()
        cluster = None
        try:
            sasl_port, ib_port, admin_port, ssl_port, plain_port = free_ports(5)
            listeners = f"SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port},PLAINTEXT://127.0.0.1:{plain_port}"
            cluster = LocalCluster(Path(tmp) / "cluster", brokers=1, zk_connect=zk.connect_string,
                                   ports=[(sasl_port, ib_port, admin_port)], secure=True,
                                   overrides={"listeners": listeners, "default.replication.factor": 1,
                                              "offsets.topic.replication.factor": 1, "log.level": "WARNING"})
            cluster.up()
            confs = client_configs(cluster, {"PLAINTEXT": plain_port, "SSL": ssl_port, "SASL_SSL": sasl_port})
            admin = AdminClient({**confs["PLAINTEXT"], "log_level": 0})
            runs: dict[str, list[tuple[float, float]]] = {p: [] for p in PROTOCOLS}
            for r in range(args.repeat):
                for protocol in PROTOCOLS:
                    topic = f"tls-bench-{protocol.lower()}-{r}"
                    for f in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]).values():
                        f.result(timeout=30)
                    p_s = produce(confs[protocol], topic, args.num_records, args.record_size)
                    c_s = consume(confs[protocol], topic, args.num_records)
                    runs[protocol].append((p_s, c_s))
                    print(f"run {r + 1} {protocol:9s} produce {args.num_records / p_s:10,.0f} rec/s   "
                          f"consume {args.num_records / c_s:10,.0f} rec/s", flush=True)
        finally:
            if cluster is not None:
                cluster.down()
            zk.stop()
    mb = args.num_records * args.record_size / (1 << 20)
    print(f"\n{args.num_records:,} records of {args.record_size} bytes, 1 broker, 6 partitions, acks=all; "
          f"median of {args.repeat} runs")
    print(f"{'protocol':10s} {'produce rec/s':>14s} {'MB/s':>7s} {'vs plain':>9s} {'consume rec/s':>14s} {'MB/s':>7s} {'vs plain':>9s}")
    base_p = statistics.median(p for p, _ in runs["PLAINTEXT"])
    base_c = statistics.median(c for _, c in runs["PLAINTEXT"])
    for protocol in PROTOCOLS:
        p_s = statistics.median(p for p, _ in runs[protocol])
        c_s = statistics.median(c for _, c in runs[protocol])
        print(f"{protocol:10s} {args.num_records / p_s:14,.0f} {mb / p_s:7.1f} {base_p / p_s:8.0%} "
              f"{args.num_records / c_s:14,.0f} {mb / c_s:7.1f} {base_c / c_s:8.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
