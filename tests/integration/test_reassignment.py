"""Replica reassignment on real processes (issue 9, seed 000 F), under a verifying acks=all
producer (RF 3, min.insync.replicas 2): the move {1,2,3} -> {2,3,4} plain, with the
controller or the leader killed -9 mid-move, and cancelled. After each: the new replicas'
segments are byte-identical to the leader's below the HW, the removed replica's directory
is gone, and no acknowledged record is lost.

A throttle (leader/follower.replication.throttled.rate) keeps the new replica catching up
for several seconds, which is what makes "mid-move" a window the test can hit.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.cli.zk_session import zookeeper
from kafkalite.testing.probes import broker_state, partition_view, wait_until
from kafkalite.testing.verify import VerifyingProducer, partition_dirs, read_final_log, replica_logs_identical, resend_check, verify
from kafkalite.zk.codec import Reassignment, reassignment_throttle

TOPIC = "mv"
PREFILL_RECORDS = 1500  # 1 KiB each: with the throttle below, the move takes several seconds
THROTTLE_BYTES_PER_S = 150_000


def _assignment(cluster) -> tuple[list[int], list[int], list[int]]:
    with zookeeper(cluster.status()["zookeeper"]["connect"]) as zk:
        a, _ = zk.get_topic_assignment(TOPIC)
    return list(a.partitions[0]), list(a.adding_replicas.get(0, [])), list(a.removing_replicas.get(0, []))


def _start(cluster, target: tuple[int, ...]) -> None:
    with zookeeper(cluster.status()["zookeeper"]["connect"]) as zk:
        zk.create_reassignment(Reassignment({(TOPIC, 0): target}, reassignment_throttle(THROTTLE_BYTES_PER_S)))


def _cancel(cluster) -> None:
    with zookeeper(cluster.status()["zookeeper"]["connect"]) as zk:
        assert zk.delete_reassignment()


def _reassignment_gone(cluster) -> bool:
    with zookeeper(cluster.status()["zookeeper"]["connect"]) as zk:
        return zk.get_reassignment() is None


@pytest.fixture
def moving(cluster_factory):
    """4 brokers, topic mv on {1,2,3} with data, a verifying producer running."""
    cluster = cluster_factory(4)
    boot = cluster.status()["bootstrap"]
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                           config={"min.insync.replicas": "2"})]).values():
        f.result(timeout=30)
    wait_until(lambda: (partition_view(cluster, TOPIC, 0) or {}).get("isr") and len(partition_view(cluster, TOPIC, 0)["isr"]) == 3,
               30, "mv fully replicated")
    p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 20})
    for i in range(PREFILL_RECORDS):
        p.produce(TOPIC, value=os.urandom(1024), key=str(i).encode())
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    producer = VerifyingProducer(boot, TOPIC, count_max=60_000, seconds_max=240, rate_per_s=200, prefix="mv")
    producer.start()
    wait_until(lambda: producer.snapshot()[0] > 100, 30, "the verifying producer's first acks")
    try:
        yield cluster, producer
    finally:
        producer.stop()
        producer.join(130)


def _finish(cluster, producer, replicas: list[int], gone: int) -> None:
    """Stop producing, then check guarantee 1 (nothing acked lost), 2 (identical below the HW
    on the replicas kept) and that the dropped replica's directory is gone."""
    boot = cluster.status()["bootstrap"]
    wait_until(lambda: producer.seconds_since_last_ack() < 2, 60, "acks flowing after the move")
    producer.stop()
    producer.join(130)
    assert not producer.failed, f"{len(producer.failed)} records failed, e.g. {list(producer.failed.items())[:3]}"
    final = read_final_log(boot, TOPIC, 1)  # librdkafka's own re-sends (issue #4953) are not the brokers'
    verdict = verify(boot, TOPIC, 1, producer.acked, final,
                     resend_check(cluster.status(), TOPIC, 1, final, producer.client_account).explain)
    assert verdict.ok, verdict.problems
    view = wait_until(lambda: (v := partition_view(cluster, TOPIC, 0)) and sorted(v["isr"]) == sorted(replicas) and v,
                      60, f"ISR {replicas}")
    assert sorted(view["replicas"]) == sorted(replicas)
    status = cluster.status()
    leader = cluster.broker(view["leader"])
    hw = wait_until(lambda: broker_state(leader["admin_port"])["partitions"][f"{TOPIC}-0"]["hw"], 10, "the leader's HW")
    dirs = partition_dirs(status, TOPIC, 0, replicas)
    assert len(dirs) == len(replicas), dirs
    assert replica_logs_identical(dirs, hw) == []
    wait_until(lambda: partition_dirs(cluster.status(), TOPIC, 0, [gone]) == [], 30, f"broker {gone}'s {TOPIC}-0 directory to go")


def _wait_moving(cluster) -> None:
    wait_until(lambda: _assignment(cluster)[1] == [4], 30, "the move to start (adding [4])")


def _wait_moved(cluster, target: list[int], timeout_s: float = 120) -> None:
    wait_until(lambda: _assignment(cluster) == (target, [], []) and _reassignment_gone(cluster), timeout_s,
               f"the move to finish on {target}")


def test_move_onto_a_new_broker_under_acks_all_load(moving):
    cluster, producer = moving
    _start(cluster, (2, 3, 4))
    _wait_moving(cluster)
    assert _assignment(cluster) == ([1, 2, 3, 4], [4], [1])  # AR + RAR while moving
    _wait_moved(cluster, [2, 3, 4])
    # (the assignment is read from ZooKeeper, the leader from the brokers' metadata, which
    # the controller's UpdateMetadata reaches a moment later)
    wait_until(lambda: partition_view(cluster, TOPIC, 0)["leader"] in (2, 3, 4), 10, "a leader among [2, 3, 4]")
    _finish(cluster, producer, [2, 3, 4], gone=1)


def test_move_survives_the_controller_killed_mid_move(moving):
    cluster, producer = moving
    _start(cluster, (2, 3, 4))
    _wait_moving(cluster)
    ctrl = wait_until(lambda: cluster.status()["controller"], 30, "a controller")
    cluster.kill(ctrl, "KILL")
    wait_until(lambda: cluster.status()["controller"] not in (None, ctrl), 60, "a new controller")
    cluster.start(ctrl)
    _wait_moved(cluster, [2, 3, 4])
    _finish(cluster, producer, [2, 3, 4], gone=1)


def test_move_survives_the_leader_killed_mid_move(moving):
    cluster, producer = moving
    _start(cluster, (2, 3, 4))
    _wait_moving(cluster)
    leader = partition_view(cluster, TOPIC, 0)["leader"]
    cluster.kill(leader, "KILL")
    # The move finishes without the killed broker when it is leaving (1); a killed broker
    # that stays must come back first, since every target replica must be in the ISR.
    if leader in (2, 3, 4):
        cluster.start(leader)
    _wait_moved(cluster, [2, 3, 4])
    if leader not in (2, 3, 4):
        cluster.start(leader)  # deletes its copy at start-up: no longer assigned (seed E)
    _finish(cluster, producer, [2, 3, 4], gone=1)


def test_a_cancelled_move_goes_back_to_the_original_replicas(moving):
    cluster, producer = moving
    _start(cluster, (2, 3, 4))
    _wait_moving(cluster)
    _cancel(cluster)
    wait_until(lambda: _assignment(cluster) == ([1, 2, 3], [], []), 60, "the move to revert to [1, 2, 3]")
    _finish(cluster, producer, [1, 2, 3], gone=4)
