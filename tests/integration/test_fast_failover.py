"""Failure detection well under the ZooKeeper session (issue 13), on real processes.

The controller watches each live broker's process: a process killed with SIGKILL closes
its connections at once and refuses new ones, so the controller fails it and elects new
leaders while ZooKeeper still lists its registration (here the session is 10 s, so the
difference cannot be a matter of luck). A paused process (SIGSTOP) leaves no such evidence
and keeps its leaderships; a broker killed and restarted at once rejoins every ISR.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.fixtures import start_client, stop_client
from kafkalite.testing.probes import partition_view, wait_fully_replicated, wait_until

SESSION = {"zookeeper.session.timeout.ms": 10_000}
TOPIC = "ff"


def setup(cluster, partitions: int = 3) -> str:
    boot = cluster.status()["bootstrap"]
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=3,
                                           config={"min.insync.replicas": "2"})]).values():
        f.result(timeout=30)
    wait_fully_replicated(cluster, TOPIC, partitions)
    return boot


def controller_of(cluster) -> int:
    return wait_until(lambda: next((b["id"] for b in cluster.status()["brokers"] if b.get("controller")), None), 30,
                      "a controller")


def victim_leading(cluster, partitions: int) -> tuple[int, int]:
    """A partition led by a broker that is not the controller, and that broker."""
    ctrl = controller_of(cluster)
    for p in range(partitions):
        leader = partition_view(cluster, TOPIC, p)["leader"]
        if leader != ctrl:
            return p, leader
    raise AssertionError("the controller leads every partition")


def produce_one(boot: str, partition: int) -> None:
    p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 60_000})
    errors = []
    p.produce(TOPIC, value=b"x", partition=partition, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(60) == 0 and errors == []


def kill_and_time(cluster, zk_connect: str, victim: int, failed_over, just_killed=lambda: None):
    """kill -9 `victim`, call `just_killed()`, wait (30 s) for `failed_over()` to be truthy:
    its value, the seconds it took, and whether ZooKeeper still listed the victim's
    registration by then."""
    zk = start_client(zk_connect)
    try:
        cluster.kill(victim)
        killed = time.monotonic()
        just_killed()
        value = wait_until(failed_over, 30, f"failover from broker {victim}")
        took_s = time.monotonic() - killed
        return value, took_s, zk.exists(f"/brokers/ids/{victim}") is not None
    finally:
        stop_client(zk)


def test_a_killed_leader_is_replaced_while_its_registration_is_still_in_zookeeper(cluster_factory, zk_connect):
    cluster = cluster_factory(3, overrides=SESSION)
    boot = setup(cluster)
    partition, victim = victim_leading(cluster, 3)
    view, elected_s, still_registered = kill_and_time(
        cluster, zk_connect, victim,
        lambda: (v := partition_view(cluster, TOPIC, partition)) and v["leader"] not in (victim, -1) and v)
    print(f"\nbroker {victim} killed: {TOPIC}-{partition} led by {view['leader']} after {elected_s:.2f} s, "
          f"its registration {'still' if still_registered else 'no longer'} in ZooKeeper")
    assert still_registered, "the new leader came only with the session expiry"
    assert victim not in view["isr"]
    produce_one(boot, partition)  # acks=all with min.insync 2: the two live replicas
    cluster.start(victim)
    wait_fully_replicated(cluster, TOPIC, 3)


def test_a_paused_leader_keeps_its_leaderships(cluster_factory):
    cluster = cluster_factory(3, overrides=SESSION)
    setup(cluster)
    partition, victim = victim_leading(cluster, 3)
    before = partition_view(cluster, TOPIC, partition)
    cluster.kill(victim, "STOP")
    try:
        time.sleep(2.0)  # a long stall, well under the session
    finally:
        cluster.kill(victim, "CONT")
    time.sleep(1.0)  # anything the pause caused has had time to happen
    after = partition_view(cluster, TOPIC, partition)
    assert (after["leader"], after["leader_epoch"]) == (before["leader"], before["leader_epoch"])


def test_a_broker_killed_and_restarted_at_once_rejoins_every_isr(cluster_factory):
    cluster = cluster_factory(3)
    boot = setup(cluster)
    _, victim = victim_leading(cluster, 3)
    cluster.kill(victim)
    cluster.start(victim)
    wait_fully_replicated(cluster, TOPIC, 3, timeout_s=60)
    for p in range(3):
        produce_one(boot, p)


def test_a_killed_controller_is_replaced_and_its_partitions_failed_over_before_its_session_ends(cluster_factory,
                                                                                                zk_connect):
    """The other brokers watch the controller's process: when it is gone they remove
    /controller for it, a new controller is elected, and its own watch fails the dead
    broker's partitions over, all while ZooKeeper still lists the dead registration."""
    from kafkalite.cli.admin_client import AdminClient as RawAdmin

    cluster = cluster_factory(3, overrides=SESSION)
    boot = setup(cluster)
    victim = controller_of(cluster)
    led = [p for p in range(3) if partition_view(cluster, TOPIC, p)["leader"] == victim]
    assert led, "the controller leads a partition (it led them all when they were created)"
    # One connection to each survivor, open before the kill: the Metadata a client asks for
    # the moment its connection to the controller breaks never names the dead controller
    # (librdkafka's admin client, told so, waits for it to come back instead of asking
    # again). A client learns of the death from its own connection to the dead broker
    # closing, so the question is asked once that connection reads its end.
    survivors = [RawAdmin(f"127.0.0.1:{b['port']}") for b in cluster.status()["brokers"] if b["id"] != victim]
    for raw in survivors:
        raw.metadata()
    to_victim = socket.create_connection(("127.0.0.1", cluster.broker(victim)["port"]), timeout=10)
    named: list[int] = []

    def knows_gone(broker_id: int) -> bool:
        """The survivor's own view no longer lists the victim (its watch found it gone, or
        the new controller's update came): from then on it must not name it."""
        port = cluster.broker(broker_id)["admin_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=5) as r:
            listed = json.loads(r.read())["metadata"]["brokers"]
        return all(b["id"] != victim for b in listed)

    def ask_survivors() -> None:
        try:
            assert to_victim.recv(1) == b""
        except ConnectionResetError:
            pass
        to_victim.close()
        # The survivors hear of the death through their own connections, which a loaded
        # kernel may deliver a few ms after the client's: ask once each knows.
        for b in {1, 2, 3} - {victim}:
            wait_until(lambda b=b: knows_gone(b), 5, f"broker {b} to see broker {victim} gone")
        # (no topics: a client that follows none of the dead broker's partitions, as
        # librdkafka's admin client asking for the brokers only)
        named.extend(raw.metadata([]).controller_id for _ in range(20) for raw in survivors)

    new, took_s, still_registered = kill_and_time(
        cluster, zk_connect, victim,
        lambda: (c := controller_of(cluster)) != victim and c
        and all(partition_view(cluster, TOPIC, p)["leader"] not in (victim, -1) for p in led) and c,
        ask_survivors)
    for raw in survivors:
        raw.close()
    assert victim not in named, named
    print(f"\ncontroller {victim} killed: broker {new} controls and {len(led)} partitions moved after {took_s:.2f} s, "
          f"its registration {'still' if still_registered else 'no longer'} in ZooKeeper")
    assert still_registered, "the failover came only with the session expiry"
    for p in led:
        produce_one(boot, p)
