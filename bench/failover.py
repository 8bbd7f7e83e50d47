"""Failover benchmark: how long until every partition of a failed broker is led elsewhere
and accepts writes, and how long a controlled shutdown takes (seed discussion: "10K
partitions at 4 ms per ZooKeeper write could take 40 secs"; batching with multi is the fix).

For each partition count (RF 3 over 3 brokers) it starts a fresh local cluster, creates the
topic, waits for full ISRs, then:
  1. kill -9 a broker that is not the controller; the clock starts when its ZooKeeper
     registration disappears (session expiry) and stops when every partition it led has a
     new leader that accepted an acks=1 write (one record per partition, batched per leader);
  2. restarts it, waits for full ISRs, moves leadership back to the preferred replicas, then
     SIGTERMs a non-controller broker leading about a third of the partitions and measures
     the time until all its partitions are led elsewhere and accept writes, and until the
     process exits.

    .venv/bin/python bench/failover.py --partitions 1 1000 10000

Prints one row per partition count. Bounded: every wait has a deadline.

`--controller-kill --partitions 100000` (issue 13): a fresh cluster with the shipped
defaults holding that many partitions (topics of 10,000, RF --replication-factor, default
1), then kill -9 of the controller: the time until another broker holds /controller, and
until every partition the dead controller led has a new state in ZooKeeper (a new leader,
or offline at RF 1), i.e. the new controller has loaded everything and elected.

`--leader-kill --runs 5` measures what a client sees instead (issue 13), on one cluster with
the shipped defaults: a confluent-kafka producer (acks=all, idempotent) writes a record to
partition 0 of a 6-partition RF 3 topic (min.insync.replicas 2) every 2 ms; the leader of
partition 0 is killed with SIGKILL; the figure is the time from the kill to the first
acknowledgement of a record produced after it. The victim restarts and every ISR is full
again before the next run. `--victim controller` kills the controller when it leads
partition 0 (made so by a preferred election if needed), `--victim other` a broker that is
not the controller, `--victim any` (default) whoever leads it.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kazoo.client import KazooClient

from kafkalite.cli.admin_client import AdminClient
from kafkalite.log.records import encode_batch
from kafkalite.protocol.codec import decode_response, encode_request
from kafkalite.protocol.schema import ApiKey
from kafkalite.testing.cluster import LocalCluster, wait_pid_exit
from kafkalite.testing.ports import free_ports

TOPIC = "failover"
DEADLINE_S = 300


def wait_for(pred, timeout_s: float, what: str, interval_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval_s)
    raise TimeoutError(f"timed out waiting for {what}")


def leaders(admin: AdminClient) -> dict[int, tuple[int, list[int], list[int]]]:
    md = admin.metadata([TOPIC])
    t = md.topics.get(TOPIC)
    if t is None:
        return {}
    return {p.partition: (p.leader, p.isr, p.replicas) for p in t.partitions}


def fully_replicated(admin: AdminClient, n: int) -> bool:
    try:
        ls = leaders(admin)
    except Exception:  # noqa: BLE001 - brokers restarting
        return False
    return len(ls) == n and all(leader >= 0 and len(isr) == 3 for leader, isr, _ in ls.values())


def produce_one_each(cluster: LocalCluster, assignment: dict[int, int]) -> set[int]:
    """One acks=1 record to every partition, one Produce per leader; the partitions that failed."""
    import socket
    import struct

    failed: set[int] = set()
    record = encode_batch([(None, b"x", ())])
    by_leader: dict[int, list[int]] = {}
    for p, leader in assignment.items():
        by_leader.setdefault(leader, []).append(p)
    for leader, parts in by_leader.items():
        b = cluster.broker(leader)
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": p, "records": record} for p in parts]}]}
        try:
            with socket.create_connection(("127.0.0.1", b["port"]), timeout=30) as s:
                s.sendall(encode_request(ApiKey.PRODUCE, 7, 1, "bench", body))
                head = s.recv(4, socket.MSG_WAITALL)
                (size,) = struct.unpack(">i", head)
                data = b""
                while len(data) < size:
                    data += s.recv(size - len(data))
            _, resp = decode_response(ApiKey.PRODUCE, 7, data)
            for pr in resp["responses"][0]["partition_responses"]:
                if pr["error_code"] != 0:
                    failed.add(pr["index"])
        except OSError:
            failed.update(parts)
    return failed


def time_until_writable(cluster: LocalCluster, admin: AdminClient, affected: set[int], gone: int, start: float) -> float:
    """Offer one acks=1 record per pending partition to every other broker, round after
    round; a partition is done when some broker accepts it as leader. No Metadata polling,
    so the measurement adds little beyond the produce round trips."""
    pending = set(affected)
    others = [b for b in (1, 2, 3) if b != gone]
    deadline = start + DEADLINE_S
    while pending and time.monotonic() < deadline:
        for b in others:
            if not pending:
                break
            failed = produce_one_each(cluster, {p: b for p in pending})
            pending &= failed
        if pending:
            time.sleep(0.01)
    if pending:
        raise TimeoutError(f"{len(pending)} partitions never became writable")
    return time.monotonic() - start


def run(partitions: int, workdir: str) -> dict:
    ports = free_ports(9)
    zk_port = free_ports(1)[0]
    cluster = LocalCluster(os.path.join(workdir, f"p{partitions}"), brokers=3, zk_port=zk_port,
                           ports=[tuple(ports[i * 3 : i * 3 + 3]) for i in range(3)],
                           overrides={"zookeeper.session.timeout.ms": 6000, "log.level": "INFO",
                                      "auto.leader.rebalance.enable": "false", "request.timeout.ms": 120000})
    out: dict = {"partitions": partitions}
    try:
        status = cluster.up()
        admin = AdminClient(status["bootstrap"], request_timeout_ms=180000)
        t0 = time.monotonic()
        admin.create_topic(TOPIC, partitions, 3)
        wait_for(lambda: fully_replicated(admin, partitions), DEADLINE_S, "topic fully replicated", 0.5)
        out["create_s"] = time.monotonic() - t0
        controller = admin.metadata().controller_id
        ls = leaders(admin)
        victim = max((b for b in (1, 2, 3) if b != controller), key=lambda b: sum(1 for leader, _, _ in ls.values() if leader == b))
        affected = {p for p, (leader, _, _) in ls.items() if leader == victim}
        out["victim_is_controller"] = False
        if not affected:  # e.g. one partition led by the controller: then the controller it is
            victim = ls[0][0]
            affected = {p for p, (leader, _, _) in ls.items() if leader == victim}
            out["victim_is_controller"] = True
        out["led_by_victim"] = len(affected)

        # 1. kill -9; the clock starts when the registration znode goes away.
        zk = KazooClient(hosts=status["zookeeper"]["connect"], timeout=10)
        zk.start(timeout=10)
        gone = threading.Event()
        removed_at: list[float] = []

        def watch(event=None):
            if not zk.exists(f"/brokers/ids/{victim}", watch=watch):
                if not gone.is_set():
                    removed_at.append(time.monotonic())
                    gone.set()

        watch()
        killed_at = time.monotonic()
        cluster.kill(victim, "KILL")
        if not gone.wait(60):
            raise TimeoutError("registration never disappeared")
        start = removed_at[0]
        out["session_expiry_s"] = start - killed_at
        out["failover_s"] = time_until_writable(cluster, admin, affected, victim, start)
        zk.stop()
        zk.close()

        # 2. Controlled shutdown of a broker leading about a third.
        cluster.start(victim)
        wait_for(lambda: fully_replicated(admin, partitions), DEADLINE_S, "ISR full again", 0.5)
        admin.elect_preferred_leaders(None)
        wait_for(lambda: sum(1 for leader, _, _ in leaders(admin).values() if leader == victim) >= partitions // 3, 120, "preferred leaders back", 0.2)
        ls = leaders(admin)
        affected = {p for p, (leader, _, _) in ls.items() if leader == victim}
        out["led_at_shutdown"] = len(affected)
        pid = cluster.broker(victim)["pid"]
        start = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        out["controlled_moved_s"] = time_until_writable(cluster, admin, affected, victim, start)
        wait_pid_exit(pid, 120)
        out["controlled_exit_s"] = time.monotonic() - start
        admin.close()
    finally:
        cluster.down()
    return out


LEADER_KILL_PARTITIONS = 6
PRODUCE_INTERVAL_S = 0.002


def _ack_after_kill(cluster: LocalCluster, boot: str, partition: int, victim: int) -> tuple[float, int]:
    """Produce to `partition` every 2 ms, kill `victim` after 1 s: seconds from the kill to
    the first acknowledgement of a record produced after it, and the delivery errors."""
    from confluent_kafka import Producer

    acked: list[tuple[float, float]] = []  # (produced at, acknowledged at)
    errors: list = []
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "linger.ms": 0})

    def produce_now() -> None:
        sent = time.monotonic()
        producer.produce(TOPIC, value=b"x", partition=partition,
                         on_delivery=lambda err, msg: errors.append(err) if err else acked.append((sent, time.monotonic())))
        producer.poll(0)

    warm_until = time.monotonic() + 1.0
    while time.monotonic() < warm_until:
        produce_now()
        time.sleep(PRODUCE_INTERVAL_S)
    killed_at = time.monotonic()
    cluster.kill(victim, "KILL")
    first_after = None
    deadline = killed_at + 60
    while first_after is None and time.monotonic() < deadline:
        produce_now()
        time.sleep(PRODUCE_INTERVAL_S)
        first_after = next((a for s, a in acked if s >= killed_at), None)
    producer.flush(60)
    if first_after is None:
        raise TimeoutError("no acknowledgement within 60 s of the kill")
    return first_after - killed_at, len(errors)


def leader_kill(runs: int, victim_kind: str, workdir: str, overrides: dict | None = None) -> list[dict]:
    """Kill -9 of partition 0's leader `runs` times: kill -> first acks=all ack of a record
    produced after the kill, as a librdkafka producer sees it."""
    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import NewTopic

    ports = free_ports(10)
    cluster = LocalCluster(os.path.join(workdir, "leader-kill"), brokers=3, zk_port=ports[-1],
                           ports=[tuple(ports[i * 3: i * 3 + 3]) for i in range(3)],
                           overrides={"log.level": "INFO", **(overrides or {})})
    results: list[dict] = []
    try:
        status = cluster.up()
        boot = status["bootstrap"]
        kadmin = KafkaAdmin({"bootstrap.servers": boot})
        for f in kadmin.create_topics([NewTopic(TOPIC, LEADER_KILL_PARTITIONS, 3,
                                                config={"min.insync.replicas": "2"})]).values():
            f.result(60)
        admin = AdminClient(boot, request_timeout_ms=60000)
        wait_for(lambda: fully_replicated(admin, LEADER_KILL_PARTITIONS), DEADLINE_S, "topic fully replicated", 0.2)
        for run_no in range(runs):
            admin.elect_preferred_leaders(None)
            time.sleep(1.0)
            controller = admin.metadata().controller_id
            leader = leaders(admin)[0][0]
            if victim_kind == "controller" and leader != controller:
                raise SystemExit("--victim controller: partition 0 is not led by the controller; try --victim any")
            if victim_kind == "other" and leader == controller:
                partition_leaders = leaders(admin)
                other = next((p for p, (ldr, _, _) in sorted(partition_leaders.items()) if ldr != controller), None)
                if other is None:
                    raise SystemExit("the controller leads every partition")
                leader, partition = partition_leaders[other][0], other
            else:
                partition = 0
            first_after, errors = _ack_after_kill(cluster, boot, partition, leader)
            results.append({"run": run_no + 1, "victim": leader, "victim_was_controller": leader == controller,
                            "partition": partition, "failover_s": first_after, "errors": errors})
            print(f"run {run_no + 1}: killed broker {leader}{' (controller)' if leader == controller else ''}, leader of "
                  f"{TOPIC}-{partition}: first acks=all ack of a record produced after the kill {first_after:.3f} s "
                  f"later ({errors} delivery errors)", flush=True)
            cluster.start(leader)
            wait_for(lambda: fully_replicated(admin, LEADER_KILL_PARTITIONS), DEADLINE_S, "ISR full again", 0.2)
        admin.close()
    finally:
        cluster.down()
    return results


TOPIC_PARTITIONS_MAX = 10000  # one topic's assignment znode must stay under jute.maxbuffer (1 MiB)


SAMPLE_EVERY = 100  # controller kill: poll every 100th partition until it is re-elected
LOG_WAIT_S = 30  # controller kill: how long to wait for the new controller's take-over line


def controller_kill(partitions: int, rf: int, workdir: str) -> dict:
    """Issue 13: kill -9 of the controller of a cluster holding `partitions` partitions (in
    topics of at most 10,000), shipped defaults. Figures: from the kill to the new
    controller's registration in /controller, and to every partition the victim led having
    a state written by the new controller (a new leader, or none for RF 1: offline), read
    from ZooKeeper; plus the new controller's own "failover finished" time from its log."""
    from kafkalite.zk.client import ZkAdapter

    ports = free_ports(10)
    cluster = LocalCluster(os.path.join(workdir, f"ck{partitions}"), brokers=3, zk_port=ports[-1],
                           ports=[tuple(ports[i * 3: i * 3 + 3]) for i in range(3)], overrides={"log.level": "INFO"})
    out: dict = {"partitions": partitions, "rf": rf}
    try:
        status = cluster.up()
        admin = AdminClient(status["bootstrap"], request_timeout_ms=30000)
        t0 = time.monotonic()
        topics = []
        left = partitions
        while left > 0:
            name, n = f"ck{len(topics)}", min(left, TOPIC_PARTITIONS_MAX)
            try:
                admin.create_topic(name, n, rf)
            except Exception:  # noqa: BLE001 - TopicNotReadyError or a timeout: wait below
                pass
            admin.wait_for_leaders(name, n)
            topics.append((name, n))
            left -= n
        out["create_s"] = time.monotonic() - t0
        zk = KazooClient(hosts=status["zookeeper"]["connect"], timeout=10)
        zk.start(timeout=10)
        adapter = ZkAdapter(zk)
        tps = [(t, p) for t, n in topics for p in range(n)]
        states = adapter.get_partition_states(tps)
        controller = adapter.get_controller().broker_id
        victim_led = [tp for tp, (st, _v) in states.items() if st.leader == controller]
        out["victim"] = controller
        out["led_by_victim"] = len(victim_led)
        pids = {b["id"]: b["pid"] for b in cluster.status()["brokers"]}
        out["rss_mib"] = {b: _rss_mib(pid) for b, pid in pids.items()}
        out["fds"] = {b: len(os.listdir(f"/proc/{pid}/fd")) for b, pid in pids.items()}
        killed_at = time.monotonic()
        cluster.kill(controller, "KILL")

        def new_controller():
            info = adapter.get_controller()
            return info is not None and info.broker_id != controller and info.broker_id

        new = wait_for(new_controller, DEADLINE_S, "a new controller", 0.01)
        out["new_controller"] = new
        out["controller_s"] = time.monotonic() - killed_at
        # Until the new controller has rewritten every state (_poll_sample_then_all); the
        # figure includes the confirming read, so it errs on the late side.
        def still_led(tps: list) -> list:
            states_now = adapter.get_partition_states(tps)
            return [tp for tp in tps if states_now[tp][0].leader == controller]

        pending = _poll_sample_then_all(still_led, victim_led, killed_at + DEADLINE_S)
        if pending:
            raise TimeoutError(f"{len(pending)} partitions still led by the dead controller")
        out["elected_s"] = time.monotonic() - killed_at
        # The take-over logs its split once its requests to the brokers are out, which may
        # come after ZooKeeper shows the elections.
        out["failover_log"] = _last_lines(cluster.broker(new)["log"], ("controller failover finished",), wait_s=LOG_WAIT_S)
        # The victim restarts on its 1/3 of the partitions: how long until it is back
        # (registered, in the metadata), what its start-up heap settle took (it runs before
        # the registration, kafkalite.gc_pause.settle_now), and, with RF 1, until it leads
        # its partitions again (they were offline meanwhile).
        restarted_at = time.monotonic()
        cluster.start(controller, timeout_s=DEADLINE_S)
        out["restart_s"] = time.monotonic() - restarted_at
        if rf == 1:
            def not_led_yet(tps: list) -> list:
                states_now = adapter.get_partition_states(tps)
                return [tp for tp in tps if states_now[tp][0].leader != controller]

            pending = _poll_sample_then_all(not_led_yet, victim_led, restarted_at + DEADLINE_S)
            out["leads_again_s"] = None if pending else time.monotonic() - restarted_at
        out["restart_log"] = _last_lines(cluster.broker(controller)["log"], ("heap settled at start-up", "started in"))
        zk.stop()
        zk.close()
        admin.close()
    finally:
        cluster.down()
    return out


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _poll_sample_then_all(pending_of: Callable[[list], list], tps: list, deadline: float) -> list:
    """Poll a 1% sample of `tps` until `pending_of` leaves none of it, then confirm all of
    them in one read (and go on polling any still pending), until `deadline`; what is still
    pending then. Reading all 33,333 states every 0.1 s took about a core of this 2-core
    machine from the controller and ZooKeeper (the fourth pass)."""
    for pending in (tps[::SAMPLE_EVERY], tps):
        while pending and time.monotonic() < deadline:
            pending = pending_of(pending)
            if pending:
                time.sleep(0.1)
    return pending


def _last_lines(log_path: str, markers: tuple[str, ...], wait_s: float = 0.0) -> str:
    """The last log line containing each marker, message part only, joined with "; ";
    with `wait_s`, read again until every marker is found or that time has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        found = dict.fromkeys(markers, "")
        with open(log_path, errors="replace") as f:
            for line in f:
                for m in markers:
                    if m in line:  # "<time> INFO [broker N] <logger>: <message>"
                        found[m] = line.split("] ", 1)[-1].split(": ", 1)[-1].strip()
        if all(found.values()) or time.monotonic() >= deadline:
            return "; ".join(v for v in found.values() if v)
        time.sleep(0.1)


def main() -> int:
    ap = argparse.ArgumentParser(description="broker failover and controlled shutdown timings")
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 1000, 10000])
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--leader-kill", action="store_true", help="kill -9 of a partition leader under a producer, --runs times")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--victim", choices=("any", "other", "controller"), default="any")
    ap.add_argument("--no-process-watch", action="store_true",
                    help="controller.process.watch.enable=false: failover only at session expiry (the old behaviour)")
    ap.add_argument("--controller-kill", action="store_true",
                    help="kill -9 of the controller with --partitions partitions (RF --replication-factor)")
    ap.add_argument("--replication-factor", type=int, default=1, help="with --controller-kill (default 1)")
    args = ap.parse_args()
    if args.controller_kill:
        workdir = args.dir or tempfile.mkdtemp(prefix="kafkalite-failover-")
        for n in args.partitions:
            r = controller_kill(n, args.replication_factor, workdir)
            rss = " ".join(f"{v:.0f}" for v in r["rss_mib"].values())
            fds = " ".join(str(v) for v in r["fds"].values())
            print(f"{n} partitions RF {r['rf']}: created in {r['create_s']:.1f} s; broker RSS MiB {rss}, fds {fds}; "
                  f"killed controller {r['victim']} (leader of {r['led_by_victim']}): new controller {r['new_controller']} "
                  f"after {r['controller_s']:.2f} s, every partition it led re-elected in ZooKeeper after "
                  f"{r['elected_s']:.2f} s; new controller's log: {r['failover_log']}", flush=True)
            again = r.get("leads_again_s")
            print(f"  restarted broker {r['victim']}: back (registered, in the metadata) after {r['restart_s']:.2f} s"
                  + (f", leads its {r['led_by_victim']} partitions again after {again:.2f} s" if again is not None else "")
                  + f"; its log: {r['restart_log']}", flush=True)
        return 0
    if args.leader_kill:
        overrides = {"controller.process.watch.enable": False} if args.no_process_watch else {}
        results = leader_kill(args.runs, args.victim, args.dir or tempfile.mkdtemp(prefix="kafkalite-failover-"), overrides)
        times = sorted(r["failover_s"] for r in results)
        print(f"kill -9 -> first acks=all ack after it, {len(times)} runs: median {statistics.median(times):.3f} s, "
              f"max {times[-1]:.3f} s, min {times[0]:.3f} s")
        return 0
    workdir = args.dir or tempfile.mkdtemp(prefix="kafkalite-failover-")
    print(f"{'partitions':>10} {'create':>8} {'led':>6} {'expiry':>8} {'failover':>9} {'led@TERM':>9} {'moved':>8} {'exited':>8}")
    for n in args.partitions:
        r = run(n, workdir)
        print(f"{r['partitions']:>10} {r['create_s']:>7.1f}s {r['led_by_victim']:>6} {r['session_expiry_s']:>7.2f}s "
              f"{r['failover_s']:>8.3f}s{'*' if r['victim_is_controller'] else ' '}{r['led_at_shutdown']:>8} {r['controlled_moved_s']:>7.3f}s {r['controlled_exit_s']:>7.2f}s",
              flush=True)
    print("* the only leader was the controller, so that failover includes electing a new controller")
    print("failover: from the dead broker's ZooKeeper registration vanishing to every partition it led accepting a write")
    print("moved: from SIGTERM to every partition the broker led accepting a write elsewhere; exited: until the process ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
