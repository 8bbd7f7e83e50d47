"""The controller's deletes are fenced on its controller epoch like its writes (found by
review: DeleteTopic and the admin-znode deletes were plain deletes, so a controller deposed
during a topic deletion's wait deleted what its successor and an admin had made since).
ZkAdapter's side is in tests/integration/test_zk_adapter.py."""

from __future__ import annotations

from kafkalite.broker.controller import Controller
from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.core import controller as core
from kafkalite.zk import paths

SETTINGS = {"unclean.leader.election.enable": False, "controller.enable": True, "controller.socket.timeout.ms": 1000,
            "auto.leader.rebalance.enable": False, "leader.imbalance.per.broker.percentage": 10,
            "controller.process.watch.enable": True}


class RecordingZk:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def delete_topic_znodes(self, *args):
        self.calls.append(("delete_topic_znodes", *args))

    def delete_if_exists(self, *args):
        self.calls.append(("delete_if_exists", *args))

    def delete_partition_admin_requests(self, *args):
        self.calls.append(("delete_partition_admin_requests", *args))

    def delete_partitions(self, *args):
        self.calls.append(("delete_partitions", *args))


async def test_every_delete_the_controller_makes_carries_its_epoch_fence():
    ctrl = Controller(1, SETTINGS, BrokerMetrics(), on_fatal=lambda e: None)
    zk = RecordingZk()
    ctrl.zk = zk  # type: ignore[assignment]
    ctrl.epoch_zk_version = 41
    await ctrl._perform(core.DeleteTopic("t"))
    await ctrl._perform(core.DeletePreferredElectionZnode())
    await ctrl._perform(core.DeletePartitionAdminZnodes("add", (("t", 2),)))
    await ctrl._perform(core.DeletePartitions((("t", 2),)))
    assert zk.calls == [
        ("delete_topic_znodes", "t", 41),
        ("delete_if_exists", paths.preferred_replica_election_path(), 41),
        ("delete_partition_admin_requests", "add", (("t", 2),), 41),
        ("delete_partitions", (("t", 2),), 41),
    ]
