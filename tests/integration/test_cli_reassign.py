"""`kafkalite reassign` against real brokers and the real ZooKeeper, the CLI run as a
subprocess: plans, plan checks, the admin znode it writes, status and cancel.

These tests do not need the controller to move anything. The partition they start moving
goes to broker 9, whose registration the test writes itself: a registered broker that
never fetches, so the move stays in progress whatever the controller does with it."""

from __future__ import annotations

import json
import socket

import pytest

from kafkalite.testing.cli_runner import failed_with, ok
from kafkalite.testing.ports import free_port
from kafkalite.testing.probes import broker_state, wait_until
from kafkalite.zk import codec
from kafkalite.zk.codec import BrokerRegistration

REASSIGN_ZNODE = "/admin/reassign_partitions"


@pytest.fixture
def moves_cluster(cluster):
    """Three brokers and topic `moves`: 4 partitions, RF 2, each partition with its leader."""
    boot = cluster.status()["bootstrap"]
    ok("topics", "create", "moves", "--partitions", "4", "--replication-factor", "2", "--bootstrap", boot)
    return cluster


def _zookeeper(cluster) -> str:
    return cluster.state["zookeeper"]["connect"]


def _assignment(zk_client, topic: str) -> dict[int, list[int]]:
    data, _ = zk_client.get(f"/brokers/topics/{topic}")
    return codec.decode_topic_assignment(data, f"/brokers/topics/{topic}").partitions


def test_generate_plans_decommissioning_broker_3_and_refuses_bad_input(moves_cluster, zk_client):
    zk = _zookeeper(moves_cluster)
    current = _assignment(zk_client, "moves")

    plan = json.loads(ok("reassign", "generate", "--topics", "moves", "--brokers", "1,2", "--json", "--zookeeper", zk))
    assert plan["version"] == 1 and "throttle" not in plan
    proposed = {e["partition"]: e["replicas"] for e in plan["partitions"]}
    # exactly the partitions on broker 3 move, each off broker 3 only, leaders kept when they stay
    assert set(proposed) == {p for p, replicas in current.items() if 3 in replicas}
    for p, replicas in proposed.items():
        assert sorted(replicas) == [1, 2]
        if current[p][0] != 3:
            assert replicas[0] == current[p][0]

    # the human form: a table of current -> proposed, then the same plan
    human = ok("reassign", "generate", "--topics", "moves", "--brokers", "1,2", env={"KAFKALITE_ZOOKEEPER": zk})
    assert "current" in human and "proposed" in human and "3->" in human
    assert json.loads(human[human.index("{"):]) == plan

    # already on allowed brokers: nothing moves
    nothing = json.loads(ok("reassign", "generate", "--topics", "moves", "--brokers", "1,2,3", "--json", "--zookeeper", zk))
    assert nothing == {"version": 1, "partitions": []}
    assert "nothing to move" in ok("reassign", "generate", "--topics", "moves", "--brokers", "3,2,1", "--zookeeper", zk)

    failed_with("unknown topic 'nope'", "reassign", "generate", "--topics", "moves,nope", "--brokers", "1,2", "--zookeeper", zk)
    failed_with("broker 7 is not registered (registered brokers: 1,2,3)",
                "reassign", "generate", "--topics", "moves", "--brokers", "1,7", "--zookeeper", zk)
    failed_with("replication factor 2, more than the 1 brokers given",
                "reassign", "generate", "--topics", "moves", "--brokers", "1", "--zookeeper", zk)
    failed_with("bad broker id 'x'", "reassign", "generate", "--topics", "moves", "--brokers", "1,x", "--zookeeper", zk, code=2)
    failed_with("listed twice", "reassign", "generate", "--topics", "moves", "--brokers", "1,1", "--zookeeper", zk, code=2)
    dead = f"127.0.0.1:{free_port()}"
    failed_with(f"cannot reach ZooKeeper at {dead}", "reassign", "generate", "--topics", "moves", "--brokers", "1,2",
                "--zookeeper", dead)
    assert zk_client.exists(REASSIGN_ZNODE) is None


def test_execute_checks_the_plan_writes_the_admin_znode_and_cancel_deletes_it(moves_cluster, zk_client, tmp_path, request):
    zk = _zookeeper(moves_cluster)
    boot = moves_cluster.status()["bootstrap"]
    current = _assignment(zk_client, "moves")
    stays, leaves = current[0]
    # broker 9: registered, never fetching, so its move never finishes. Something listens on
    # its inter-broker port and never answers (a paused broker, as the controller's process
    # watch sees it): with nothing listening, the watch would find it gone (issue 13).
    silent = socket.create_server(("127.0.0.1", 0))
    request.addfinalizer(silent.close)
    zk_client.create("/brokers/ids/9", codec.encode_broker_registration(BrokerRegistration(
        id=9, host="127.0.0.1", port=free_port(), inter_broker_port=silent.getsockname()[1], admin_port=free_port())),
        ephemeral=True)

    def plan_file(name: str, body) -> str:
        path = tmp_path / name
        path.write_text(body if isinstance(body, str) else json.dumps(body))
        return str(path)

    def plan(*entries) -> dict:
        return {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries]}

    # refused before anything is written: one line each, exit 1
    cases = [
        ("broker 7 is not registered", plan(("moves", 0, [stays, 7]))),
        ("unknown topic 'nope'", plan(("nope", 0, [1]))),
        ("topic 'moves' has no partition 9", plan(("moves", 9, [1]))),
        ("the plan lists no partitions", plan()),
        ("bad plan file", plan(("moves", 0, []))),
        ("bad plan file", plan(("moves", 0, [1, 1]))),
        ("bad plan file", plan(("moves", 0, [1]), ("moves", 0, [2]))),
        ("bad plan file", "{not json"),
        ("bad plan file", {"partitions": []}),
    ]
    for i, (message, body) in enumerate(cases):
        failed_with(message, "reassign", "execute", "--plan", plan_file(f"bad-{i}.json", body), "--zookeeper", zk)
    failed_with("cannot read plan file", "reassign", "execute", "--plan", str(tmp_path / "missing.json"), "--zookeeper", zk)
    failed_with("--throttle must be a positive number", "reassign", "execute", "--plan", plan_file("p.json", plan()),
                "--throttle", "-5", "--zookeeper", zk, code=2)
    assert zk_client.exists(REASSIGN_ZNODE) is None

    # started: the znode holds exactly Kafka's JSON with the throttle
    good = plan_file("good.json", plan(("moves", 0, [stays, 9])))
    out = ok("reassign", "execute", "--plan", good, "--throttle", "1048576", "--zookeeper", zk)
    assert f"moves-0: {stays},{leaves} -> {stays},9" in out and "1,048,576 bytes/s" in out
    data, _ = zk_client.get(REASSIGN_ZNODE)
    assert json.loads(data) == {
        "version": 1,
        "partitions": [{"topic": "moves", "partition": 0, "replicas": [stays, 9]}],
        "throttle": {"leader.replication.throttled.rate": 1048576, "follower.replication.throttled.rate": 1048576},
    }

    # one at a time
    failed_with("a reassignment is already in progress (1 partitions left)",
                "reassign", "execute", "--plan", good, "--zookeeper", zk)
    assert zk_client.get(REASSIGN_ZNODE)[0] == data

    # status --json: the partition, moving to 9 and away from the other replica, not done
    [entry] = json.loads(ok("reassign", "status", "--json", "--zookeeper", zk))
    assert {k: entry[k] for k in ("topic", "partition", "adding", "removing", "done")} == {
        "topic": "moves", "partition": 0, "adding": [9], "removing": [leaves], "done": False}
    # before the controller starts: the current replicas; once started: AR, then the adding
    assert entry["replicas"] in ([stays, leaves], [stays, leaves, 9])

    # status --once: a bar for moves-0, copying to broker 9, which holds nothing of the
    # leader's log; the leader's /state gives the size of its log
    lines = "".join(f"line {i}\n" for i in range(200))
    ok("produce", "moves", "--partition", "0", "--acks", "all", "--bootstrap", boot, stdin=lines)
    admin_port = {b["id"]: b["admin_port"] for b in moves_cluster.status()["brokers"]}
    leader_size = wait_until(lambda: broker_state(admin_port[stays])["partitions"]["moves-0"]["log_size_bytes"], 30,
                             "moves-0's log on the leader to hold the records")
    assert leader_size > 0
    shown = ok("reassign", "status", "--once", "--zookeeper", zk, "--bootstrap", boot)
    assert "reassignment of 1 partitions, throttled to 1,048,576 bytes/s" in shown
    assert f"moves-0 {stays},{leaves} -> {stays},9" in shown
    assert "copying to 9" in shown and "0 B /" in shown

    # cancel deletes the znode; cancelling nothing says so
    assert "cancelled the reassignment (1 partitions were left)" in ok("reassign", "cancel", "--zookeeper", zk)
    assert zk_client.exists(REASSIGN_ZNODE) is None
    assert "no reassignment in progress" in ok("reassign", "cancel", "--zookeeper", zk)
    failed_with("--json already prints once", "reassign", "status", "--json", "--once", "--zookeeper", zk, code=2)

    # a znode some other tool wrote badly: reported in one line, and cancel still removes it
    zk_client.create(REASSIGN_ZNODE, b'{"version": 1, "partitions": "all"}')
    failed_with(f"cannot decode znode {REASSIGN_ZNODE}", "reassign", "status", "--json", "--zookeeper", zk)
    failed_with(f"cannot decode znode {REASSIGN_ZNODE}", "reassign", "execute", "--plan", good, "--zookeeper", zk)
    assert "its znode was unreadable" in ok("reassign", "cancel", "--zookeeper", zk)
    assert zk_client.exists(REASSIGN_ZNODE) is None
