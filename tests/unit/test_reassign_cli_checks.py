"""`kafkalite reassign` without a cluster: argument and plan-file mistakes give one line
and the right exit code before anything is contacted, the plan's printed form is Kafka's
JSON, and the live status follows a reassignment to its end (ZooKeeper and the brokers
replaced by fakes that move on at each look)."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import pytest

from kafkalite.cli import reassign_cmd, reassign_status, zk_session
from kafkalite.cli.admin_client import AdminError, BrokerMeta, ClusterMetadata, PartitionInfo, TopicInfo
from kafkalite.cli.main import main
from kafkalite.cli.zk_session import check_connect_string, resolve_zookeeper
from kafkalite.zk import codec
from kafkalite.zk.codec import BrokerRegistration, Reassignment, TopicAssignment

DEAD_ZOOKEEPER = "127.0.0.1:1"


def one_line_failure(capsys, argv: list[str], code: int) -> str:
    assert main(argv) == code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv, message", [
    (["reassign", "generate", "--topics", ",", "--brokers", "1"], "names no topic"),
    (["reassign", "generate", "--topics", "a", "--brokers", "1,-2"], "bad broker id '-2'"),
    (["reassign", "generate", "--topics", "a", "--brokers", "2,2"], "broker 2 is listed twice"),
    (["reassign", "generate", "--topics", "a", "--brokers", "1,²"], "bad broker id '²'"),
    (["reassign", "generate", "--topics", "a", "--brokers", " , "], "names no broker"),
    (["reassign", "execute", "--plan", "p.json", "--throttle", "0"], "--throttle must be a positive number"),
    (["reassign", "execute", "--plan", "p.json", "--throttle", "10MB"], "--throttle must be a positive number"),
    (["reassign", "execute", "--plan", "p.json", "--throttle", "²"], "--throttle must be a positive number"),
    (["reassign", "status", "--json", "--once"], "give one of --json and --once"),
    (["reassign", "status", "--interval", "0"], "--interval must be at least"),
])
def test_usage_mistakes_exit_2_with_one_line_before_contacting_anything(capsys, argv, message):
    line = one_line_failure(capsys, [*argv, "--zookeeper", DEAD_ZOOKEEPER], 2)
    assert message in line


def test_bad_plan_files_exit_1_with_one_line_before_contacting_zookeeper(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(zk_session, "CONNECT_TIMEOUT_S", 0.5)
    cases = {
        "missing.json": (None, "cannot read plan file"),
        "garbage.json": ("{nope", "not UTF-8 JSON"),
        "version.json": ('{"version": 2, "partitions": []}', "unsupported reassignment version 2"),
        "empty.json": ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "must not be empty"),
        "twice.json": ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "duplicate broker ids"),
    }
    for name, (body, message) in cases.items():
        path = tmp_path / name
        if body is not None:
            path.write_text(body)
        line = one_line_failure(capsys, ["reassign", "execute", "--plan", str(path), "--zookeeper", DEAD_ZOOKEEPER], 1)
        assert message in line and str(path) in line
    (tmp_path / "fine.json").write_text('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}')
    line = one_line_failure(capsys, ["reassign", "execute", "--plan", str(tmp_path / "fine.json"), "--zookeeper", DEAD_ZOOKEEPER], 1)
    assert f"cannot reach ZooKeeper at {DEAD_ZOOKEEPER} (no connection within 0.5 s)" in line


def test_execute_refuses_a_partition_still_moving_and_writes_nothing(capsys, tmp_path, monkeypatch):
    """No reassignment in progress, but t-0's topic znode still lists a move: a cancelled
    one that could not go back yet. A plan naming it is refused (exit 1, one line) and no
    admin znode is written; the controller would have taken the plan for that move."""
    created = []
    zk = SimpleNamespace(
        get_reassignment=lambda: None,
        get_topic_assignments=lambda topics: {"t": (TopicAssignment({0: [1, 2, 3, 4], 1: [2, 3]}, adding_replicas={0: [3, 4]},
                                                                   removing_replicas={0: [1, 2]}), 1)},
        get_brokers=lambda: {b: (BrokerRegistration(b, "127.0.0.1", 1, 2, 3, None), b) for b in (1, 2, 3, 4, 5)},
        get_topics_marked_for_deletion=lambda: [],
        create_reassignment=created.append,
    )
    monkeypatch.setattr(reassign_cmd, "zookeeper", lambda connect: contextlib.nullcontext(zk))
    plan = tmp_path / "plan.json"
    plan.write_text('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [3, 5]},'
                    ' {"topic": "t", "partition": 1, "replicas": [3, 5]}]}')
    line = one_line_failure(capsys, ["reassign", "execute", "--plan", str(plan), "--zookeeper", "127.0.0.1:2181"], 1)
    assert "plan refused: t-0: its previous move (1,2 -> 3,4) has not ended" in line
    assert created == []


@pytest.mark.parametrize("connect", ["", "host", "h:x", "h:1/", "h:1//a", ":1"])
def test_malformed_zookeeper_connect_strings_are_refused(connect):
    with pytest.raises(AdminError, match="bad --zookeeper"):
        check_connect_string(connect)


def test_zookeeper_connect_strings_with_several_servers_and_a_chroot_are_accepted(monkeypatch):
    check_connect_string("127.0.0.1:2181,127.0.0.2:2182/kafka/one")
    monkeypatch.delenv("KAFKALITE_ZOOKEEPER", raising=False)
    assert resolve_zookeeper(None) == "127.0.0.1:2181"
    monkeypatch.setenv("KAFKALITE_ZOOKEEPER", "127.0.0.1:3000")
    assert resolve_zookeeper(None) == "127.0.0.1:3000"
    assert resolve_zookeeper("127.0.0.1:4000") == "127.0.0.1:4000"


def test_printed_plan_is_kafkas_json_one_partition_per_line():
    plan = Reassignment({("b", 0): (3,), ("a", 1): (2, 4)})
    text = reassign_cmd.format_plan(plan)
    assert json.loads(text) == json.loads(codec.encode_reassignment(plan))
    assert text.splitlines()[1:3] == ['  {"topic": "a", "partition": 1, "replicas": [2, 4]},',
                                      '  {"topic": "b", "partition": 0, "replicas": [3]}']
    assert json.loads(reassign_cmd.format_plan(Reassignment({}))) == {"version": 1, "partitions": []}


# -- the live status, driven by fakes --------------------------------------------------------

class StagedZooKeeper:
    """What the controller would leave in ZooKeeper at each look: stage 0 not started,
    1 copying (KIP-455 maps in the topic znode), 2 finished (admin znode gone)."""

    def __init__(self) -> None:
        self.looks = 0

    @property
    def stage(self) -> int:
        return min(self.looks - 1, 2)

    def get_reassignment(self):
        self.looks += 1
        if self.stage == 2:
            return None
        return Reassignment({("t", 0): (2, 4)}, codec.reassignment_throttle(5000)), 0

    def get_topics(self):
        return ["t"]

    def get_topic_assignments(self, topics):
        if self.stage == 0:
            value = TopicAssignment({0: [1, 2], 1: [2, 3]})
        elif self.stage == 1:
            value = TopicAssignment({0: [2, 4, 1], 1: [2, 3]}, adding_replicas={0: [4]}, removing_replicas={0: [1]})
        else:
            value = TopicAssignment({0: [2, 4], 1: [2, 3]})
        return {"t": (value, self.looks)}

    def get_brokers(self):
        return {b: (BrokerRegistration(b, "127.0.0.1", 1, 2, 3, None), b) for b in (1, 2, 3, 4)}


class FakeAdmin:
    def __init__(self, zk: StagedZooKeeper) -> None:
        self.zk = zk

    def metadata(self, topics=None) -> ClusterMetadata:
        isr = [1, 2] if self.zk.stage < 2 else [2, 4]
        partitions = [PartitionInfo(0, 2, 3, [1, 2], isr, [], 0), PartitionInfo(1, 2, 3, [2, 3], [2, 3], [], 0)]
        return ClusterMetadata("c", 1, [BrokerMeta(b, "127.0.0.1", 1, None) for b in (1, 2, 3, 4)],
                               {"t": TopicInfo("t", partitions)})


def test_live_status_follows_a_move_until_it_is_done(capsys, monkeypatch):
    zk = StagedZooKeeper()
    asked = []

    def log_sizes(brokers, ask):
        asked.append(sorted(ask))
        return {2: {"t-0": 1000}, 4: {"t-0": 250}}

    monkeypatch.setattr(reassign_status, "_log_sizes", log_sizes)
    monkeypatch.setattr(reassign_status.time, "sleep", lambda s: None)
    assert reassign_status._watch(zk, FakeAdmin(zk), 1.0, once=False) == 0
    out = capsys.readouterr().out
    assert "reassignment of 1 partitions, throttled to 5,000 bytes/s" in out
    assert "t-0 1,2 -> 2,4" in out
    assert "done" in out and "reassignment complete" in out
    assert "t-1" not in out  # not moving
    assert asked[0] == [2, 4]  # the leader and the adding replica
    assert zk.stage == 2


class RefusedZooKeeper(StagedZooKeeper):
    """The controller refused the move (broker 4 registered, but its process known gone):
    the entry leaves the admin znode and t-0 stays on 1,2."""

    def get_reassignment(self):
        self.looks += 1
        return (Reassignment({("t", 0): (2, 4)}), 0) if self.looks == 1 else None

    def get_topic_assignments(self, topics):
        return {"t": (TopicAssignment({0: [1, 2], 1: [2, 3]}), self.looks)}


def test_live_status_says_a_refused_move_did_not_move_and_exits_1(capsys, monkeypatch):
    """Review: it said "done" and "reassignment complete" for a move that never happened."""
    zk = RefusedZooKeeper()
    monkeypatch.setattr(reassign_status, "_log_sizes", lambda brokers, ask: {})
    monkeypatch.setattr(reassign_status.time, "sleep", lambda s: None)
    assert reassign_status._watch(zk, FakeAdmin(zk), 1.0, once=False) == 1
    out, err = capsys.readouterr()
    assert "not moved" in out and "reassignment complete" not in out and "done" not in out
    assert err.strip().splitlines() == ["kafkalite reassign status: 1 of 1 partitions did not move: t-0 (on 1,2, not 2,4); "
                                        "the controller refused the target (its log says why) or the move was cancelled"]


def test_status_once_shows_bytes_copied_of_the_leaders_log(capsys, monkeypatch):
    zk = StagedZooKeeper()
    zk.looks = 1  # the controller has started: 4 is adding
    monkeypatch.setattr(reassign_status, "_log_sizes", lambda brokers, ask: {2: {"t-0": 4096}, 4: {"t-0": 1024}})
    assert reassign_status._watch(zk, FakeAdmin(zk), 1.0, once=True) == 0
    out = capsys.readouterr().out
    assert "25%" in out and "1.0 KiB / 4.0 KiB" in out and "copying to 4" in out and "ISR 1,2" in out
    assert "reassignment complete" not in out


def test_status_with_nothing_in_progress_says_so(capsys):
    idle = SimpleNamespace(get_reassignment=lambda: None, get_topics=lambda: [], get_topic_assignments=lambda topics: {},
                           get_brokers=lambda: {})
    assert reassign_status._watch(idle, None, 1.0, once=False) == 0
    assert "no reassignment in progress" in capsys.readouterr().out
