"""The `kafkalite` CLI end to end: real broker processes, the CLI run as a subprocess."""

from __future__ import annotations

import json
import time

from kafkalite.broker.kafka_apis import DEPARTED_LISTED_S
from kafkalite.testing.cli_runner import failed_with, ok
from kafkalite.testing.ports import free_port

ISR_WAIT_S = 30  # replica.lag.time.max.ms is 4000 in tests; failure detection adds a few s


def describe(topic: str, boot: str) -> list[dict]:
    out = json.loads(ok("topics", "describe", topic, "--json", boot=boot))
    assert [t["name"] for t in out["topics"]] == [topic]
    return out["topics"][0]["partitions"]


def wait_describe(topic: str, boot: str, predicate, what: str) -> list[dict]:
    deadline = time.monotonic() + ISR_WAIT_S
    while True:
        parts = describe(topic, boot)
        if predicate(parts):
            return parts
        assert time.monotonic() < deadline, f"{what} not seen within {ISR_WAIT_S} s: {parts}"
        time.sleep(0.5)


def test_topic_lifecycle_produce_consume_and_user_mistakes(cluster):
    boot = cluster.status()["bootstrap"]

    ok("topics", "create", "events", "--partitions", "3", "--replication-factor", "3",
       "--config", "min.insync.replicas=2", boot=boot)
    assert "events" in json.loads(ok("topics", "list", "--json", boot=boot))
    parts = describe("events", boot)
    assert [p["partition"] for p in parts] == [0, 1, 2]
    for p in parts:
        assert sorted(p["replicas"]) == [1, 2, 3]
        assert p["leader"] in p["replicas"]
        assert p["leader_epoch"] >= 0
        assert sorted(p["isr"]) == [1, 2, 3]
        assert p["offline_replicas"] == []
        assert not p["under_replicated"] and not p["offline"]
    human = ok("topics", "describe", "events", boot=boot)
    assert "events" in human and "UNDER-REPLICATED" not in human and "OFFLINE" not in human

    # cluster describe, bootstrap taken from the environment
    summary = json.loads(ok("cluster", "describe", "--json", env={"KAFKALITE_BOOTSTRAP": boot}))
    assert [b["id"] for b in summary["brokers"]] == [1, 2, 3]
    assert summary["controller_id"] in (1, 2, 3)
    assert (summary["topics"], summary["partitions"]) == (1, 3)
    assert (summary["under_replicated_partitions"], summary["offline_partitions"]) == (0, 0)

    # produce 100 keyed lines, read them back with keys and offsets
    lines = "".join(f"k{i}:v{i}\n" for i in range(100))
    ok("produce", "events", "--acks", "all", "--key-separator", ":", boot=boot, stdin=lines)
    out = ok("consume", "events", "--from-beginning", "--max-messages", "100", "--print-key", "--print-offset", boot=boot)
    records = []
    for line in out.splitlines():
        position, key, value = line.split("\t")
        partition, offset = position.split(":")
        records.append((int(partition), int(offset), key, value))
    assert sorted((k, v) for _, _, k, v in records) == sorted((f"k{i}", f"v{i}") for i in range(100))
    by_partition: dict[int, list[int]] = {}
    for p, o, _k, _ in records:
        by_partition.setdefault(p, []).append(o)
    for p, offsets in by_partition.items():
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets {offsets}"
    # the same key always lands in the same partition
    assert len({(k, p) for p, _, k, _ in records}) == 100

    # from an offset, one partition
    fullest = max(by_partition, key=lambda p: len(by_partition[p]))
    n = len(by_partition[fullest])
    out = ok("consume", "events", "--partition", str(fullest), "--offset", "2", "--max-messages", str(n - 2),
             "--print-offset", boot=boot)
    assert [line.split("\t")[0] for line in out.splitlines()] == [f"{fullest}:{o}" for o in range(2, n)]
    # with a client rack (Fetch v11 rack_id; these brokers keep the leader-only default)
    out = ok("consume", "events", "--partition", str(fullest), "--from-beginning", "--max-messages", str(n),
             "--print-offset", "--client-rack", "b", boot=boot)
    assert [line.split("\t")[0] for line in out.splitlines()] == [f"{fullest}:{o}" for o in range(n)]
    # nothing new: stops after the idle timeout with nothing printed
    assert ok("consume", "events", "--timeout-ms", "1500", boot=boot) == ""

    # user mistakes: one line on stderr, non-zero exit, no traceback
    failed_with("already exists", "topics", "create", "events", "--partitions", "1", "--replication-factor", "1", boot=boot)
    failed_with("replication factor", "topics", "create", "toobig", "--partitions", "1", "--replication-factor", "4", boot=boot)
    failed_with("no.such.key", "topics", "create", "badcfg", "--partitions", "1", "--replication-factor", "1",
                "--config", "no.such.key=1", boot=boot)
    failed_with("KEY=VALUE", "topics", "create", "badcfg", "--partitions", "1", "--replication-factor", "1",
                "--config", "novalue", boot=boot, code=2)
    failed_with("unknown topic 'nope'", "topics", "describe", "nope", boot=boot)
    failed_with("unknown topic 'nope'", "produce", "nope", boot=boot, stdin="x\n")
    failed_with("unknown topic 'nope'", "consume", "nope", boot=boot)
    failed_with("no partition 7", "consume", "events", "--partition", "7", boot=boot)
    dead = f"127.0.0.1:{free_port()}"
    failed_with(f"no broker reachable at {dead}", "topics", "list", boot=dead)
    failed_with(f"no broker reachable at {dead}", "produce", "events", boot=dead, stdin="x\n")
    # consume's librdkafka consumer has a group.id (librdkafka requires one), so it asked for
    # a coordinator, and FindCoordinator created the internal offsets topic (as in Kafka)
    assert json.loads(ok("topics", "list", "--json", boot=boot)) == ["__consumer_offsets", "events"]

    ok("topics", "delete", "events", boot=boot)
    assert json.loads(ok("topics", "list", "--json", boot=boot)) == ["__consumer_offsets"]
    failed_with("unknown topic 'events'", "topics", "delete", "events", boot=boot)


def test_killed_follower_shows_under_replicated_and_elect_leaders_restores_preferred(cluster):
    boot = cluster.status()["bootstrap"]
    ok("topics", "create", "ha", "--partitions", "3", "--replication-factor", "3", boot=boot)
    parts = wait_describe("ha", boot, lambda ps: all(p["leader"] == p["replicas"][0] for p in ps),
                          "preferred leaders after create")
    controller = cluster.status()["controller"]
    # a broker that is not the controller: follower of two partitions, preferred leader of one
    victim = next(b for b in (1, 2, 3) if b != controller)
    moved = next(p["partition"] for p in parts if p["replicas"][0] == victim)
    epoch_before = next(p["leader_epoch"] for p in parts if p["partition"] == moved)

    cluster.kill(victim, "KILL")
    parts = wait_describe("ha", boot, lambda ps: all(p["under_replicated"] and victim not in p["isr"] for p in ps),
                          f"ISR without broker {victim}")
    assert all(p["leader"] not in (victim, -1) for p in parts)
    assert not any(p["offline"] for p in parts)
    assert "UNDER-REPLICATED" in ok("topics", "describe", "ha", boot=boot)
    # Metadata keeps listing a departed broker for DEPARTED_LISTED_S (never as a leader: a
    # librdkafka race, issue 13), then it leaves `cluster describe` too.
    deadline = time.monotonic() + DEPARTED_LISTED_S + ISR_WAIT_S
    while True:
        summary = json.loads(ok("cluster", "describe", "--json", boot=boot))
        if victim not in [b["id"] for b in summary["brokers"]]:
            break
        assert time.monotonic() < deadline, f"broker {victim} still listed: {summary}"
        time.sleep(0.5)
    assert summary["under_replicated_partitions"] == 3
    # the preferred replica is down: the election cannot happen
    failed_with("elections failed", "elect-leaders", "--topic", "ha", "--partition", str(moved), boot=boot)

    cluster.start(victim)
    parts = wait_describe("ha", boot, lambda ps: all(sorted(p["isr"]) == [1, 2, 3] for p in ps),
                          f"broker {victim} back in every ISR")
    assert next(p["leader"] for p in parts if p["partition"] == moved) != victim

    out = ok("elect-leaders", "--topic", "ha", boot=boot)
    assert f"ha-{moved}: leader moved" in out
    parts = describe("ha", boot)
    assert all(p["leader"] == p["replicas"][0] for p in parts)
    assert next(p["leader_epoch"] for p in parts if p["partition"] == moved) >= epoch_before + 2
    # every partition (no --topic): nothing left to do
    assert "every partition is led by its preferred replica" in ok("elect-leaders", boot=boot)
    failed_with("unknown topic 'nope'", "elect-leaders", "--topic", "nope", boot=boot)
