"""Network faults between brokers that are separate hosts (issue 14): each broker and
ZooKeeper in a network namespace of its own (`LocalCluster(netns=...)`), faults made with
packet drops, under a verifying acks=all producer and a consumer whose history the checker
holds against the final log."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from kafkalite.testing.cluster import LocalCluster
from kafkalite.testing.fault_workload import PARTITIONS, Workload
from kafkalite.testing.fixtures import TEST_BROKER_OVERRIDES
from kafkalite.testing.probes import fully_replicated, partition_view, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("iptables") is None,
                                reason="network namespaces need root, ip and iptables")



@pytest.fixture(scope="module")
def net_cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("netns-cluster"), brokers=3, overrides=dict(TEST_BROKER_OVERRIDES),
                     zk_tick_time_ms=500, netns=f"kt{os.getpid() % 100000}", small_log_dir="64m")
    try:
        c.up()
        yield c
    finally:
        c.down()


@pytest.fixture
def workload(net_cluster):
    made: list[Workload] = []

    def make(tag: str) -> Workload:
        made.append(Workload(net_cluster, tag))
        return made[-1]

    try:
        yield make
    finally:
        for w in made:
            w.stop()
        net_cluster.network().heal()


def pair_without_controller(cluster: LocalCluster, topic: str) -> tuple[int, int, int]:
    """(partition, its leader, one of its followers), neither of them the controller: a
    broker cut from the controller cannot shrink an ISR at all (AlterIsr goes through the
    controller, KIP-497), which is scenario 3's case, not the one these scenarios test."""
    controller = cluster.status()["controller"]
    p, view = next((p, v) for p in range(PARTITIONS) if (v := partition_view(cluster, topic, p))["leader"] != controller)
    return p, view["leader"], next(b for b in view["replicas"] if b not in (view["leader"], controller))


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> int:
    view = partition_view(cluster, topic, partition)
    assert view is not None and view["leader"] >= 0, view
    return view["leader"]


def test_an_isolated_leader_acknowledges_nothing_is_replaced_and_rejoins_after_the_heal(net_cluster, workload):
    """Scenario 1, the zombie leader: cut from ZooKeeper and the other brokers, still
    reachable by clients. It cannot acknowledge acks=all writes (its ISR is unreachable and
    only the controller could shrink it), a new leader takes over, clients follow it, and
    after the heal the old leader truncates whatever it appended alone and rejoins every ISR."""
    w = workload("zombie")
    net = net_cluster.network()
    victim = leader_of(net_cluster, w.topic, 0)
    net.isolate(str(victim))
    try:
        wait_until(lambda: (v := partition_view(net_cluster, w.topic, 0)) is not None and v["leader"] not in (victim, -1),
                   60, f"a new leader of {w.topic}-0 instead of the isolated broker {victim}")
        took = w.acked_again(90, "acknowledgements in every partition while the old leader is isolated")
        print(f"every partition acknowledged again {took:.1f} s after the new leader was seen")
        time.sleep(3)  # writes keep flowing to the new leaders while the zombie is cut off
    finally:
        net.heal()
    w.acked_again(60, "acknowledgements after the heal")
    wait_until(lambda: fully_replicated(net_cluster, w.topic, PARTITIONS), 90,
               f"broker {victim} back in every ISR of {w.topic} after the heal")
    w.finish()


def test_a_follower_cut_from_its_leader_leaves_the_isr_and_writes_go_on(net_cluster, workload):
    """Scenario 2: a follower isolated from its leader only (it still reaches ZooKeeper and
    the controller). The leader shrinks the ISR through AlterIsr once the follower lags
    replica.lag.time.max.ms, and acks=all writes with min.insync.replicas 2 go on; after
    the heal the follower catches up and rejoins."""
    w = workload("follower")
    net = net_cluster.network()
    p, leader, follower = pair_without_controller(net_cluster, w.topic)
    net.between([str(follower)], [str(leader)])
    try:
        wait_until(lambda: follower not in partition_view(net_cluster, w.topic, p)["isr"], 60,
                   f"broker {follower} out of the ISR of {w.topic}-{p} (its leader {leader} cannot reach it)")
        assert partition_view(net_cluster, w.topic, p)["leader"] == leader
        w.acked_again(60, "acknowledgements in every partition with the shrunk ISR")
    finally:
        net.heal()
    wait_until(lambda: fully_replicated(net_cluster, w.topic, PARTITIONS), 90, f"broker {follower} back in every ISR")
    w.finish()


@pytest.mark.parametrize("cut", ["from-brokers", "from-zookeeper"])
def test_a_controller_cut_from_the_brokers_or_from_zookeeper_loses_nothing_and_the_cluster_recovers(net_cluster, workload, cut):
    """Scenario 3: the controller cut from the other brokers but not from ZooKeeper, and the
    reverse (it loses its session and another broker becomes controller, while the old one
    still reaches the brokers). Nothing acknowledged is lost, and after the heal every
    partition is written again and every ISR is full.

    Cut from the brokers, the controller keeps its role (its session is fine) and with it
    every AlterIsr: partitions whose ISR must shrink wait for the heal, as they do in Kafka
    (AlterPartition goes through the controller), and so do acks=all writes to them. The
    test prints how many partitions were still written during the cut."""
    w = workload(f"ctl-{cut}")
    net = net_cluster.network()
    controller = net_cluster.status()["controller"]
    others = [str(b["id"]) for b in net_cluster.status()["brokers"] if b["id"] != controller]
    if cut == "from-brokers":
        net.between([str(controller)], others)
    else:
        net.between([str(controller)], ["zk"])
    try:
        if cut == "from-zookeeper":
            wait_until(lambda: net_cluster.status()["controller"] not in (controller, None), 60,
                       f"a new controller instead of broker {controller}, cut from ZooKeeper")
            w.acked_again(90, "acknowledgements in every partition under the new controller")
        else:
            mark = w.producer.sent
            time.sleep(10)  # past the session and replica lag timeouts
            with w.producer.lock:
                written = {a.partition for v, a in w.producer.acked.items() if int(v.rsplit(b"-", 1)[1]) >= mark}
            print(f"controller {controller} cut from the brokers: partitions {sorted(written)} of {PARTITIONS} "
                  "were still acknowledged during the cut")
    finally:
        net.heal()
    w.acked_again(90, "acknowledgements in every partition after the heal")
    wait_until(lambda: fully_replicated(net_cluster, w.topic, PARTITIONS), 90, "every ISR full after the heal")
    w.finish()


def test_a_one_way_partition_from_leader_to_follower_loses_nothing(net_cluster, workload):
    """Scenario 4: packets from a leader to one of its followers are dropped, the other
    way they pass. The follower's fetches reach the leader but no answer comes back: it
    falls out of the ISR, writes go on with the other follower, and after the heal it
    rejoins. (The follower's own partitions lose the leader as a follower the same way.)"""
    w = workload("oneway")
    net = net_cluster.network()
    p, leader, follower = pair_without_controller(net_cluster, w.topic)
    net.oneway(str(leader), str(follower))
    try:
        wait_until(lambda: follower not in partition_view(net_cluster, w.topic, p)["isr"], 60,
                   f"broker {follower} out of the ISR of {w.topic}-{p}")
        w.acked_again(60, "acknowledgements in every partition during the one-way partition")
    finally:
        net.heal()
    wait_until(lambda: fully_replicated(net_cluster, w.topic, PARTITIONS), 90, f"broker {follower} back in every ISR")
    w.finish()


def test_delay_and_packet_loss_between_every_member_lose_nothing(net_cluster, workload):
    """Scenario 6, short: every broker's outgoing packets delayed 50 ms and 5% of them lost
    for 20 s (tc netem where the kernel has it, else NFQUEUE to a delaying process).
    Writes go on, slower; nothing is lost; every ISR is full after the heal."""
    w = workload("lossy")
    net = net_cluster.network()
    try:
        for b in net_cluster.status()["brokers"]:
            print(net.netem(str(b["id"]), delay_ms=50, loss=0.05))
        time.sleep(5)
        took = w.acked_again(60, "acknowledgements in every partition under 50 ms delay and 5% loss")
        print(f"every partition acknowledged within {took:.1f} s under delay and loss")
        time.sleep(15)
    finally:
        net.heal()
    assert net.faults() == {}
    wait_until(lambda: fully_replicated(net_cluster, w.topic, PARTITIONS), 90, "every ISR full after the delay and loss")
    w.finish()


def test_bin_chaos_with_network_faults_reports_nothing_lost(net_cluster):
    """`bin/chaos --netns --disk`: network and disk faults mixed with process faults, then
    the checks."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "kafkalite.cli.chaos", "--dir", str(net_cluster.dir), "--netns", "--disk", "--seconds", "30",
         "--interval", "1", "--rate", "200", "--partitions", "3", "--seed", "7",
         "--actions", "isolate,isolate-zk,oneway,netem,kill,disk-full,bitflip"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "history check OK" in proc.stdout and "LIVENESS OK" in proc.stdout
    done = next(line for line in proc.stdout.splitlines() if " actions: " in line)
    print(done)
    assert any(a in done for a in ("isolate", "oneway", "netem")), done
    assert net_cluster.network().faults() == {}  # healed


@pytest.fixture(scope="module")
def ensemble_cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("netns-ensemble"), brokers=3, overrides=dict(TEST_BROKER_OVERRIDES),
                     zk_tick_time_ms=500, netns=f"ke{os.getpid() % 100000}", zk_ensemble=3)
    try:
        c.up()
        yield c
    finally:
        c.down()


def test_a_zookeeper_ensemble_without_quorum_for_10_s_loses_nothing_and_the_cluster_carries_on(ensemble_cluster):
    """Scenario 5: two of three ZooKeeper members cut from everything for 10 s, so the
    ensemble has no quorum. Brokers keep serving what needs no ZooKeeper write; after the
    heal the ensemble re-forms, the brokers' sessions and the controller carry on, and
    nothing acknowledged is lost."""
    status = ensemble_cluster.status()
    assert [m["name"] for m in status["zookeeper"]["members"]] == ["zk1", "zk2", "zk3"]
    w = Workload(ensemble_cluster, "quorum")
    net = ensemble_cluster.network()
    try:
        mark = w.producer.sent
        net.isolate("zk2")
        net.isolate("zk3")
        time.sleep(10)
        with w.producer.lock:
            written = {a.partition for v, a in w.producer.acked.items() if int(v.rsplit(b"-", 1)[1]) >= mark}
        print(f"without a ZooKeeper quorum for 10 s: partitions {sorted(written)} of {PARTITIONS} acknowledged writes")
    finally:
        net.heal()
    try:
        w.acked_again(90, "acknowledgements in every partition after the quorum is back")
        wait_until(lambda: ensemble_cluster.status()["controller"] is not None, 60, "a controller")
        w.finish()
    finally:
        w.stop()
