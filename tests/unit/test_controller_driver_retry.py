"""The controller's asyncio driver: a failover that fails on ZooKeeper after winning
/controller must not leave this broker holding /controller without acting as controller
(nobody else could be elected until its session expired). It tries again. So does an
admin-path event (a reassignment) that fails on ZooKeeper: its watch will not fire again."""

from __future__ import annotations

import asyncio

from kafkalite.broker import controller as controller_module
from kafkalite.broker.controller import Controller
from kafkalite.broker.controller_events import Elect, ReassignmentChange
from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.zk.client import ControllerElection
from kafkalite.zk.errors import ZkConnectionLossError

SETTINGS = {"unclean.leader.election.enable": False, "controller.enable": True, "controller.socket.timeout.ms": 1000,
            "auto.leader.rebalance.enable": False, "leader.imbalance.per.broker.percentage": 10,
            "controller.process.watch.enable": True}


class FlakyZk:
    """The reads a failover makes; get_topics loses the connection the first time."""

    def __init__(self):
        self.topic_reads = 0
        self.reassignment_reads = 0
        self.fail_reassignment_reads = 0

    def try_become_controller(self, broker_id):
        return ControllerElection(7, 3)  # won, or (the retry) recognised as already ours

    def get_brokers(self):
        return {}

    def get_topics(self):
        self.topic_reads += 1
        if self.topic_reads == 1:
            raise ZkConnectionLossError("connection lost")
        return []

    def get_topic_assignments(self, names):
        return {}

    def get_partition_state_tuples(self, tps):
        return {}

    def get_topics_marked_for_deletion(self):
        return []

    def get_reassignment(self):
        self.reassignment_reads += 1
        if self.fail_reassignment_reads:
            self.fail_reassignment_reads -= 1
            raise ZkConnectionLossError("connection lost")
        return None

    def get_log_dir_failures(self):
        return {}

    def get_config_changes(self):
        return []

    def get_partition_admin_requests(self, kind):
        return {}

    def get(self, path):
        return None

    def resign_controller(self, broker_id):
        return True


def _started(zk) -> Controller:
    ctrl = Controller(1, SETTINGS, BrokerMetrics(), on_fatal=lambda e: None)
    ctrl.start(zk)  # type: ignore[arg-type]
    ctrl.enqueue(Elect())
    return ctrl


async def _until(condition, tries: int = 200) -> None:
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.01)


async def test_a_failover_that_fails_on_zookeeper_is_tried_again(monkeypatch):
    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    zk = FlakyZk()
    ctrl = _started(zk)
    await _until(lambda: ctrl.active)
    assert ctrl.active and zk.topic_reads == 2 and ctrl.core.epoch == 7
    await ctrl.close()


async def test_a_reassignment_event_that_fails_on_zookeeper_is_tried_again(monkeypatch):
    """Found by the simulator (issue 9, sweep seed 60): the controller lost its ZooKeeper
    connection (not its session) while handling a reassignment change; kazoo's watch had
    fired already, so the reassignment waited for the next admin change or failover."""
    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    zk = FlakyZk()
    ctrl = _started(zk)
    await _until(lambda: ctrl.active)
    assert ctrl.active
    reads = zk.reassignment_reads
    zk.fail_reassignment_reads = 1
    ctrl.enqueue(ReassignmentChange())
    await _until(lambda: zk.reassignment_reads >= reads + 2)
    assert zk.reassignment_reads == reads + 2  # failed once, then read again
    await ctrl.close()


async def test_a_failover_that_fails_on_zookeeper_after_it_became_active_tries_its_admin_paths_again(monkeypatch):
    """Found by the simulator (issue 9, sweep seed 2307): the failover (already active)
    lost its ZooKeeper connection while finishing a partition removal it found; nothing
    would handle the admin znode again until it changed. Here: a refused reassignment
    entry whose removal from the admin znode fails once."""
    from types import SimpleNamespace

    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    zk = FlakyZk()
    zk.topic_reads = 1  # no failure in get_topics
    removals: list = []

    def get_reassignment():
        zk.reassignment_reads += 1
        return (SimpleNamespace(partitions={("gone", 0): [1]}, throttle={}), 0) if len(removals) < 2 else None

    def remove_reassignment_entries(tps, epoch_version):
        removals.append(tps)
        if len(removals) == 1:
            raise ZkConnectionLossError("connection lost")

    zk.get_reassignment = get_reassignment  # type: ignore[method-assign]
    zk.remove_reassignment_entries = remove_reassignment_entries  # type: ignore[attr-defined]
    ctrl = _started(zk)
    await _until(lambda: len(removals) >= 2)
    assert ctrl.active and removals == [(("gone", 0),), (("gone", 0),)]
    await ctrl.close()


async def test_a_config_change_that_fails_on_zookeeper_is_handled_again(monkeypatch):
    """Issue 16: the topics a /config/changes notification names are re-read; a connection
    loss while reading them must not leave the notification counted as handled."""
    from kafkalite.broker.controller_events import ConfigChange

    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    zk = FlakyZk()
    zk.topic_reads = 1  # no failure in get_topics
    ctrl = _started(zk)
    await _until(lambda: ctrl.active)
    reads: list = []

    def get_topic_assignments(names):
        reads.append(list(names))
        if len(reads) == 1:
            raise ZkConnectionLossError("connection lost")
        return {}

    zk.get_topic_assignments = get_topic_assignments  # type: ignore[method-assign]
    zk.get_config_changes = lambda: [("config_change_0000000001", "topics/orders", 0.0)]  # type: ignore[method-assign]
    ctrl.enqueue(ConfigChange())
    await _until(lambda: len(reads) >= 2)
    assert reads == [["orders"], ["orders"]]
    ctrl.enqueue(ConfigChange())  # nothing new: not read again
    await asyncio.sleep(0.05)
    assert len(reads) == 2
    await ctrl.close()


async def test_a_broker_whose_process_answers_again_is_sent_its_leader_and_isr(monkeypatch):
    """The netns quorum-loss test, once in a full suite: broker 2, registered again after its
    session expired, answered the controller's Ping with its previous epoch and was failed
    (ProcessGone), then answered as itself (ProcessBack). The driver read /brokers/ids while
    2 was still gone, so the channel had no sender for it when the core sent 2 its
    LeaderAndIsr and UpdateMetadata: they were dropped, and 2 stayed on its old leader epochs,
    out of every ISR. Now every broker the core holds live has a sender before its sends."""
    from kafkalite.broker.controller_events import ProcessBack, ProcessGone
    from kafkalite.core.messages import LeaderAndIsr
    from kafkalite.zk.codec import BrokerRegistration, TopicAssignment

    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    zk = FlakyZk()
    zk.topic_reads = 1  # no failure in get_topics
    registrations = {b: (BrokerRegistration(b, "127.0.0.1", 1, 1, 1), 10 * b) for b in (1, 2)}
    zk.get_brokers = lambda: dict(registrations)  # type: ignore[method-assign]
    zk.get_topics = lambda: ["t"]  # type: ignore[method-assign]
    zk.get_topic_assignments = lambda names: {"t": (TopicAssignment({0: [1, 2]}, {}), 0)}  # type: ignore[method-assign]
    zk.get_partition_state_tuples = lambda tps: {("t", 0): ((1, 3, [1, 2], 7), 5, 100)}  # type: ignore[method-assign]
    zk.update_partition_states = lambda updates, epoch_version: {tp: updates[tp][1] + 1 for tp in updates}  # type: ignore[attr-defined]
    ctrl = _started(zk)
    await _until(lambda: ctrl.active)
    sent: list[tuple[int, object]] = []
    real_send = ctrl.channel.send

    def send(broker_id, request, future=None):
        delivered = real_send(broker_id, request, future)
        sent.append((broker_id, type(request).__name__, delivered))
        return delivered

    monkeypatch.setattr(ctrl.channel, "send", send)
    ctrl.enqueue(ProcessGone(2, 20))
    await _until(lambda: ctrl.core.gone.get(2) == 20 and 2 not in ctrl.channel.senders)
    assert 2 not in ctrl.core.live
    sent.clear()
    ctrl.enqueue(ProcessBack(2, 20))
    await _until(lambda: 2 in ctrl.core.live and any(b == 2 for b, _api, _ok in sent))
    to_2 = [(api, ok) for b, api, ok in sent if b == 2]
    assert (LeaderAndIsr.__name__, True) in to_2, sent
    assert all(ok for _api, ok in to_2), sent  # every send to it found its sender
    assert 2 in ctrl.channel.senders and ctrl.channel.senders[2].broker_epoch == 20
    await ctrl.close()


async def test_a_topic_change_that_fails_on_zookeeper_creating_the_states_is_tried_again(monkeypatch):
    """The topic's state znodes could not be created (the connection was lost during the
    multis): the event runs again, and every partition gets its state, instead of the topic
    waiting without leaders for the next controller failover."""
    from kafkalite.broker.controller_events import TopicChange
    from kafkalite.zk import codec

    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    zk = FlakyZk()
    zk.topic_reads = 1  # no failure in get_topics
    topics: list[str] = []
    creates: list[list] = []

    def get_topics():
        return list(topics)

    def get_topic_assignments(names):
        return {t: (codec.TopicAssignment({0: [1], 1: [1]}, {}, {}, {}), 0) for t in names if t in topics}

    def create_partition_states(states, epoch_version):
        creates.append(sorted(states))
        if len(creates) == 1:
            raise ZkConnectionLossError("connection lost")
        return {tp: 0 for tp in states}

    zk.get_topics = get_topics  # type: ignore[method-assign]
    zk.get_topic_assignments = get_topic_assignments  # type: ignore[method-assign]
    zk.create_partition_states = create_partition_states  # type: ignore[attr-defined]
    ctrl = _started(zk)
    await _until(lambda: ctrl.active)
    topics.append("new")
    ctrl.enqueue(TopicChange())
    await _until(lambda: len(creates) >= 2 and not ctrl.core.busy)
    assert creates == [[("new", 0), ("new", 1)], [("new", 0), ("new", 1)]]
    assert ctrl.core.states[("new", 0)].version == 0 == ctrl.core.states[("new", 1)].version  # (no live broker: offline)
    await ctrl.close()


async def test_retries_through_a_zookeeper_outage_stay_one_per_kind(monkeypatch):
    """Every event that fails on ZooKeeper while active is followed by a broker re-check,
    and an admin-path event by itself again. Through an outage these must not multiply
    (each failing retry scheduled one more re-check, each of which rescheduled itself):
    at most one retry of each kind is due at a time."""
    from kafkalite.broker.controller_events import BrokerChange, TopicDeletion

    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.02)
    zk = FlakyZk()
    zk.topic_reads = 1  # no failure in get_topics
    ctrl = _started(zk)
    await _until(lambda: ctrl.active)
    reads = {"brokers": 0, "deletions": 0}
    outage = {"on": True}

    def get_brokers():
        reads["brokers"] += 1
        if outage["on"]:
            raise ZkConnectionLossError("connection lost")
        return {}

    def get_topics_marked_for_deletion():
        reads["deletions"] += 1
        if outage["on"]:
            raise ZkConnectionLossError("connection lost")
        return []

    zk.get_brokers = get_brokers  # type: ignore[method-assign]
    zk.get_topics_marked_for_deletion = get_topics_marked_for_deletion  # type: ignore[method-assign]
    for _ in range(5):
        ctrl.enqueue(TopicDeletion())
    ctrl.enqueue(BrokerChange())
    await asyncio.sleep(0.6)  # about 30 retry periods
    assert reads["brokers"] <= 40 and reads["deletions"] <= 45  # one per period each, not growing
    assert len(ctrl._retries_due) <= 2
    outage["on"] = False
    await asyncio.sleep(0.1)
    assert not ctrl._retries_due  # once ZooKeeper answers, nothing is due any more
    await ctrl.close()


def _two_brokers(zk: FlakyZk, registrations: dict) -> None:
    """Brokers 1 (epoch 10) and 2 (epoch 20); topic t, partition 0 on [1, 2], led by 1."""
    from kafkalite.zk.codec import TopicAssignment

    zk.topic_reads = 1  # no failure in get_topics
    zk.get_brokers = lambda: dict(registrations)  # type: ignore[method-assign]
    zk.get_topics = lambda: ["t"]  # type: ignore[method-assign]
    zk.get_topic_assignments = lambda names: {"t": (TopicAssignment({0: [1, 2]}, {}), 0)}  # type: ignore[method-assign]
    zk.get_partition_state_tuples = lambda tps: {("t", 0): ((1, 3, [1, 2], 7), 5, 100)}  # type: ignore[method-assign]
    zk.update_partition_states = lambda updates, epoch_version: {tp: updates[tp][1] + 1 for tp in updates}  # type: ignore[attr-defined]


def _scripted_pings(monkeypatch, script: list) -> None:
    """ProcessWatch._ping answers from `script` (a str outcome, a PingAnswer, or an
    asyncio.Event to wait for before going on); then it waits for ever, as on a connection
    that stands."""
    from kafkalite.broker import broker_watch

    monkeypatch.setattr(broker_watch, "RETRY_S", 0.01)
    steps = iter(script)

    async def ping(self):
        for step in steps:
            if isinstance(step, asyncio.Event):
                await step.wait()
                continue
            return step
        await asyncio.sleep(3600)

    monkeypatch.setattr(broker_watch.ProcessWatch, "_ping", ping)


async def test_a_live_broker_a_new_controller_counts_gone_from_its_metadata_cache_is_taken_back(monkeypatch):
    """Found by review: a controller elected with evidence from its broker's metadata cache
    that broker 2 is gone (Activated.gone) made a fresh watch for it, which saw only ALIVE;
    the watch reported "back" only after a GONE of its own, so ProcessBack never came, and
    broker 2, alive and registered, stayed out of every ISR and was sent nothing (no
    LeaderAndIsr, no UpdateMetadata) until the next failover or its restart."""
    from kafkalite.broker.controller_channel import ControllerChannel
    from kafkalite.core.messages import LeaderAndIsr
    from kafkalite.core.process_watch import PingAnswer
    from kafkalite.zk.codec import BrokerRegistration

    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    _scripted_pings(monkeypatch, [PingAnswer(2, 20, "inc-2")])
    sent: list[tuple[int, str]] = []
    real_send = ControllerChannel.send

    def send(self, broker_id, request, future=None):
        sent.append((broker_id, type(request).__name__))
        return real_send(self, broker_id, request, future)

    monkeypatch.setattr(ControllerChannel, "send", send)
    zk = FlakyZk()
    _two_brokers(zk, {b: (BrokerRegistration(b, "127.0.0.1", 1, 1, 1), 10 * b) for b in (1, 2)})
    ctrl = Controller(1, SETTINGS, BrokerMetrics(), on_fatal=lambda e: None)
    ctrl.gone_evidence = lambda: {2: 20}  # wrong: broker 2's process runs
    ctrl.start(zk)  # type: ignore[arg-type]
    ctrl.enqueue(Elect())
    await _until(lambda: 2 in ctrl.core.live and (2, LeaderAndIsr.__name__) in sent)
    assert 2 in ctrl.core.live and not ctrl.core.gone
    assert (2, LeaderAndIsr.__name__) in sent, sent
    await ctrl.close()


async def test_a_process_back_that_fails_on_zookeeper_is_asked_again(monkeypatch):
    """Found by review: ProcessBack reads /brokers/ids first; when that read failed on
    ZooKeeper the event was dropped (it is not among RETRIED_AFTER_ZK_ERROR), the BrokerChange
    retried in its place keeps a gone registration gone while its epoch is unchanged, and the
    watch, answered, never called again: the live broker stayed failed. Now the watch is
    asked again after the next event that succeeds."""
    from kafkalite.core.process_watch import PingAnswer
    from kafkalite.zk.codec import BrokerRegistration

    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    release = asyncio.Event()
    _scripted_pings(monkeypatch, ["refused", release, PingAnswer(2, 20, "inc-2")])
    zk = FlakyZk()
    registrations = {b: (BrokerRegistration(b, "127.0.0.1", 1, 1, 1), 10 * b) for b in (1, 2)}
    _two_brokers(zk, registrations)
    reads = {"failed": 0, "fail": 0}

    def get_brokers():
        if reads["fail"]:
            reads["fail"] -= 1
            reads["failed"] += 1
            raise ZkConnectionLossError("connection lost")
        return dict(registrations)

    zk.get_brokers = get_brokers  # type: ignore[method-assign]
    ctrl = _started(zk)
    await _until(lambda: ctrl.core.gone.get(2) == 20)  # the watch's "refused": ProcessGone
    assert 2 not in ctrl.core.live
    reads["fail"] = 1  # the ProcessBack's read of /brokers/ids
    release.set()  # broker 2's process answers as registration 20
    await _until(lambda: 2 in ctrl.core.live)
    assert reads["failed"] == 1
    assert 2 in ctrl.core.live and not ctrl.core.gone
    await ctrl.close()


async def test_a_process_back_for_a_registration_replaced_in_zookeeper_is_a_broker_change(monkeypatch):
    """The watch of (2, 20) stands answering when 2's process, its session expired, holds
    registration 21: ProcessBack finds 20 gone from /brokers/ids. It hands the core what it
    read, so the gone entry ends there (2 is live at 21) instead of being asked about after
    every event until the BrokerChange arrives."""
    from kafkalite.broker.controller_events import ProcessBack, ProcessGone
    from kafkalite.zk.codec import BrokerRegistration

    monkeypatch.setattr(controller_module, "ELECTION_RETRY_S", 0.01)
    _scripted_pings(monkeypatch, [])
    zk = FlakyZk()
    registrations = {b: (BrokerRegistration(b, "127.0.0.1", 1, 1, 1), 10 * b) for b in (1, 2)}
    _two_brokers(zk, registrations)
    ctrl = _started(zk)
    await _until(lambda: ctrl.active)
    ctrl.enqueue(ProcessGone(2, 20))
    await _until(lambda: ctrl.core.gone.get(2) == 20)
    registrations[2] = (registrations[2][0], 21)
    ctrl.enqueue(ProcessBack(2, 20))  # no BrokerChange queued
    await _until(lambda: 2 in ctrl.core.live)
    assert ctrl.core.live[2].epoch == 21 and not ctrl.core.gone
    await ctrl.close()
