"""kcat (Debian's kcat 1.7.1 on librdkafka 2.0.2) against real brokers: metadata listing,
keyed produce from stdin, consume from the beginning and from a numeric offset.

kcat cannot create topics, so each test creates its topic with confluent-kafka's AdminClient
first (both speak through librdkafka, but kcat's older librdkafka is the point here: it
must not see flexible versions or tagged fields, DESIGN.md 4b)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")]
KCAT_TIMEOUT_S = 60
PARTITIONS = 3


def kcat(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=KCAT_TIMEOUT_S)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    assert "ERROR" not in done.stderr, done.stderr
    return done.stdout


def create_topic(boot: str, topic: str, replication_factor: int) -> None:
    admin = AdminClient({"bootstrap.servers": boot})  # must outlive the futures
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=replication_factor)])
    for future in futures.values():
        future.result(timeout=30)


def keyed_lines(partition: int, count: int) -> list[tuple[str, str]]:
    """(key, value) pairs; with -K: only the first ':' splits, so values may hold colons."""
    pairs = [(f"p{partition}-k{i}", f"v{i}:{'x' * (i % 40)}") for i in range(count)]
    pairs[3] = ("", "empty key")
    return pairs


@pytest.mark.parametrize("brokers", [1, 3])
def test_kcat_lists_every_broker_and_each_partitions_leader_replicas_isr(cluster_factory, brokers):
    cluster = cluster_factory(brokers)
    status = cluster.status()
    boot = status["bootstrap"]
    create_topic(boot, "kcat-meta", brokers)

    text = kcat("-b", boot, "-L")
    assert f" {brokers} brokers:" in text
    for b in status["brokers"]:
        suffix = " (controller)" if b["controller"] else ""
        assert f"  broker {b['id']} at {b['host']}:{b['port']}{suffix}\n" in text
    assert f'  topic "kcat-meta" with {PARTITIONS} partitions:' in text
    rows = re.findall(r"partition (\d+), leader (-?\d+), replicas: ([\d,]+), isrs: ([\d,]+)", text)
    assert sorted(int(r[0]) for r in rows) == list(range(PARTITIONS))

    meta = json.loads(kcat("-b", boot, "-L", "-J", "-t", "kcat-meta"))
    assert meta["controllerid"] == status["controller"]
    assert sorted(b["id"] for b in meta["brokers"]) == [b["id"] for b in status["brokers"]]
    [topic] = meta["topics"]
    assert topic["topic"] == "kcat-meta"
    assert "error" not in topic
    for p in topic["partitions"]:
        replicas = [r["id"] for r in p["replicas"]]
        assert len(replicas) == brokers
        assert sorted(r["id"] for r in p["isrs"]) == sorted(replicas)
        assert p["leader"] in replicas


@pytest.mark.parametrize("brokers", [1, 3])
def test_kcat_produces_keyed_lines_and_consumes_them_back_with_offsets(cluster_factory, brokers):
    boot = cluster_factory(brokers).status()["bootstrap"]
    topic = "kcat-keyed"
    create_topic(boot, topic, brokers)
    # With 3 brokers the partitions' leaders are spread, so this also checks that kcat
    # routes each partition to its leader from the metadata it was given.
    partitions = range(PARTITIONS) if brokers > 1 else [0]
    for partition in partitions:
        pairs = keyed_lines(partition, 200)
        kcat("-P", "-b", boot, "-t", topic, "-p", str(partition), "-K:", stdin="".join(f"{k}:{v}\n" for k, v in pairs))

        out = kcat("-C", "-b", boot, "-t", topic, "-p", str(partition), "-o", "beginning", "-e", "-f", "%k:%s:%o\n")
        assert out.splitlines() == [f"{k}:{v}:{o}" for o, (k, v) in enumerate(pairs)]

        out = kcat("-C", "-b", boot, "-t", topic, "-p", str(partition), "-o", "150", "-e", "-f", "%k:%s:%o\n")
        assert out.splitlines() == [f"{k}:{v}:{o}" for o, (k, v) in enumerate(pairs) if o >= 150]

        # -o -N: N records before the end (ListOffsets latest, the HW)
        out = kcat("-C", "-b", boot, "-t", topic, "-p", str(partition), "-o", "-5", "-e", "-f", "%o\n")
        assert out.splitlines() == [str(o) for o in range(195, 200)]


def test_kcat_headers_and_partitioner_then_consume_all_partitions(cluster_factory):
    boot = cluster_factory(1).status()["bootstrap"]
    topic = "kcat-any"
    create_topic(boot, topic, 1)
    lines = [f"key{i}:value{i}" for i in range(300)]
    kcat("-P", "-b", boot, "-t", topic, "-K:", "-H", "trace=abc", "-H", "empty=", stdin="\n".join(lines) + "\n")

    out = kcat("-C", "-b", boot, "-t", topic, "-o", "beginning", "-e", "-f", "%p|%o|%k|%s|%h\n")
    rows = [line.split("|") for line in out.splitlines()]
    assert sorted((k, v) for _p, _o, k, v, _h in rows) == sorted(tuple(line.split(":")) for line in lines)
    assert {h for *_rest, h in rows} == {"trace=abc,empty="}
    by_partition: dict[str, list[int]] = {}
    for p, o, *_rest in rows:
        by_partition.setdefault(p, []).append(int(o))
    assert len(by_partition) == PARTITIONS  # the keys hash to every partition
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))
