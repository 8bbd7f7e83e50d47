"""A workload for fault tests (issue 14): a verifying idempotent acks=all producer and a
consumer-group member on a fresh RF 3 topic (min.insync.replicas 2), both recording a
history that `finish()` holds against the final log with the history checker, and the
replicas' segment files compared below the HW (guarantee 2)."""

from __future__ import annotations

import time

from kafkalite.cli import client_security
from kafkalite.testing.cluster import LocalCluster
from kafkalite.testing.group_watch import GroupWatch
from kafkalite.testing.history import History, check
from kafkalite.testing.probes import fully_replicated, partition_view, wait_until
from kafkalite.testing.verify import VerifyingProducer, partition_dirs, read_final_log, replica_logs_identical, resend_check

PARTITIONS = 3


class Workload:
    """A verifying idempotent acks=all producer and one consumer-group member, both
    recording a history; `finish()` stops them and runs the history checker, `stop()`
    only stops them (the `workload` fixture does, pass or fail)."""

    def __init__(self, cluster: LocalCluster, tag: str, partitions: int = PARTITIONS):
        from confluent_kafka.admin import AdminClient, NewTopic

        self.cluster = cluster
        self.boot = cluster.status()["bootstrap"]
        self.partitions = partitions
        self.topic = f"faults-{tag}"
        admin = AdminClient({"bootstrap.servers": self.boot, **client_security.librdkafka_config()})
        for f in admin.create_topics([NewTopic(self.topic, num_partitions=partitions, replication_factor=3,
                                               config={"min.insync.replicas": "2"})]).values():
            f.result(timeout=30)
        wait_until(lambda: fully_replicated(cluster, self.topic, partitions), 60, f"{self.topic} fully replicated")
        self.history = History()
        self.producer = VerifyingProducer(self.boot, self.topic, rate_per_s=200, seconds_max=300, prefix=tag,
                                          history=self.history)
        self.group = GroupWatch(self.boot, self.topic, f"{tag}-group", members=1, seconds_max=400, history=self.history)
        self.producer.start()
        self.group.start()
        wait_until(lambda: self.producer.snapshot()[0] >= 100, 60, "the producer's first acknowledgements")

    def stop(self) -> None:
        self.producer.stop()
        self.group.stop(timeout_s=30)
        self.producer.join(30)

    def acked_again(self, timeout_s: float, what: str) -> float:
        """Wait until, in every partition, a record sent from now on is acknowledged;
        returns the seconds taken."""
        began = time.monotonic()
        mark = self.producer.sent

        def every_partition() -> bool:
            with self.producer.lock:
                done = {a.partition for v, a in self.producer.acked.items() if int(v.rsplit(b"-", 1)[1]) >= mark}
            return len(done) == self.partitions

        wait_until(every_partition, timeout_s, what, interval_s=0.2)
        return time.monotonic() - began

    def finish(self) -> None:
        self.producer.stop()
        self.producer.join(120)
        wait_until(lambda: fully_replicated(self.cluster, self.topic, self.partitions), 90,
                   f"{self.topic} fully replicated after the heal")
        final = read_final_log(self.boot, self.topic, self.partitions)
        acked_max: dict[int, int] = {}
        for a in list(self.producer.acked.values()):
            acked_max[a.partition] = max(acked_max.get(a.partition, -1), a.offset)
        wait_until(lambda: self.group.caught_up(acked_max), 90, "the consumer to read every acknowledged record")
        self.group.stop()
        # librdkafka's own re-sends under a bumped epoch (issue #4953) are not the brokers'.
        explain = resend_check(self.cluster.status(), self.topic, self.partitions, final, self.producer.client_account).explain
        verdict = check(self.history.events(), final, explain=explain)
        print(verdict.summary())
        assert verdict.ok, verdict.report()
        assert verdict.counts["acked"] >= 500 and verdict.counts["reads"] >= verdict.counts["acked"]
        assert self.producer.fatal is None, self.producer.fatal
        status = self.cluster.status()
        for p in range(self.partitions):  # guarantee 2: byte-identical replicas below the HW
            view = partition_view(self.cluster, self.topic, p)
            assert view is not None
            hw = len(final.partitions[p]) + (final.partitions[p][0][0] if final.partitions[p] else 0)
            dirs = partition_dirs(status, self.topic, p, view["replicas"])
            assert len(dirs) == 3
            assert replica_logs_identical(dirs, hw) == []


