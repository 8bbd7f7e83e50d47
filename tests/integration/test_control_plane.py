"""Control plane on real processes and a real ZooKeeper: controller election and failover,
topic create/delete, broker restarts, epoch fencing of controller and broker requests."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.rpc.transport import RpcClient
from kafkalite.testing.probes import broker_state, partition_view, wait_until


def create_topic(boot: str, name: str, partitions: int, rf: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config or {})]).values():
        f.result(timeout=30)


def produce(boot: str, topic: str, values: list[bytes], acks: str = "all") -> list[tuple[int, int, bytes]]:
    p = Producer({"bootstrap.servers": boot, "acks": acks, "enable.idempotence": acks == "all", "message.timeout.ms": 30000})
    out: list = []
    errors: list = []

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            out.append((msg.partition(), msg.offset(), msg.value()))

    for v in values:
        p.produce(topic, value=v, on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    assert errors == []
    return out


def consume_all(boot: str, topic: str, partitions: int, expected: int, timeout_s: float = 30) -> dict[tuple[int, int], bytes]:
    c = Consumer({"bootstrap.servers": boot, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is None:
                    seen[(m.partition(), m.offset())] = m.value()
    finally:
        c.close()
    return seen


def controller_of(cluster) -> int | None:
    return cluster.status()["controller"]


def test_controller_killed_new_controller_elected_and_sends_init(cluster):
    boot = cluster.status()["bootstrap"]
    create_topic(boot, "ctl", 3, 3)
    old = controller_of(cluster)
    old_epoch = broker_state(cluster.broker(old)["admin_port"])["controller"]["epoch"]
    cluster.kill(old, "KILL")
    new = wait_until(lambda: (c := controller_of(cluster)) not in (None, old) and c, 30, "a new controller")
    new_state = wait_until(lambda: (s := broker_state(cluster.broker(new)["admin_port"]))["controller"].get("active") and s, 20, "controller active")
    new_epoch = new_state["controller"]["epoch"]
    assert new_epoch > old_epoch
    survivors = [b["id"] for b in cluster.status()["brokers"] if b["alive"]]
    for bid in survivors:
        wait_until(lambda: broker_state(cluster.broker(bid)["admin_port"])["last_init_controller_epoch"] == new_epoch, 20,
                   f"broker {bid} to get LeaderAndIsr(init) from epoch {new_epoch}")
    # Every partition the dead broker led has moved; writes still succeed with acks=all.
    for p in range(3):
        wait_until(lambda: (v := partition_view(cluster, "ctl", p)) and v["leader"] in survivors, 30, f"ctl-{p} re-led")
    acked = produce(boot, "ctl", [b"after-%d" % i for i in range(30)])
    assert len(acked) == 30


def test_topic_create_delete_end_to_end(cluster):
    boot = cluster.status()["bootstrap"]
    create_topic(boot, "doomed", 2, 3)
    brokers = cluster.status()["brokers"]
    wait_until(lambda: all({"doomed-0", "doomed-1"} <= set(broker_state(b["admin_port"])["partitions"]) for b in brokers), 30,
               "every broker to hold both partitions")
    log_dirs = [d for b in brokers for d in b["log_dirs"]]
    # A partition's directory is made by its first write (kafkalite.log.segment.LogSegment.deferred).
    assert not [name for d in log_dirs for name in os.listdir(d) if name.startswith("doomed-")]
    written = {p for p, _, _ in produce(boot, "doomed", [b"x"] * 20)}
    dirs = [os.path.join(d, f"doomed-{p}") for d in log_dirs for p in sorted(written)]
    wait_until(lambda: all(os.path.isdir(d) for d in dirs), 30, "every replica of a written partition to have its directory")
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.delete_topics(["doomed"], operation_timeout=30).values():
        f.result(timeout=30)
    wait_until(lambda: all("doomed" not in broker_state(b["admin_port"])["metadata"]["topics"] for b in cluster.status()["brokers"]), 30,
               "every broker to forget the topic")
    wait_until(lambda: not any(os.path.isdir(d) for d in dirs), 30, "partition directories removed")
    # The name is free again and the new topic starts from offset 0.
    create_topic(boot, "doomed", 1, 3)
    acked = produce(boot, "doomed", [b"fresh"])
    assert acked == [(0, 0, b"fresh")]


def test_broker_restart_keeps_data_and_offsets(cluster_factory):
    # Small segments and frequent fsyncs exercise rolling and the background flush jobs.
    c = cluster_factory(1, overrides={"log.segment.bytes": 4096, "log.flush.interval.messages": 20, "log.flush.interval.ms": 100})
    boot = c.status()["bootstrap"]
    create_topic(boot, "durable", 2, 1)
    acked = produce(boot, "durable", [b"m%d" % i for i in range(400)], acks="1")
    c.stop_broker(1)  # SIGTERM: clean shutdown
    c.start(1)
    wait_until(lambda: partition_view(c, "durable", 0) and partition_view(c, "durable", 1)["leader"] == 1, 30, "leaders back")
    seen = consume_all(boot, "durable", 2, 400)
    assert seen == {(p, o): v for p, o, v in acked}
    c.kill(1, "KILL")  # unclean stop: recovery scans the tail
    c.start(1)
    more = produce(boot, "durable", [b"n%d" % i for i in range(100)], acks="1")
    seen = consume_all(boot, "durable", 2, 500)
    assert seen == {(p, o): v for p, o, v in acked + more}
    # Offsets continue after the restart without gaps or repeats.
    for p in range(2):
        offsets = sorted(o for (pp, o) in seen if pp == p)
        assert offsets == list(range(len(offsets)))


def _rpc(port: int, api: str, body: dict, secret: bytes | None = None) -> dict:
    async def go():
        client = RpcClient("127.0.0.1", port, sender=999, secret=secret)
        try:
            header, _ = await client.call(api, body, timeout_ms=10000)
            return dict(header)
        finally:
            await client.close()

    return asyncio.run(go())


def test_stale_controller_and_broker_epochs_are_rejected(cluster):
    boot = cluster.status()["bootstrap"]
    create_topic(boot, "fenced", 1, 3)
    ctrl = controller_of(cluster)
    secret = cluster.inter_broker_secret()  # the RPC is authenticated (issue 15): speak it as a broker would
    follower = next(b for b in cluster.status()["brokers"] if b["id"] != ctrl)
    st = broker_state(follower["admin_port"])
    epoch, my_epoch = st["controller_epoch_seen"], st["broker_epoch"]
    part = ["fenced", 0, follower["id"], 99, [follower["id"]], 99, [follower["id"]]]
    stale_ctrl = _rpc(follower["inter_broker_port"], "LeaderAndIsr",
                      {"controller_id": 1, "controller_epoch": epoch - 1, "broker_epoch": my_epoch, "partitions": [part]}, secret=secret)
    assert stale_ctrl["error"] == 11  # STALE_CONTROLLER_EPOCH
    stale_broker = _rpc(follower["inter_broker_port"], "LeaderAndIsr",
                        {"controller_id": 1, "controller_epoch": epoch, "broker_epoch": my_epoch - 1, "partitions": [part]}, secret=secret)
    assert stale_broker["error"] == 77  # STALE_BROKER_EPOCH
    stale_meta = _rpc(follower["inter_broker_port"], "UpdateMetadata",
                      {"controller_id": 1, "controller_epoch": epoch - 1, "brokers": [], "partitions": {}}, secret=secret)
    assert stale_meta["error"] == 11
    # Nothing was applied: the partition keeps its real leader and the cache its brokers.
    after = broker_state(follower["admin_port"])
    assert after["partitions"]["fenced-0"]["leader_epoch"] != 99
    assert len(after["metadata"]["brokers"]) == 3
    # AlterIsr: to a broker that is not the controller, and with a stale broker epoch.
    not_ctrl = _rpc(follower["inter_broker_port"], "AlterIsr", {"broker_id": follower["id"], "broker_epoch": my_epoch, "partitions": []}, secret=secret)
    assert not_ctrl["error"] == 41  # NOT_CONTROLLER
    ctrl_port = cluster.broker(ctrl)["inter_broker_port"]
    stale_alter = _rpc(ctrl_port, "AlterIsr", {"broker_id": follower["id"], "broker_epoch": my_epoch - 1,
                                                "partitions": [["fenced", 0, follower["id"], 0, [follower["id"]], 0]]}, secret=secret)
    assert stale_alter["error"] == 77


def test_duplicate_broker_id_is_refused_with_a_clear_error(cluster, tmp_path):
    b1 = cluster.broker(1)
    cfg = tmp_path / "dup.properties"
    text = open(b1["config"]).read()
    from kafkalite.testing.ports import free_ports

    p1, p2, p3 = free_ports(3)
    text += f"listeners=PLAINTEXT://127.0.0.1:{p1}\ninter.broker.listener=127.0.0.1:{p2}\nadmin.listener=127.0.0.1:{p3}\nlog.dirs={tmp_path / 'data'}\n"
    cfg.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "broker", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "broker id 1" in proc.stderr.lower() or "broker 1" in proc.stderr.lower()
    assert "Traceback" not in proc.stderr


def test_bad_config_names_the_key_and_stops_start_up(tmp_path):
    cfg = tmp_path / "b.properties"
    cfg.write_text("broker.id=1\nlog.dirs=/tmp/x\n")
    for override, key in (["bogus.key=1", "bogus.key"], ["num.partitions=zero", "num.partitions"], ["min.insync.replicas=0", "min.insync.replicas"]):
        proc = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "broker", "--config", str(cfg), "--override", override],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert key in proc.stderr
        assert "Traceback" not in proc.stderr
