"""`kafkalite groups` and `kafkalite consume --group` end to end: three real brokers on the
real ZooKeeper, the CLI run as a subprocess, as kafka-consumer-groups.sh would be used."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from kafkalite.core.group_messages import partition_for
from kafkalite.testing.cli_runner import failed_with, ok
from kafkalite.testing.ports import free_port
from kafkalite.testing.probes import wait_until

OFFSETS_PARTITIONS = 6
GROUP_OVERRIDES = {"offsets.topic.num.partitions": OFFSETS_PARTITIONS, "group.initial.rebalance.delay.ms": 0,
                   "group.min.session.timeout.ms": 500}
MEMBER_WAIT_S = 30
LEAVE_WAIT_S = 15


@pytest.fixture
def boot(cluster_factory) -> str:
    """Three brokers and topic `orders` (3 partitions, RF 3)."""
    boot = cluster_factory(3, overrides=GROUP_OVERRIDES).status()["bootstrap"]
    ok("topics", "create", "orders", "--partitions", "3", "--replication-factor", "3", boot=boot)
    return boot


def produce(boot: str, first: int, count: int) -> None:
    ok("produce", "orders", "--key-separator", ":", boot=boot,
       stdin="".join(f"k{i}:v{i}\n" for i in range(first, first + count)))


def consume_group(boot: str, group: str, n: int) -> list[tuple[int, int, str]]:
    out = ok("consume", "orders", "--group", group, "--from-beginning", "--max-messages", str(n), "--print-offset", boot=boot)
    records = []
    for line in out.splitlines():
        position, value = line.split("\t")
        partition, offset = position.split(":")
        records.append((int(partition), int(offset), value))
    assert len(records) == n
    return records


def describe(boot: str, group: str) -> dict:
    return json.loads(ok("groups", "describe", group, "--json", boot=boot))


def committed(boot: str, group: str) -> dict[int, int]:
    return {row["partition"]: row["committed_offset"] for row in describe(boot, group)["offsets"] if row["topic"] == "orders"}


def plan(boot: str, group: str, *how: str) -> dict[int, tuple[int | None, int]]:
    """{partition: (current, new)} of a reset-offsets run with --json."""
    out = json.loads(ok("groups", "reset-offsets", group, "--topic", "orders", *how, "--json", boot=boot))
    assert out["group"] == group
    return {e["partition"]: (e["current_offset"], e["new_offset"]) for e in out["partitions"]}


def test_group_consumes_commits_and_its_offsets_are_described_reset_and_deleted(boot):
    produce(boot, 0, 60)
    log_end = {p: new for p, (_, new) in plan(boot, "nobody", "--to-latest").items()}  # a dry run for a group that does not exist
    assert sum(log_end.values()) == 60

    # consume 25 as a member of `readers`: the commits are the next offsets of what was printed
    first = consume_group(boot, "readers", 25)
    expected = {}
    for p, o, _ in first:
        expected[p] = max(expected.get(p, 0), o + 1)
    d = describe(boot, "readers")
    assert (d["group"], d["state"], d["protocol_type"], d["members"]) == ("readers", "Empty", "consumer", [])
    assert d["coordinator"] in (1, 2, 3)
    assert {(r["partition"], r["committed_offset"]) for r in d["offsets"]} == set(expected.items())
    for r in d["offsets"]:
        assert r["log_end_offset"] == log_end[r["partition"]]
        assert r["lag"] == r["log_end_offset"] - r["committed_offset"]
        assert r["member_id"] is None

    # the same group goes on where it stopped: the two runs read every record exactly once
    second = consume_group(boot, "readers", 35)
    assert sorted(v for _, _, v in first + second) == sorted(f"v{i}" for i in range(60))
    assert committed(boot, "readers") == log_end
    assert all(r["lag"] == 0 for r in describe(boot, "readers")["offsets"])
    human = ok("groups", "describe", "readers", boot=boot)
    assert "state Empty" in human and "has no active members" in human and "log end offset" in human

    # list: text and JSON; groups on several coordinators (ListGroups goes to every broker)
    names = ["g-" + str(i) for i in range(40)]
    spread = list({partition_for(g, OFFSETS_PARTITIONS): g for g in names}.values())
    assert len(spread) == OFFSETS_PARTITIONS
    for g in spread:
        ok("groups", "reset-offsets", g, "--topic", "orders:0", "--to-earliest", "--execute", boot=boot)
    assert len({describe(boot, g)["coordinator"] for g in spread}) > 1
    listed = json.loads(ok("groups", "list", "--json", boot=boot))
    assert [g["group"] for g in listed] == sorted(["readers", *spread])
    assert {"group": "readers", "state": "Empty", "protocol_type": "consumer", "members": 0} in listed
    assert all(g["state"] == "Empty" for g in listed)
    text = ok("groups", "list", boot=boot)
    assert all(g in text for g in ["readers", *spread]) and "Empty" in text

    # reset-offsets: a dry run changes nothing
    assert plan(boot, "readers", "--to-earliest") == {p: (log_end[p], 0) for p in log_end}
    assert "dry run: nothing committed" in ok("groups", "reset-offsets", "readers", "--topic", "orders", "--to-earliest", boot=boot)
    assert committed(boot, "readers") == log_end
    # --to-offset is clamped to [log start, log end]; --execute commits, read back by describe
    n = min(log_end.values()) + 1
    assert plan(boot, "readers", "--to-offset", str(n), "--execute") == {p: (log_end[p], min(n, log_end[p])) for p in log_end}
    assert committed(boot, "readers") == {p: min(n, log_end[p]) for p in log_end}
    assert plan(boot, "readers", "--to-offset", "1000000") == {p: (min(n, log_end[p]), log_end[p]) for p in log_end}
    assert plan(boot, "readers", "--to-latest", "--execute") == {p: (min(n, log_end[p]), log_end[p]) for p in log_end}
    # some partitions only
    ok("groups", "reset-offsets", "readers", "--topic", "orders:0,2", "--to-earliest", "--execute", boot=boot)
    assert committed(boot, "readers") == {0: 0, 1: log_end[1], 2: 0}

    # --to-datetime: the first offset at or after the time (offsets_for_times), else the log end
    time.sleep(0.05)
    between = datetime.now(UTC).isoformat(timespec="milliseconds")
    time.sleep(0.05)
    produce(boot, 60, 30)
    assert plan(boot, "readers", "--to-datetime", between) == {p: (committed(boot, "readers")[p], log_end[p]) for p in log_end}
    assert {p: new for p, (_, new) in plan(boot, "readers", "--to-datetime", "2000-01-01T00:00:00Z").items()} == {0: 0, 1: 0, 2: 0}
    later = {p: new for p, (_, new) in plan(boot, "readers", "--to-datetime", "2999-01-01T00:00:00+02:00").items()}
    assert sum(later.values()) == 90
    # a group reset to the time reads exactly what was produced after it
    ok("groups", "reset-offsets", "readers", "--topic", "orders", "--to-datetime", between, "--execute", boot=boot)
    assert sorted(v for _, _, v in consume_group(boot, "readers", 30)) == sorted(f"v{i}" for i in range(60, 90))

    # delete: the group and its offsets go
    assert ok("groups", "delete", "readers", boot=boot).strip() == "deleted consumer group readers"
    failed_with("consumer group 'readers' does not exist", "groups", "describe", "readers", boot=boot)
    failed_with("consumer group 'readers' does not exist", "groups", "delete", "readers", boot=boot)
    assert "readers" not in [g["group"] for g in json.loads(ok("groups", "list", "--json", boot=boot))]


def stable_with_assignment(d: dict) -> dict | None:
    return d if d["state"] == "Stable" and d["members"] and d["members"][0]["assignment"] else None


def test_a_group_with_a_live_member_refuses_reset_and_delete_and_bad_input_is_one_line(boot):
    produce(boot, 0, 30)
    member = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "consume", "orders", "--group", "live",
                               "--from-beginning", "--timeout-ms", "0", "--bootstrap", boot],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        d = wait_until(lambda: stable_with_assignment(describe(boot, "live")), MEMBER_WAIT_S, "the consumer's membership in group live")
        (m,) = d["members"]
        assert m["client_id"] == "kafkalite-consume" and m["host"] and m["group_instance_id"] is None
        assert sorted((a["topic"], a["partition"]) for a in m["assignment"]) == [("orders", 0), ("orders", 1), ("orders", 2)]
        assert d["protocol_type"] == "consumer" and d["assignor"] in ("range", "roundrobin")
        assert {r["member_id"] for r in d["offsets"]} == {m["member_id"]}
        human = ok("groups", "describe", "live", boot=boot)
        assert "state Stable" in human and "orders:0,1,2" in human and m["member_id"] in human
        assert {"group": "live", "state": "Stable", "protocol_type": "consumer", "members": 1} in json.loads(
            ok("groups", "list", "--json", boot=boot))

        failed_with("offsets can be reset only while the group is inactive", "groups", "reset-offsets", "live",
                    "--topic", "orders", "--to-earliest", "--execute", boot=boot)
        dry = ok("groups", "reset-offsets", "live", "--topic", "orders", "--to-earliest", boot=boot)
        assert "--execute is refused until it is Empty" in dry
        failed_with("NON_EMPTY_GROUP", "groups", "delete", "live", boot=boot)
        # the member has read everything: its commits say so
        wait_until(lambda: sum(r["committed_offset"] or 0 for r in describe(boot, "live")["offsets"]) == 30, MEMBER_WAIT_S,
                   "group live's commits of the 30 records")
    finally:
        member.send_signal(signal.SIGTERM)  # the CLI leaves the group on SIGTERM
        try:
            out, _ = member.communicate(timeout=LEAVE_WAIT_S)
        except subprocess.TimeoutExpired:
            member.kill()
            member.communicate()
            raise
    assert len(out.splitlines()) == 30
    assert describe(boot, "live")["state"] == "Empty"  # LeaveGroup, not a session timeout
    ok("groups", "reset-offsets", "live", "--topic", "orders", "--to-earliest", "--execute", boot=boot)
    assert set(committed(boot, "live").values()) == {0}
    ok("groups", "delete", "live", boot=boot)

    # user mistakes: one line on stderr, non-zero exit, no traceback
    failed_with("consumer group 'nope' does not exist", "groups", "describe", "nope", boot=boot)
    failed_with("consumer group 'nope' does not exist", "groups", "delete", "nope", boot=boot)
    failed_with("unknown topic 'nosuch'", "groups", "reset-offsets", "g", "--topic", "nosuch", "--to-latest", boot=boot)
    failed_with("has no partition 5", "groups", "reset-offsets", "g", "--topic", "orders:5", "--to-latest", boot=boot)
    failed_with("bad --topic", "groups", "reset-offsets", "g", "--topic", "orders:x", "--to-latest", boot=boot, code=2)
    failed_with("bad --to-datetime 'yesterday'", "groups", "reset-offsets", "g", "--topic", "orders",
                "--to-datetime", "yesterday", boot=boot, code=2)
    failed_with("--to-offset must be >= 0", "groups", "reset-offsets", "g", "--topic", "orders", "--to-offset", "-3",
                boot=boot, code=2)
    failed_with("--group cannot be combined", "consume", "orders", "--group", "g", "--partition", "0", boot=boot, code=2)
    failed_with("unknown topic 'nosuch'", "consume", "nosuch", "--group", "g", boot=boot)
    dead = f"127.0.0.1:{free_port()}"
    for args in (("groups", "list"), ("groups", "describe", "g"), ("groups", "delete", "g"),
                 ("groups", "reset-offsets", "g", "--topic", "orders", "--to-latest")):
        failed_with(f"no broker reachable at {dead}", *args, boot=dead)
    assert json.loads(ok("groups", "list", "--json", boot=boot)) == []
