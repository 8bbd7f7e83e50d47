"""The core controller (kafkalite.core.controller): events in, Ready out. A dict stands in
for the state znodes (versions checked like ZooKeeper's conditional set); everything else
is the object both drivers run."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kafkalite.core import controller as core
from kafkalite.core.codes import ErrorCode
from kafkalite.core.election import PartitionState
from kafkalite.core.messages import (
    AlterIsrProposal,
    AlterIsrRequest,
    AlterIsrResponse,
    ControlledShutdownResponse,
    LeaderAndIsr,
    PreferredElectionResponse,
    StopReplica,
    UpdateMetadata,
)
from kafkalite.core.quota import FOLLOWER_RATE, LEADER_RATE

T0, T1 = ("t", 0), ("t", 1)


@dataclass
class Znodes:
    """Conditional sets and creates of state znodes, and a log of what was written."""

    nodes: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    writes: list[tuple[tuple[str, int], PartitionState]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    interfere: dict[tuple[str, int], PartitionState] = field(default_factory=dict)  # written by "someone else" first
    topics: dict[str, core.Topic] = field(default_factory=dict)  # topic znodes the controller wrote
    reassign: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)  # /admin/reassign_partitions
    admin_deleted: list[tuple[str, tuple]] = field(default_factory=list)

    def perform(self, op: core.ZkOperation) -> object:
        match op:
            case core.WriteStates(updates=updates):
                out = {}
                for tp, (st, expected) in updates.items():
                    if tp in self.interfere:
                        self.nodes[tp] = self.interfere.pop(tp)
                    current = self.nodes.get(tp)
                    if current is None or current.version != expected:
                        out[tp] = core.Stale(current)
                        continue
                    self.nodes[tp] = PartitionState(st.leader, st.leader_epoch, st.isr, expected + 1, st.controller_epoch)
                    self.writes.append((tp, self.nodes[tp]))
                    out[tp] = core.Written(expected + 1)
                return out
            case core.CreateStates(states=states):
                out = {}
                for tp, st in states.items():
                    if tp in self.nodes:
                        out[tp] = core.Stale(self.nodes[tp])
                    else:
                        self.nodes[tp] = PartitionState(st.leader, st.leader_epoch, st.isr, 0, st.controller_epoch)
                        out[tp] = core.Written(0)
                return out
            case core.DeleteTopic(topic=topic):
                self.deleted.append(topic)
            case core.WriteTopic(topic=topic, assignment=assignment):
                self.topics[topic] = assignment
                return core.Written(1)
            case core.RemoveReassignments(partitions=tps):
                for tp in tps:
                    self.reassign.pop(tp, None)
            case core.DeletePartitions(partitions=tps):
                for tp in tps:
                    self.nodes.pop(tp, None)
            case core.DeletePartitionAdminZnodes(kind=kind, partitions=tps):
                self.admin_deleted.append((kind, tps))
        return None


@dataclass
class Run:
    sends: list[core.Send] = field(default_factory=list)
    answers: list[core.Answer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to(self, broker: int, kind: type) -> list:
        return [s.request for s in self.sends if s.broker_id == broker and isinstance(s.request, kind)]


def drive(ctrl: core.Controller, zk: Znodes, event: core.ControllerEvent, now_ms: int = 0) -> Run:
    run = Run()
    ready = ctrl.handle(event, now_ms)
    while True:
        run.sends += ready.sends
        run.answers += ready.answers
        run.notes += [n.text for n in ready.notes]
        if ready.io is None:
            assert not ctrl.busy
            return run
        ready = ctrl.resume(zk.perform(ready.io), now_ms)


def brokers(*ids: int, epochs: dict[int, int] | None = None, unclean: tuple[int, ...] = ()) -> dict[int, core.LiveBroker]:
    """Registrations; those in `unclean` came back from a crash (LiveBroker.unclean_start)."""
    return {b: core.LiveBroker(b, (epochs or {}).get(b, 10 * b), unclean_start=b in unclean) for b in ids}


TOPIC = core.Topic({0: (1, 2, 3), 1: (2, 3, 1)})


def active(zk: Znodes, live=(1, 2, 3), states=None, zxid=None, topics=None) -> tuple[core.Controller, Run]:
    ctrl = core.Controller(1)
    if states is None:
        states = {T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)}
    zk.nodes.update(states)
    run = drive(ctrl, zk, core.Activated(2, brokers(*live), topics or {"t": TOPIC}, dict(zk.nodes), zxid or {}))
    return ctrl, run


def test_activation_creates_missing_states_and_tells_every_broker_with_init():
    zk = Znodes()
    ctrl, run = active(zk, states={})
    assert zk.nodes[T0].leader == 1 and zk.nodes[T1].leader == 2
    for b in (1, 2, 3):
        (lai,) = run.to(b, LeaderAndIsr)
        assert lai.init and lai.broker_epoch == 10 * b
        assert {p.topic_partition for p in lai.partitions} == {T0, T1}
        assert any(um.full for um in run.to(b, UpdateMetadata))
    assert ctrl.describe()["offline_partitions"] == 0


def test_a_dead_leader_is_replaced_at_a_new_epoch_and_everyone_hears():
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.BrokersChanged(brokers(2, 3)))
    assert zk.nodes[T0] == PartitionState(2, 1, (2, 3), 1, 2)
    assert zk.nodes[T1] == PartitionState(2, 1, (2, 3), 1, 2)  # a pure shrink bumps the epoch too
    for b in (2, 3):
        parts = {p.topic_partition: p for lai in run.to(b, LeaderAndIsr) for p in lai.partitions}
        assert parts[T0].leader == 2 and parts[T0].leader_epoch == 1 and parts[T0].partition_epoch == 1
    assert run.to(1, LeaderAndIsr) == []
    assert any(m.offline == (1,) for um in run.to(3, UpdateMetadata) for m in um.partitions)


def test_a_gone_process_is_handled_as_failed_before_its_session_ends_and_its_registration_no_longer_counts():
    """Issue 13: the controller's connection to broker 1 closed and reconnecting was
    refused. Broker 1 is failed at once (new leaders at new epochs), and the BrokersChanged
    events that still list its registration (until the session expires) do not bring it
    back; its next incarnation (a new epoch) does."""
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.BrokerProcessGone(1, 10))
    assert zk.nodes[T0] == PartitionState(2, 1, (2, 3), 1, 2)
    assert sorted(ctrl.live) == [2, 3] and ctrl.registrations() == {1: 10, 2: 20, 3: 30}
    assert run.to(1, LeaderAndIsr) == [] and run.to(2, LeaderAndIsr)
    assert any("is gone" in n for n in run.notes)
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3)))  # its registration is still there
    assert sorted(ctrl.live) == [2, 3] and run.sends == [] and zk.nodes[T0].leader == 2
    # stale evidence (an older epoch, or a broker already failed) changes nothing
    assert drive(ctrl, zk, core.BrokerProcessGone(2, 19)).sends == []
    assert drive(ctrl, zk, core.BrokerProcessGone(1, 10)).sends == []
    # the session expired (the registration went), then the restarted broker registered
    drive(ctrl, zk, core.BrokersChanged(brokers(2, 3)))
    assert ctrl.gone == {}
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, epochs={1: 11})))
    assert sorted(ctrl.live) == [1, 2, 3] and run.to(1, LeaderAndIsr)[0].init


def test_a_registration_known_gone_at_failover_is_failed_from_the_start_and_told_nothing():
    """Issue 13: the new controller's own broker already found the previous controller's
    process gone (its kill -9). The take-over elects for its partitions in the same pass,
    builds no LeaderAndIsr or UpdateMetadata for it, and keeps its registration counted
    until it leaves ZooKeeper; stale evidence (another epoch) is ignored."""
    zk = Znodes()
    zk.nodes.update({T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    ctrl = core.Controller(2)
    run = drive(ctrl, zk, core.Activated(2, brokers(1, 2, 3), {"t": TOPIC}, dict(zk.nodes), {}, gone={1: 10, 3: 29}))
    assert sorted(ctrl.live) == [2, 3] and ctrl.gone == {1: 10}
    assert ctrl.registrations() == {1: 10, 2: 20, 3: 30}
    assert zk.nodes[T0] == PartitionState(2, 1, (2, 3), 1, 2)
    assert zk.nodes[T1] == PartitionState(2, 1, (2, 3), 1, 2)
    assert run.to(1, LeaderAndIsr) == [] and run.to(1, UpdateMetadata) == []
    assert all(1 not in {b.id for b in um.brokers} for um in run.to(2, UpdateMetadata))
    assert any("found gone before this failover" in n for n in run.notes)
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3)))  # its registration is still there
    assert sorted(ctrl.live) == [2, 3] and run.sends == []
    drive(ctrl, zk, core.BrokersChanged(brokers(2, 3)))  # its session expired
    assert ctrl.gone == {}


def test_a_take_over_elects_before_it_tells_anyone_and_tells_each_broker_once():
    """Issue 13: the new controller writes the elections for the dead broker's partitions
    before it sends anything, so the brokers are not decoding a full UpdateMetadata and a
    LeaderAndIsr of all their partitions while it writes, and its `init` requests already
    carry the new leaders: one LeaderAndIsr and one UpdateMetadata per broker."""
    zk = Znodes()
    zk.nodes.update({T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    ctrl = core.Controller(2)
    ready = ctrl.handle(core.Activated(2, brokers(1, 2, 3), {"t": TOPIC}, dict(zk.nodes), {}, gone={1: 10}), 0)
    assert isinstance(ready.io, core.WriteStates) and ready.sends == []
    run = Run()
    while ready.io is not None:
        ready = ctrl.resume(zk.perform(ready.io), 0)
        run.sends += ready.sends
    for b in (2, 3):
        (lai,) = run.to(b, LeaderAndIsr)
        (um,) = run.to(b, UpdateMetadata)
        assert lai.init and um.full
        assert {p.topic_partition: (p.leader, p.leader_epoch) for p in lai.partitions} == {T0: (2, 1), T1: (2, 1)}
        assert {(m.topic, m.partition): m.leader for m in um.partitions} == {T0: 2, T1: 2}


def test_a_take_over_aborted_on_zookeeper_before_telling_anyone_tells_them_what_it_holds():
    zk = Znodes()
    zk.nodes.update({T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    ctrl = core.Controller(2)
    assert isinstance(ctrl.handle(core.Activated(2, brokers(1, 2, 3), {"t": TOPIC}, dict(zk.nodes), {}, gone={1: 10}), 0).io,
                      core.WriteStates)
    ready = ctrl.abort(ErrorCode.NOT_CONTROLLER)  # the election's write failed: connection loss
    assert not ctrl.busy and ctrl.active
    for b in (2, 3):
        (lai,) = [s.request for s in ready.sends if s.broker_id == b and isinstance(s.request, LeaderAndIsr)]
        assert lai.init and {p.topic_partition: p.leader for p in lai.partitions} == {T0: 1, T1: 2}
    assert ctrl.abort(ErrorCode.NOT_CONTROLLER).sends == []  # told once
    # Fenced by a newer controller: this one tells nobody anything.
    ctrl2 = core.Controller(2)
    ctrl2.handle(core.Activated(2, brokers(1, 2, 3), {"t": TOPIC}, dict(zk.nodes), {}, gone={1: 10}), 0)
    assert ctrl2.abort(ErrorCode.NOT_CONTROLLER, deposed=True).sends == []
    assert ctrl2.resign().sends == []


def test_a_restarted_broker_registering_while_its_old_registration_is_gone_is_a_start():
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.BrokerProcessGone(1, 10))
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, epochs={1: 11})))  # expired and re-registered at once
    assert ctrl.live[1].epoch == 11 and ctrl.gone == {}
    assert run.to(1, LeaderAndIsr)[0].init and zk.nodes[T0].leader == 2


def test_wrong_evidence_fences_the_zombie_and_it_comes_back_when_it_answers():
    """Were the evidence wrong (broker 1 alive), it is still safe: its partitions moved at
    new leader epochs, and its AlterIsr is refused (not live); when it answers again as
    the same registration it is live again, told everything with init."""
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.BrokerProcessGone(1, 10))
    proposal = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 0, (1,), 0),))
    run = drive(ctrl, zk, core.AlterIsrRequested(proposal, "reply"))
    assert run.answers[0].response.error == ErrorCode.STALE_BROKER_EPOCH
    assert zk.nodes[T0].leader == 2
    run = drive(ctrl, zk, core.BrokerProcessBack(core.LiveBroker(1, 10)))
    assert sorted(ctrl.live) == [1, 2, 3] and ctrl.gone == {}
    assert run.to(1, LeaderAndIsr)[0].init
    assert drive(ctrl, zk, core.BrokerProcessBack(core.LiveBroker(1, 10))).sends == []  # once


def test_a_bounced_broker_is_handled_as_failed_then_started():
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, epochs={1: 99})))
    assert zk.nodes[T0].leader == 2  # lost its leadership at a new epoch
    assert 1 not in zk.nodes[T0].isr
    assert run.to(1, LeaderAndIsr)  # then told, as started, what it replicates
    assert all(lai.broker_epoch == 99 for lai in run.to(1, LeaderAndIsr))


def test_a_broker_that_registers_again_is_told_everything_it_replicates_with_init():
    """Found by the simulator (issue 9, seed 5 of the sweep with admin actions): a broker
    whose session expired without a restart (a long pause) is not registered while a
    partition is removed or moved away from it, so no StopReplica(delete) reaches it, and
    it does not restart, so seed E's start-up check does not run either. Told what it
    replicates with `init` when it registers again, it drops what it no longer has."""
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.BrokersChanged(brokers(2, 3)))
    run = drive(ctrl, zk, core.PartitionsRemoveRequested((T1,)))
    assert run.to(1, StopReplica) == []  # not registered: nobody to send it to
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, epochs={1: 99})))
    lai = run.to(1, LeaderAndIsr)[0]
    assert lai.init and lai.broker_epoch == 99  # its replica of T1 goes (ReplicaManager: not listed)
    assert {p.topic_partition for p in lai.partitions} == {T0}
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, epochs={1: 100})))  # bounced: the same
    assert run.to(1, LeaderAndIsr)[0].init


def test_a_bounced_broker_out_of_the_isr_gets_its_leaders_a_new_epoch_so_a_stale_expansion_is_refused():
    """Found by the simulator (issue 9, sweep seed 4655): the leader of T0 saw broker 3
    catch up and proposed it for the ISR; broker 3 then crashed (losing its unflushed
    log), restarted and registered again before the controller got to the proposal. The
    controller handled the bounce first (3 was not in the ISR: nothing changed) and then
    added 3, with an empty log, on the strength of what its previous incarnation had
    fetched (KIP-903's case). The bounce now bumps the leader epoch of every partition the
    broker replicates outside the ISR: the leader forgets the old incarnation's progress
    and the stale proposal, built at the old leader epoch, is refused."""
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(1, 0, (1, 2), 0, 1), T1: PartitionState(2, 0, (2, 1), 0, 1)})
    stale = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 0, (1, 2, 3), 0),))
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, epochs={3: 99})))
    assert zk.nodes[T0] == PartitionState(1, 1, (1, 2), 1, 2)  # same leader and ISR, a new epoch
    assert zk.nodes[T1].leader_epoch == 1
    assert any(p.topic_partition == T0 and p.leader_epoch == 1 for lai in run.to(1, LeaderAndIsr) for p in lai.partitions)
    run = drive(ctrl, zk, core.AlterIsrRequested(stale, "reply"))
    assert run.answers[0].response.partitions[0].error == ErrorCode.FENCED_LEADER_EPOCH  # built at epoch 0
    assert zk.nodes[T0].isr == (1, 2)


def test_a_stale_version_is_decided_again_from_what_is_there():
    """Issue 8: the old shell re-wrote its first decision on the fresh version; the core
    decides again. Here someone else already moved T0's leadership to 3: with 1 dead,
    nothing is left to change, and 3 keeps leading at the epoch it was given."""
    zk = Znodes()
    ctrl, _ = active(zk)
    zk.interfere[T0] = PartitionState(3, 5, (3, 2), 7, 1)
    drive(ctrl, zk, core.BrokersChanged(brokers(2, 3)))
    assert zk.nodes[T0] == PartitionState(3, 5, (3, 2), 7, 1)
    assert ctrl.states[T0] == zk.nodes[T0]


def test_alter_isr_writes_and_answers_the_new_partition_epoch():
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(1, 0, (1, 2), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    request = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 0, (1, 2, 3), 0),))
    run = drive(ctrl, zk, core.AlterIsrRequested(request, "reply"))
    (answer,) = run.answers
    assert answer.reply_to == "reply"
    assert answer.response == AlterIsrResponse(0, answer.response.partitions)
    (r,) = answer.response.partitions
    assert (r.error, r.isr, r.partition_epoch) == (0, (1, 2, 3), 1)
    assert zk.nodes[T0].isr == (1, 2, 3)


def test_alter_isr_on_a_moved_znode_answers_invalid_update_version_and_writes_nothing_more():
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(1, 0, (1, 2), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    zk.interfere[T0] = PartitionState(1, 0, (1,), 1, 1)
    request = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 0, (1, 2, 3), 0),))
    run = drive(ctrl, zk, core.AlterIsrRequested(request, "reply"))
    (r,) = run.answers[0].response.partitions
    assert r.error == ErrorCode.INVALID_UPDATE_VERSION and r.partition_epoch == 1
    assert zk.writes == []


def test_an_expansion_refused_for_a_dead_broker_fences_the_proposal_so_no_copy_of_it_commits_later():
    """Found by the simulator (issue 9, sweep seed 7804): the leader proposed adding
    broker 3, which was fetching but had lost its registration; the controller (slow,
    waiting for StopReplica answers) refused it, and the leader fell back to its committed
    ISR. Broker 3 registered again, and another copy of the same proposal (a retry after a
    timeout, or a duplicate) was accepted: ZooKeeper's ISR had broker 3, the leader's did
    not, and it acknowledged records broker 3 lacked. The refusal now gives the leader a
    new epoch, so every other copy of the proposal is fenced."""
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(1, 0, (1, 2), 0, 1), T1: PartitionState(2, 0, (2, 1), 0, 1)})
    drive(ctrl, zk, core.BrokersChanged(brokers(1, 2)))
    proposal = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 0, (1, 2, 3), 0),))
    run = drive(ctrl, zk, core.AlterIsrRequested(proposal, "first"))
    assert run.answers[0].response.partitions[0].error == ErrorCode.INVALID_REQUEST
    assert zk.nodes[T0] == PartitionState(1, 1, (1, 2), 1, 2)  # same leader and ISR, a new epoch
    assert any(p.topic_partition == T0 and p.leader_epoch == 1 for lai in run.to(1, LeaderAndIsr) for p in lai.partitions)
    drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3)))
    run = drive(ctrl, zk, core.AlterIsrRequested(proposal, "again"))
    assert run.answers[0].response.partitions[0].error == ErrorCode.FENCED_LEADER_EPOCH
    assert zk.nodes[T0].isr == (1, 2)


def test_an_expansion_built_on_an_earlier_incarnation_of_the_new_member_is_refused_and_fenced():
    """KIP-903, found by the simulator (sweep seed 310507): the leader proposed adding
    broker 3 from what it fetched before it crashed (and lost its unflushed log). The
    proposal was retried through a controller failover; the new controller never saw
    broker 3's old registration, so the restart was a plain start to it, and it accepted
    the proposal once broker 3 was registered again: an ISR member without the records the
    leader had acknowledged. A proposal names each member's broker epoch as the leader saw
    it fetch; one that differs from the live registration is refused, and the leader gets
    a new epoch so no copy of it commits later."""
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(1, 0, (1, 2), 0, 1), T1: PartitionState(2, 0, (2, 1), 0, 1)})
    assert ctrl.live[3].epoch == 30
    stale = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 0, (1, 2, 3), 0, (-1, 20, 29)),))
    run = drive(ctrl, zk, core.AlterIsrRequested(stale, "stale"))
    assert run.answers[0].response.partitions[0].error == ErrorCode.INVALID_REQUEST
    assert zk.nodes[T0] == PartitionState(1, 1, (1, 2), 1, 2)  # same leader and ISR, a new epoch
    # The leader, at its new epoch, hears from broker 3's current incarnation and proposes again.
    fresh = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 1, (1, 2, 3), 1, (-1, 20, 30)),))
    run = drive(ctrl, zk, core.AlterIsrRequested(fresh, "fresh"))
    assert run.answers[0].response.partitions[0].error == ErrorCode.NONE
    assert zk.nodes[T0].isr == (1, 2, 3)
    # A sender that names no epochs (an older broker) is judged as before; epochs that do
    # not match the ISR they describe are refused.
    older = AlterIsrRequest(2, 20, (AlterIsrProposal("t", 1, 2, 0, (2, 1, 3), 0),))
    assert drive(ctrl, zk, core.AlterIsrRequested(older, "older")).answers[0].response.partitions[0].error == ErrorCode.NONE
    assert zk.nodes[T1].isr == (2, 1, 3)
    garbled = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 1, (1, 2), 2, (-1,)),))
    assert drive(ctrl, zk, core.AlterIsrRequested(garbled, "garbled")).answers[0].response.partitions[0].error == ErrorCode.INVALID_REQUEST


def test_alter_isr_proposal_epochs_cross_the_wire_and_an_older_form_reads_without_them():
    request = AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 4, (1, 3), 7, (-1, 30)),))
    assert AlterIsrRequest.from_wire(request.to_wire()) == request
    older = {"broker_id": 1, "broker_epoch": 10, "partitions": [["t", 0, 1, 4, [1, 3], 7]]}
    assert AlterIsrRequest.from_wire(older).partitions[0].new_isr_epochs == ()
    # A controller from before the epochs unpacks each row into exactly six names: the
    # epochs must not be a seventh (it raised there, and a controller ends on that).
    for t, p, leader, epoch, isr, version in request.to_wire()["partitions"]:
        assert (t, p, leader, epoch, isr, version) == ("t", 0, 1, 4, [1, 3], 7)
    # The brokers of 5f11616-8d5ec81 sent them as a seventh field: still read.
    seventh = {"broker_id": 1, "broker_epoch": 10, "partitions": [["t", 0, 1, 4, [1, 3], 7, [-1, 30]]]}
    assert AlterIsrRequest.from_wire(seventh) == request
    with pytest.raises(ValueError):
        AlterIsrRequest.from_wire({**request.to_wire(), "isr_epochs": [[-1, 30], [-1, 30]]})


class ZkLostAt(Znodes):
    """Fails (as a connection loss would) the first state write that names `tp`."""

    def __init__(self, tp, **kw):
        super().__init__(**kw)
        self.fail_tp = tp

    def perform(self, op):
        if self.fail_tp is not None and isinstance(op, core.WriteStates) and self.fail_tp in op.updates:
            self.fail_tp = None
            raise ConnectionError("ZooKeeper connection lost")
        return super().perform(op)


def drive_until_lost(ctrl: core.Controller, zk: Znodes, event: core.ControllerEvent) -> None:
    ready = ctrl.handle(event, 0)
    while ready.io is not None:
        try:
            outcome = zk.perform(ready.io)
        except ConnectionError:
            ctrl.abort(ErrorCode.NOT_CONTROLLER)
            return
        ready = ctrl.resume(outcome, 0)
    raise AssertionError("the write did not fail")


def test_a_broker_failure_whose_election_failed_on_zookeeper_is_elected_by_the_recheck():
    """Broker 1 died; the election's write failed (a connection loss) and the event was
    dropped, with broker 1 already out of the live set. The shell re-checks with the same
    registrations: nothing differs, yet T0 must get a new leader then, not at the next
    broker change or failover."""
    zk = ZkLostAt(T0)
    ctrl, _ = active(zk)
    drive_until_lost(ctrl, zk, core.BrokersChanged(brokers(2, 3)))
    assert zk.nodes[T0].leader == 1  # not written
    run = drive(ctrl, zk, core.BrokersChanged(brokers(2, 3)))
    assert zk.nodes[T0].leader in (2, 3) and 1 not in zk.nodes[T0].isr
    assert any(p.topic_partition == T0 for lai in run.to(zk.nodes[T0].leader, LeaderAndIsr) for p in lai.partitions)


def test_a_broker_in_controlled_shutdown_keeps_what_it_could_not_move_when_another_broker_fails():
    """Broker 2 shuts down; t-0 (unclean elections allowed, ISR only 2) and an RF-1
    partition cannot move and stay with it. A broker re-check, and then broker 1 failing,
    elect only where a broker is gone: 2 is alive and still holds t-0's acknowledged records,
    so neither partition loses its leader, and t-0 gets no unclean leader (3)."""
    zk = Znodes()
    topics = {"r1": core.Topic({0: (2,)}), "t": core.Topic({0: (2, 3)}, {"unclean.leader.election.enable": "true"}),
              "u": core.Topic({0: (1, 3)})}
    states = {("r1", 0): PartitionState(2, 0, (2,), 0, 1), ("t", 0): PartitionState(2, 0, (2,), 0, 1),
              ("u", 0): PartitionState(1, 0, (1, 3), 0, 1)}
    ctrl, _ = active(zk, live=(1, 2, 3), states=states, topics=topics)
    drive(ctrl, zk, core.ControlledShutdownRequested(2, 20, "reply"))
    assert zk.nodes[("t", 0)].leader == 2 and zk.nodes[("r1", 0)].leader == 2
    drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3)))  # the re-check after a ZooKeeper error
    assert zk.nodes[("t", 0)].leader == 2 and zk.nodes[("r1", 0)].leader == 2
    drive(ctrl, zk, core.BrokersChanged(brokers(2, 3)))  # broker 1 dies
    assert zk.nodes[("u", 0)].leader == 3
    assert (zk.nodes[("t", 0)].leader, zk.nodes[("t", 0)].isr) == (2, (2,))
    assert zk.nodes[("r1", 0)].leader == 2


def test_topic_deletion_waits_once_for_every_holder_and_tells_the_brokers_topic_by_topic():
    """Every topic's StopReplica goes out first and the controller waits once (a holder
    that does not answer holds the event queue for one wait, not one per topic); each
    topic is told deleted as its znodes go (so a failure at the next one cannot leave it
    listed)."""
    zk = Znodes()
    ctrl, _ = active(zk, topics={"t": TOPIC, "u": core.Topic({0: (1, 2)})},
                     states={T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1),
                             ("u", 0): PartitionState(1, 0, (1, 2), 0, 1)})
    ready = ctrl.handle(core.TopicsMarkedForDeletion(("t", "u")), 0)
    stops = [s for s in ready.sends if isinstance(s.request, StopReplica)]
    assert sorted((s.broker_id, s.request.partitions[0][0]) for s in stops) == [(1, "t"), (1, "u"), (2, "t"), (2, "u"), (3, "t")]
    assert ready.io == core.WaitForAnswers(frozenset({1, 2, 3}), ready.io.deadline_ms)
    for s in stops:
        ctrl.on_answer(core.BrokerAnswered(s.broker_id, s.request, 0))
    told = []
    ready = ctrl.resume(None, 1)
    while ready.io is not None:
        assert not isinstance(ready.io, core.WaitForAnswers)
        ready = ctrl.resume(zk.perform(ready.io), 1)
        told += [s.request.deleted_topics for s in ready.sends if isinstance(s.request, UpdateMetadata) and s.request.deleted_topics]
    assert zk.deleted == ["t", "u"]
    assert set(told) == {("t",), ("u",)}
    assert not ctrl.topics and not ctrl.states


def test_alter_isr_from_a_stale_broker_epoch_is_refused():
    zk = Znodes()
    ctrl, _ = active(zk)
    request = AlterIsrRequest(1, 9, (AlterIsrProposal("t", 0, 1, 0, (1, 2), 0),))
    run = drive(ctrl, zk, core.AlterIsrRequested(request, "r"))
    assert run.answers[0].response == AlterIsrResponse(int(ErrorCode.STALE_BROKER_EPOCH))


def test_controlled_shutdown_moves_leaders_and_drops_the_broker_from_isrs_at_new_epochs():
    zk = Znodes()
    topics = {"t": TOPIC, "solo": core.Topic({0: (1,)})}
    states = {T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1),
              ("solo", 0): PartitionState(1, 0, (1,), 0, 1)}
    ctrl, _ = active(zk, states=states, topics=topics)
    run = drive(ctrl, zk, core.ControlledShutdownRequested(1, 10, "r"))
    assert zk.nodes[T0].leader == 2 and zk.nodes[T0].leader_epoch == 1
    assert zk.nodes[T1] == PartitionState(2, 1, (2, 3), 1, 2)  # follower removal bumps the epoch
    assert zk.nodes[("solo", 0)].version == 0  # RF 1 stops with its broker
    assert run.answers[0].response == ControlledShutdownResponse(0, ())
    assert ctrl.shutting_down == {1}
    # the broker shutting down is not elected again, and may not rejoin an ISR
    request = AlterIsrRequest(2, 20, (AlterIsrProposal("t", 1, 2, 1, (2, 3, 1), 1),))
    (r,) = drive(ctrl, zk, core.AlterIsrRequested(request, "r2")).answers[0].response.partitions
    assert r.error == ErrorCode.INVALID_REQUEST


def test_controlled_shutdown_with_an_old_epoch_is_refused():
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.ControlledShutdownRequested(1, 11, "r"))
    assert run.answers[0].response == ControlledShutdownResponse(int(ErrorCode.STALE_BROKER_EPOCH))
    assert zk.writes == []


def test_preferred_election_moves_back_to_the_first_replica():
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(2, 3, (2, 1), 4, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    run = drive(ctrl, zk, core.PreferredElectionRequested(None, "r"))
    assert run.answers[0].response == PreferredElectionResponse(0, (T0,))
    assert zk.nodes[T0] == PartitionState(1, 4, (2, 1), 5, 2)


def test_failover_fences_a_broker_that_restarted_unseen_before_telling_anyone():
    """Simulator seed 1317: the init LeaderAndIsr must not name a bounced broker as the
    leader of the epoch it held before it restarted."""
    ctrl2 = core.Controller(2)
    zk2 = Znodes()
    zk2.nodes.update({T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    run2 = drive(ctrl2, zk2, core.Activated(3, brokers(1, 2, 3, epochs={1: 50, 2: 3, 3: 3}, unclean=(1,)), {"t": TOPIC},
                                            dict(zk2.nodes), {T0: 5, T1: 5}))
    init = [lai for lai in run2.to(1, LeaderAndIsr) if lai.init]
    (t0,) = [p for p in init[0].partitions if p.topic_partition == T0]
    assert t0.leader == 2 and t0.leader_epoch == 1
    assert 1 not in zk2.nodes[T1].isr  # broker 1 (epoch 50) registered after the last write


def test_failover_leaves_the_crashed_member_out_when_every_isr_member_registered_again():
    """Simulator seed 684585: every ISR member of T0 registered after its state was written.
    Broker 1 had crashed and lost its unflushed tail (acknowledged records among it); 2 and
    3 only had their sessions expire and kept every record. Counting all three as restarted
    left T0 without a leader, and the offline election then took broker 1, the first live
    member: the acknowledged records were gone. Only the crashed one is fenced."""
    ctrl = core.Controller(1)
    zk = Znodes()
    zk.nodes.update({T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    drive(ctrl, zk, core.Activated(2, brokers(1, 2, 3, epochs={1: 60, 2: 50, 3: 40}, unclean=(1,)), {"t": TOPIC},
                                   dict(zk.nodes), {T0: 5, T1: 5}))
    assert zk.nodes[T0].leader in (2, 3) and 1 not in zk.nodes[T0].isr
    assert zk.nodes[T1].leader == 2 and 1 not in zk.nodes[T1].isr
    # Had 2 and 3 also come back from crashes, the first live member is all there is.
    ctrl = core.Controller(1)
    zk = Znodes()
    zk.nodes.update({T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    drive(ctrl, zk, core.Activated(2, brokers(1, 2, 3, epochs={1: 60, 2: 50, 3: 40}, unclean=(1, 2, 3)), {"t": TOPIC},
                                   dict(zk.nodes), {T0: 5, T1: 5}))
    assert zk.nodes[T0].leader == 1


def test_a_member_back_from_a_crash_does_not_lead_while_one_that_kept_its_records_is_live():
    """The running controller's side of seed 684585: every ISR member registered again in
    one change (or left at once, keeping the ISR whole, and came back together). Broker 1
    had crashed and may lack acknowledged records; 2 and 3 only lost their sessions. The
    first live member was taken, 1, and 2 and 3 then truncated to its log. Now 2 leads and
    1 is left out of the ISR; with only 1 back it is taken, as before (KIP-966's gap)."""
    back = brokers(1, 2, 3, epochs={1: 61, 2: 51, 3: 41}, unclean=(1,))
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.BrokersChanged(back))  # all three bounced in one change
    assert (zk.nodes[T0].leader, zk.nodes[T0].isr) == (2, (2, 3))
    assert (zk.nodes[T1].leader, zk.nodes[T1].isr) == (2, (2, 3))
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.BrokersChanged({}))
    assert zk.nodes[T0].leader == core.NO_LEADER and zk.nodes[T0].isr == (1, 2, 3)
    drive(ctrl, zk, core.BrokersChanged(back))
    assert (zk.nodes[T0].leader, zk.nodes[T0].isr) == (2, (2, 3))
    assert not ctrl._stale_members
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.BrokersChanged({}))
    drive(ctrl, zk, core.BrokersChanged(brokers(1, epochs={1: 61}, unclean=(1,))))
    assert (zk.nodes[T0].leader, zk.nodes[T0].isr) == (1, (1,))
    assert (zk.nodes[T1].leader, zk.nodes[T1].isr) == (1, (1,))
    assert not ctrl._stale_members
    # The election's write failed: the re-check after the ZooKeeper error (the same
    # registrations, no difference) still passes 1 over.
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.BrokersChanged({}))
    ready = ctrl.handle(core.BrokersChanged(back), 0)
    while ready.io is not None:
        failed = {tp: core.Failed("connection loss") for tp in ready.io.updates} if isinstance(ready.io, core.WriteStates) else None
        ready = ctrl.resume(failed if failed is not None else zk.perform(ready.io), 0)
    assert zk.nodes[T0].leader == core.NO_LEADER
    drive(ctrl, zk, core.BrokersChanged(back))
    assert (zk.nodes[T0].leader, zk.nodes[T0].isr) == (2, (2, 3))


def test_failover_gives_a_new_leader_epoch_where_a_replica_outside_the_isr_restarted_unseen():
    """Simulator, issue 9, sweep seed 5383: broker 1 (not in T0's ISR) crashed, restarted
    and became the controller; the leader's stale proposal to add it, built from what its
    previous incarnation fetched, reached the new controller. As for a bounce the
    controller sees (seed 4655), the leader gets a new epoch and the proposal is refused."""
    ctrl = core.Controller(1)
    zk = Znodes()
    zk.nodes.update({T0: PartitionState(3, 1, (3, 2), 4, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    run = drive(ctrl, zk, core.Activated(3, brokers(1, 2, 3, epochs={1: 50, 2: 3, 3: 3}), {"t": TOPIC},
                                         dict(zk.nodes), {T0: 5, T1: 60}))
    assert zk.nodes[T0] == PartitionState(3, 2, (3, 2), 5, 3)  # same leader and ISR, a new epoch
    assert zk.nodes[T1] == PartitionState(2, 0, (2, 3, 1), 0, 1)  # written after broker 1 registered
    assert any(p.topic_partition == T0 and p.leader_epoch == 2 for lai in run.to(3, LeaderAndIsr) for p in lai.partitions)
    stale = AlterIsrRequest(3, 3, (AlterIsrProposal("t", 0, 3, 1, (3, 2, 1), 4),))
    run = drive(ctrl, zk, core.AlterIsrRequested(stale, "reply"))
    assert run.answers[0].response.partitions[0].error == ErrorCode.FENCED_LEADER_EPOCH
    assert zk.nodes[T0].isr == (3, 2)


def test_topic_deletion_waits_for_stop_replica_answers_then_removes_the_znodes():
    zk = Znodes()
    ctrl, _ = active(zk)
    ready = ctrl.handle(core.TopicsMarkedForDeletion(("t",)), 0)
    stops = [s for s in ready.sends if isinstance(s.request, StopReplica)]
    assert sorted(s.broker_id for s in stops) == [1, 2, 3] and all(s.request.delete for s in stops)
    assert isinstance(ready.io, core.WaitForAnswers)
    for s in stops:
        ctrl.on_answer(core.BrokerAnswered(s.broker_id, s.request, 0))
    assert ctrl.answered(ready.io.brokers)
    ready = ctrl.resume(None, 1)
    assert ready.io == core.DeleteTopic("t")
    ready = ctrl.resume(None, 1)
    assert ready.io is None
    assert "t" not in ctrl.topics and not ctrl.states
    assert all(um.deleted_topics == ("t",) for s in ready.sends for um in [s.request])


def test_an_inactive_controller_refuses_with_not_controller():
    ctrl = core.Controller(1)
    ready = ctrl.handle(core.ControlledShutdownRequested(1, 10, "r"), 0)
    assert ready.answers == [core.Answer("r", ControlledShutdownResponse(int(ErrorCode.NOT_CONTROLLER)))]


def test_abort_answers_the_waiting_caller_once_and_resign_forgets_everything():
    zk = Znodes()
    ctrl, _ = active(zk)
    ready = ctrl.handle(core.AlterIsrRequested(AlterIsrRequest(1, 10, (AlterIsrProposal("t", 0, 1, 0, (1, 2), 0),)), "r"), 0)
    assert isinstance(ready.io, core.WriteStates) and ctrl.busy
    with pytest.raises(AssertionError):
        ctrl.handle(core.BrokersChanged(brokers(1, 2, 3)), 0)  # one event at a time
    assert ctrl.abort(ErrorCode.NOT_CONTROLLER).answers == [core.Answer("r", AlterIsrResponse(int(ErrorCode.NOT_CONTROLLER)))]
    assert not ctrl.busy
    ctrl.resign()
    assert not ctrl.active and not ctrl.states and not ctrl.live


# ------------------------------------------------------------------ reassignment (seed F)


def _alter_isr(ctrl, zk, leader, tp, isr):
    st = zk.nodes[tp]
    request = AlterIsrRequest(leader, 10 * leader, (AlterIsrProposal(tp[0], tp[1], leader, st.leader_epoch, isr, st.version),))
    return drive(ctrl, zk, core.AlterIsrRequested(request, "reply"))


def _moving(live=(1, 2, 3, 4), target=(2, 3, 4)):
    zk = Znodes()
    ctrl, _ = active(zk, live=live)
    zk.reassign = {T0: target}
    run = drive(ctrl, zk, core.ReassignmentsChanged(dict(zk.reassign)))
    return zk, ctrl, run


def test_a_move_writes_ar_plus_rar_bumps_the_epoch_and_starts_the_new_replica():
    zk, ctrl, run = _moving()
    assert zk.topics["t"].partitions[0] == (1, 2, 3, 4)  # AR keeps its order (a cancel restores it)
    assert zk.topics["t"].adding == {0: (4,)} and zk.topics["t"].removing == {0: (1,)}
    assert zk.nodes[T0] == PartitionState(1, 1, (1, 2, 3), 1, 2)  # same leader and ISR, epoch + 1
    (part,) = [p for lai in run.to(4, LeaderAndIsr) for p in lai.partitions]
    assert (part.leader, part.leader_epoch, part.replicas, part.adding, part.removing) == (1, 1, (1, 2, 3, 4), (4,), (1,))
    assert run.to(1, LeaderAndIsr)  # the leader learns of its new follower
    assert ctrl.moving() == [T0] and zk.reassign == {T0: (2, 3, 4)}


def test_a_move_finishes_when_the_target_is_in_the_isr_with_a_leader_from_it():
    zk, ctrl, _ = _moving()
    run = _alter_isr(ctrl, zk, 1, T0, (1, 2, 3, 4))
    assert run.answers[0].response.partitions[0].error == 0  # answered first
    assert zk.nodes[T0].leader == 2 and zk.nodes[T0].isr == (2, 3, 4)
    assert zk.nodes[T0].leader_epoch == 2  # + 1 when the move started, + 1 when it ended (AlterIsr keeps it)
    assert zk.topics["t"].partitions[0] == (2, 3, 4) and not zk.topics["t"].adding and not zk.topics["t"].removing
    (stop,) = run.to(1, StopReplica)
    assert stop.delete and stop.partitions == (T0,)
    assert all(p.replicas == (2, 3, 4) for b in (2, 3, 4) for lai in run.to(b, LeaderAndIsr) for p in lai.partitions)
    assert zk.reassign == {} and ctrl.moving() == [] and T0 not in ctrl.reassignments


def test_a_move_waits_while_a_target_replica_is_outside_the_isr():
    zk, ctrl, _ = _moving()
    run = _alter_isr(ctrl, zk, 1, T0, (1, 2))
    assert zk.topics["t"].removing == {0: (1,)} and run.to(1, StopReplica) == []


def test_a_cancelled_move_goes_back_to_the_original_replicas():
    zk, ctrl, _ = _moving()
    _alter_isr(ctrl, zk, 1, T0, (1, 2, 3))
    zk.reassign = {}
    run = drive(ctrl, zk, core.ReassignmentsChanged({}))
    assert zk.topics["t"].partitions[0] == (1, 2, 3) and not zk.topics["t"].adding
    assert zk.nodes[T0].leader == 1 and set(zk.nodes[T0].isr) <= {1, 2, 3}
    (stop,) = run.to(4, StopReplica)
    assert stop.delete and stop.partitions == (T0,)
    assert ctrl.moving() == []


def test_a_move_resumes_after_failover_and_finishes_when_it_can():
    zk = Znodes()
    moving = core.Topic({0: (1, 2, 3, 4), 1: (2, 3, 1)}, adding={0: (4,)}, removing={0: (1,)})
    states = {T0: PartitionState(1, 1, (1, 2, 3, 4), 3, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)}
    zk.nodes.update(states)
    zk.reassign = {T0: (2, 3, 4)}
    ctrl = core.Controller(1)
    run = drive(ctrl, zk, core.Activated(2, brokers(1, 2, 3, 4), {"t": moving}, dict(zk.nodes), {}, reassignments=dict(zk.reassign)))
    assert zk.topics["t"].partitions[0] == (2, 3, 4) and zk.nodes[T0].leader == 2
    assert run.to(1, StopReplica) and zk.reassign == {}


def test_a_move_found_at_failover_without_its_admin_entry_was_cancelled():
    zk = Znodes()
    moving = core.Topic({0: (1, 2, 3, 4), 1: (2, 3, 1)}, adding={0: (4,)}, removing={0: (1,)})
    zk.nodes.update({T0: PartitionState(1, 1, (1, 2, 3), 3, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    ctrl = core.Controller(1)
    run = drive(ctrl, zk, core.Activated(2, brokers(1, 2, 3, 4), {"t": moving}, dict(zk.nodes), {}))
    assert zk.topics["t"].partitions[0] == (1, 2, 3) and run.to(4, StopReplica)


def _take_over_failed_on_zookeeper(reassign):
    """A take-over of t-0 moving (1, 2, 3) -> (2, 3, 4), 4 not yet in the ISR, whose first
    ZooKeeper write (the election for t-1, its leader 5 gone) fails: the driver aborts it
    and the core stays active before its reassignment step ran."""
    zk = Znodes()
    moving = core.Topic({0: (1, 2, 3, 4), 1: (5, 2, 1)}, adding={0: (4,)}, removing={0: (1,)})
    zk.nodes.update({T0: PartitionState(1, 1, (1, 2, 3), 3, 1), T1: PartitionState(5, 0, (5, 2, 1), 0, 1)})
    zk.topics["t"] = moving
    zk.reassign = dict(reassign)
    ctrl = core.Controller(2)
    ready = ctrl.handle(core.Activated(2, brokers(1, 2, 3, 4), {"t": moving}, dict(zk.nodes), {}, reassignments=dict(zk.reassign)), 0)
    assert isinstance(ready.io, core.WriteStates) and list(ready.io.updates) == [T1]
    ctrl.abort(ErrorCode.NOT_CONTROLLER)
    assert ctrl.active and ctrl.moving() == [T0]
    return zk, ctrl


def test_a_take_over_that_zookeeper_fails_part_way_still_finishes_the_moves_in_progress():
    """Review: the entries were only taken in at the take-over's last step, so the leader's
    next AlterIsr took the move for cancelled: reverted to (1, 2, 3), StopReplica(delete)
    to broker 4, while the admin znode still asked for (2, 3, 4)."""
    zk, ctrl = _take_over_failed_on_zookeeper({T0: (2, 3, 4)})
    assert ctrl.reassignments == {T0: (2, 3, 4)}
    run = _alter_isr(ctrl, zk, 1, T0, (1, 2, 3, 4))
    assert zk.topics["t"].partitions[0] == (2, 3, 4) and not zk.topics["t"].adding
    assert zk.nodes[T0].leader == 2 and zk.nodes[T0].isr == (2, 3, 4)
    assert run.to(4, StopReplica) == [] and [s.partitions for s in run.to(1, StopReplica)] == [(T0,)]
    assert zk.reassign == {} and not any("cancelled" in n for n in run.notes)


def test_a_take_over_that_zookeeper_fails_part_way_reverts_no_move_before_it_read_the_admin_znode():
    """A move without an entry was cancelled, but one whose entry the take-over has not
    judged yet (here: another target) waits for the retried ReassignmentsChanged."""
    zk, ctrl = _take_over_failed_on_zookeeper({T0: (2, 3, 5)})
    assert ctrl.reassignments == {}
    drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, 4)))  # the driver's re-check after the error
    assert ctrl.moving() == [T0] and zk.topics["t"].adding == {0: (4,)}
    zk.reassign = {}  # then cancelled: the read that follows reverts it
    run = drive(ctrl, zk, core.ReassignmentsChanged({}))
    assert zk.topics["t"].partitions[0] == (1, 2, 3) and [s.partitions for s in run.to(4, StopReplica)] == [(T0,)]


def test_a_take_over_mid_move_keeps_the_replication_throttle():
    """Review: the take-over's init LeaderAndIsr carried no throttle, and brokers set the
    rates of a request with adding replicas: the move ran unthrottled to its end."""
    rates = {LEADER_RATE: 1_000_000, FOLLOWER_RATE: 2_000_000}
    zk, ctrl, _ = _moving()
    ctrl = core.Controller(2)
    run = drive(ctrl, zk, core.Activated(3, brokers(1, 2, 3, 4), dict(zk.topics), dict(zk.nodes), {},
                                         reassignments=dict(zk.reassign), throttle=rates))
    assert ctrl.moving() == [T0] and ctrl.throttle == rates
    for b in (1, 4):
        (lai,) = run.to(b, LeaderAndIsr)
        assert lai.init and any(p.adding == (4,) for p in lai.partitions) and lai.throttle == rates


def test_a_move_does_not_end_on_a_replica_whose_log_dir_failed():
    """Review: completion chose its leader among live brokers, ignoring failed log dirs. t-0
    went offline when both replicas' dirs failed (its ISR kept); moved to (2,), it got
    broker 2 as leader of a log it cannot serve, and broker 1 a StopReplica(delete)."""
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(1, 0, (1, 2), 0, 1)}, topics={"t": core.Topic({0: (1, 2)})})
    drive(ctrl, zk, core.ReplicasOffline({1: (10, (T0,)), 2: (20, (T0,))}))
    assert zk.nodes[T0].leader == -1 and zk.nodes[T0].isr == (1, 2)
    zk.reassign = {T0: (2,)}
    run = drive(ctrl, zk, core.ReassignmentsChanged(dict(zk.reassign)))
    assert zk.nodes[T0].leader == -1 and ctrl.moving() == [T0] and zk.reassign == {T0: (2,)}
    assert run.to(1, StopReplica) == [] and not any("finished" in n for n in run.notes)
    # broker 2's dir is repaired: it leads again, and the move ends on it
    drive(ctrl, zk, core.ReplicasOffline({1: (10, (T0,)), 2: (20, ())}))
    assert zk.nodes[T0].leader == 2
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3)))
    assert zk.topics["t"].partitions[0] == (2,) and [s.partitions for s in run.to(1, StopReplica)] == [(T0,)]


def test_a_preferred_election_passes_over_a_replica_whose_log_dir_failed():
    """Review: the preferred election (and the auto rebalance) chose among live brokers,
    ignoring failed log dirs. t-0 went offline when the dirs of both its replicas failed
    (its ISR kept); the preferred election then made broker 1 leader of a log it cannot
    serve. Once broker 2's dir is back, 2 leads, and 1 is still passed over."""
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(1, 0, (1, 2), 0, 1)}, topics={"t": core.Topic({0: (1, 2)})})
    drive(ctrl, zk, core.ReplicasOffline({1: (10, (T0,)), 2: (20, (T0,))}))
    assert zk.nodes[T0].leader == -1 and zk.nodes[T0].isr == (1, 2)
    run = drive(ctrl, zk, core.PreferredElectionRequested(None, "r"))
    assert zk.nodes[T0].leader == -1 and run.answers[0].response.elected == ()
    drive(ctrl, zk, core.ReplicasOffline({1: (10, (T0,)), 2: (20, ())}))
    assert zk.nodes[T0].leader == 2
    run = drive(ctrl, zk, core.PreferredElectionRequested(None, "r"))
    assert zk.nodes[T0].leader == 2 and run.answers[0].response.elected == ()


def test_a_move_whose_epoch_bump_failed_is_announced_by_the_next_event():
    """ZooKeeper took the move's topic znode write, then failed the leader-epoch bump that
    tells every replica: broker 4, being added, was never told and never fetched, and the
    driver's retry of the event found the move already started and did nothing more, until a
    broker change or a failover. The next event that advances moves announces it."""
    zk = Znodes()
    ctrl, _ = active(zk, live=(1, 2, 3, 4))
    zk.reassign = {T0: (1, 2, 4)}
    ready = ctrl.handle(core.ReassignmentsChanged(dict(zk.reassign)), 0)
    sends = []
    while ready.io is not None:
        sends += ready.sends
        failed = {tp: core.Failed("connection loss") for tp in ready.io.updates} if isinstance(ready.io, core.WriteStates) else None
        ready = ctrl.resume(failed if failed is not None else zk.perform(ready.io), 0)
    sends += ready.sends
    assert ctrl.moving() == [T0] and zk.nodes[T0].leader_epoch == 0
    assert not [s for s in sends if s.broker_id == 4 and isinstance(s.request, LeaderAndIsr)]
    run = drive(ctrl, zk, core.ReassignmentsChanged(dict(zk.reassign)))  # the driver's retry
    (lai,) = run.to(4, LeaderAndIsr)
    assert zk.nodes[T0].leader_epoch == 1 and [p.leader_epoch for p in lai.partitions] == [1]
    run = drive(ctrl, zk, core.ReassignmentsChanged(dict(zk.reassign)))
    assert run.to(4, LeaderAndIsr) == [] and zk.nodes[T0].leader_epoch == 1  # once


def test_a_new_target_for_a_cancelled_move_that_cannot_go_back_yet_is_refused():
    """Review: t-0 moving (1, 2) -> (3, 4) was cancelled while no original replica could
    lead; a new plan for it, (3, 5), was taken for that move (its target ignored), so the
    cancelled move resumed and ended on (3, 4). The new entry is refused and removed, and
    the move goes back to (1, 2) once one of them can lead."""
    zk = Znodes()
    ctrl, _ = active(zk, live=(1, 2, 3, 4, 5), states={T0: PartitionState(1, 0, (1, 2), 0, 1)}, topics={"t": core.Topic({0: (1, 2)})})
    zk.reassign = {T0: (3, 4)}
    drive(ctrl, zk, core.ReassignmentsChanged(dict(zk.reassign)))
    _alter_isr(ctrl, zk, 1, T0, (1, 2, 3))
    drive(ctrl, zk, core.BrokersChanged(brokers(3, 4, 5)))  # brokers 1 and 2 fail: 3 leads
    assert zk.nodes[T0].leader == 3
    zk.reassign = {}
    run = drive(ctrl, zk, core.ReassignmentsChanged({}))
    assert any("cannot end yet" in n for n in run.notes) and ctrl.moving() == [T0]
    zk.reassign = {T0: (3, 5)}
    run = drive(ctrl, zk, core.ReassignmentsChanged(dict(zk.reassign)))
    assert any("to [3, 5] refused, its entry removed" in n for n in run.notes)
    assert zk.reassign == {} and ctrl.reassignments == {} and zk.topics["t"].adding == {0: (3, 4)}
    _alter_isr(ctrl, zk, 3, T0, (3, 4))  # 4 catches up: the cancelled move does not end on (3, 4)
    assert zk.topics["t"].partitions[0] == (1, 2, 3, 4) and ctrl.moving() == [T0]
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 3, 4, 5, epochs={1: 11})))
    assert zk.nodes[T0].leader == 3  # broker 1 restarted: not in the ISR, it cannot lead yet
    _alter_isr(ctrl, zk, 3, T0, (3, 4, 1))
    assert zk.topics["t"].partitions[0] == (1, 2) and zk.nodes[T0].leader == 1


def test_a_new_target_for_a_move_in_progress_cancels_it_and_is_refused():
    """The same from a move still asked for: its entry written over with another target is
    refused and removed, and then nothing asks for the move: it goes back."""
    zk, ctrl, _ = _moving()
    zk.reassign = {T0: (2, 3, 5)}
    run = drive(ctrl, zk, core.ReassignmentsChanged(dict(zk.reassign)))
    assert any("refused, its entry removed" in n for n in run.notes)
    assert zk.reassign == {} and zk.topics["t"].partitions[0] == (1, 2, 3) and run.to(4, StopReplica)


@pytest.mark.parametrize("target, why", [((2, 3, 9), "not registered"), ((2, 2), "duplicate"), ((), "empty")])
def test_an_impossible_move_is_refused_and_its_entry_removed(target, why):
    zk, ctrl, run = _moving(target=target)
    assert any(why in n for n in run.notes)
    assert "t" not in zk.topics and zk.reassign == {} and ctrl.moving() == []


def test_a_reorder_is_written_at_once_and_needs_no_move():
    zk, ctrl, run = _moving(target=(3, 1, 2))
    assert zk.topics["t"].partitions[0] == (3, 1, 2) and not zk.topics["t"].adding and zk.reassign == {}


# ------------------------------------------------------------------ partition add / remove (seed 000)


def test_added_partitions_get_the_topic_znode_then_leaders_then_the_admin_znode_goes():
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.PartitionsAddRequested({("t", 2): (3, 1, 2)}))
    assert zk.topics["t"].partitions[2] == (3, 1, 2)
    assert zk.nodes[("t", 2)].leader == 3
    assert any(p.topic_partition == ("t", 2) for lai in run.to(3, LeaderAndIsr) for p in lai.partitions)
    assert zk.admin_deleted == [("add", (("t", 2),))]


def test_added_partitions_must_continue_the_numbering():
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.PartitionsAddRequested({("t", 5): (3, 1, 2)}))
    assert "t" not in zk.topics and ("t", 5) not in zk.nodes and any("continue" in n for n in run.notes)
    assert zk.admin_deleted == [("add", (("t", 5),))]


def test_removing_the_highest_partition_stops_and_deletes_every_replica_and_drops_it_from_metadata():
    zk = Znodes()
    ctrl, _ = active(zk)
    ready = ctrl.handle(core.PartitionsRemoveRequested((T1,)), 0)
    assert ready.io == core.WriteTopic("t", core.Topic({0: (1, 2, 3)}))
    ready = ctrl.resume(zk.perform(ready.io), 0)
    stops = [s for s in ready.sends if isinstance(s.request, StopReplica)]
    assert sorted(s.broker_id for s in stops) == [1, 2, 3] and all(s.request.partitions == (T1,) and s.request.delete for s in stops)
    assert all(um.deleted_partitions == (T1,) for s in ready.sends if isinstance(um := s.request, UpdateMetadata))
    assert isinstance(ready.io, core.WaitForAnswers)
    for s in stops:
        ctrl.on_answer(core.BrokerAnswered(s.broker_id, s.request, 0))
    ready = ctrl.resume(None, 1)
    assert ready.io == core.DeletePartitions((T1,))
    ready = ctrl.resume(zk.perform(ready.io), 1)
    assert ready.io == core.DeletePartitionAdminZnodes("remove", (T1,))
    assert ctrl.resume(None, 1).io is None
    assert T1 not in ctrl.states and T1 not in zk.nodes and ctrl.topics["t"].partitions == {0: (1, 2, 3)}


@pytest.mark.parametrize("asked, why", [((T0,), "highest"), ((T0, T1), "at least one")])
def test_only_the_highest_partitions_can_be_removed_and_never_all(asked, why):
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.PartitionsRemoveRequested(asked))
    assert any(why in n for n in run.notes) and "t" not in zk.topics and T0 in ctrl.states


def test_replicas_reported_offline_lose_leadership_and_isr_membership_until_their_broker_restarts():
    """Issue 14 (KIP-112): broker 1's log dir holding t-0 failed. It no longer leads t-0 nor
    counts in its ISR (a new leader at a new epoch), the metadata shows the replica
    offline, and it stays so (AlterIsr cannot add it back) until broker 1 registers again;
    t-1 (its replica in a healthy dir) is untouched. A report of an older registration
    changes nothing."""
    zk = Znodes()
    ctrl, _ = active(zk)
    assert drive(ctrl, zk, core.ReplicasOffline({1: (9, (T0,))})).sends == []  # not its registration
    run = drive(ctrl, zk, core.ReplicasOffline({1: (10, (T0,))}))
    assert zk.nodes[T0] == PartitionState(2, 1, (2, 3), 1, 2)
    assert zk.nodes[T1] == PartitionState(2, 0, (2, 3, 1), 0, 1)
    assert ctrl.offline == {T0: frozenset({1})}
    assert any((m.topic, m.partition) == T0 and m.offline == (1,) for um in run.to(2, UpdateMetadata) for m in um.partitions)
    assert any("offline after log dir failures" in n for n in run.notes)
    # the same report again: nothing to do
    assert drive(ctrl, zk, core.ReplicasOffline({1: (10, (T0,))})).sends == []
    # a dead leader elsewhere does not bring the offline replica back as leader
    drive(ctrl, zk, core.BrokersChanged(brokers(1, 3)))
    assert zk.nodes[T0].leader == 3 and 1 not in zk.nodes[T0].isr
    # broker 1 restarts (a new registration): its report no longer counts
    drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, epochs={1: 11})))
    assert ctrl.offline == {}


def test_with_every_replica_offline_or_dead_a_partition_goes_offline_and_comes_back_on_a_restart():
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.BrokersChanged(brokers(1, 2)))  # broker 3 died
    drive(ctrl, zk, core.ReplicasOffline({1: (10, (T0,)), 2: (20, (T0,))}))
    assert zk.nodes[T0].leader == -1  # offline; unclean election is off
    assert ctrl.describe()["offline_partitions"] >= 1
    drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, epochs={1: 11})))  # broker 1 restarted: its dir is back
    assert zk.nodes[T0].leader in (1, 2)


def test_a_repaired_replica_no_longer_reported_offline_is_told_its_role_again():
    zk = Znodes()
    ctrl, _ = active(zk)
    drive(ctrl, zk, core.ReplicasOffline({2: (20, (T1,))}))  # broker 2 led t-1; its copy is corrupt
    assert zk.nodes[T1].leader != 2 and 2 not in zk.nodes[T1].isr
    run = drive(ctrl, zk, core.ReplicasOffline({2: (20, ())}))  # truncated and released
    assert ctrl.offline == {}
    (lai,) = run.to(2, LeaderAndIsr)
    assert [p.topic_partition for p in lai.partitions] == [T1] and lai.partitions[0].leader != 2


def test_changed_topic_configs_go_to_every_live_broker_and_unchanged_ones_to_none():
    """Issue 16: a /config/changes notification re-read by the driver."""
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.TopicConfigsChanged({"t": {"min.insync.replicas": "3"}, "unknown": {"a": "b"}}))
    for b in (1, 2, 3):
        (um,) = run.to(b, UpdateMetadata)
        assert um.topic_configs == {"t": {"min.insync.replicas": "3"}}
        assert {m.partition for m in um.partitions} == {0, 1}
    assert ctrl.topics["t"].config == {"min.insync.replicas": "3"}
    assert drive(ctrl, zk, core.TopicConfigsChanged({"t": {"min.insync.replicas": "3"}})).sends == []


def test_enabling_unclean_election_on_a_topic_elects_its_offline_partitions_at_once():
    zk = Znodes()
    ctrl, _ = active(zk, states={T0: PartitionState(1, 0, (1,), 0, 1), T1: PartitionState(2, 0, (2, 3, 1), 0, 1)})
    drive(ctrl, zk, core.BrokersChanged(brokers(2, 3)))
    assert zk.nodes[T0].leader == -1  # its only in-sync replica died
    drive(ctrl, zk, core.TopicConfigsChanged({"t": {"unclean.leader.election.enable": "true"}}))
    assert zk.nodes[T0].leader in (2, 3)
    assert ctrl.unclean_elections == 1


def _first_metadata_is_full(run: Run, broker: int) -> bool:
    updates = run.to(broker, UpdateMetadata)
    return bool(updates) and updates[0].full and {(m.topic, m.partition) for m in updates[0].partitions} == {T0, T1}


def test_a_take_over_that_fences_bounced_brokers_tells_each_the_whole_truth_first():
    """CI, bin/chaos --netns (a ZooKeeper outage expired every session): the new controller
    fenced the brokers that had registered again, and sent UpdateMetadata for the partitions
    it wrote before its full update. A broker restarted just before the outage had nothing
    cached, so it listed topic t with only those partitions, and librdkafka took the others
    for nonexistent ("Unknown partition") until its metadata.max.age.ms. Nothing partial
    goes out before the take-over's full update and init LeaderAndIsr."""
    ctrl = core.Controller(2)
    zk = Znodes()
    zk.nodes.update({T0: PartitionState(1, 0, (1, 2, 3), 0, 1), T1: PartitionState(2, 0, (2, 3), 5, 1)})
    run = drive(ctrl, zk, core.Activated(3, brokers(1, 2, 3, epochs={1: 50, 2: 3, 3: 3}, unclean=(1,)), {"t": TOPIC},
                                         dict(zk.nodes), {T0: 5, T1: 5}))
    assert zk.nodes[T0].leader == 2 and zk.nodes[T1].leader_epoch == 1  # fenced, and written before the tell
    for b in (1, 2, 3):
        assert _first_metadata_is_full(run, b)
        assert run.to(b, LeaderAndIsr)[0].init
        assert len(run.to(b, UpdateMetadata)) == 1  # one full update, not a delta and then a full one


def test_a_registration_gets_a_full_update_first_whatever_the_controller_sends_it():
    zk = Znodes()
    ctrl, _ = active(zk)
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, 3, epochs={3: 99})))  # broker 3 bounced
    assert _first_metadata_is_full(run, 3) and len(run.to(3, UpdateMetadata)) == 1
    assert not any(um.full for b in (1, 2) for um in run.to(b, UpdateMetadata))  # the others: every partition, as a delta
    run = drive(ctrl, zk, core.BrokerProcessGone(1, 10))
    assert run.to(1, UpdateMetadata) == []
    run = drive(ctrl, zk, core.BrokerProcessBack(core.LiveBroker(1, 10)))  # same registration, updates missed meanwhile
    assert _first_metadata_is_full(run, 1)
    run = drive(ctrl, zk, core.BrokersChanged(brokers(1, 2, epochs={1: 10})))  # 3 died: the rest get deltas
    assert run.to(1, UpdateMetadata) and not any(um.full for um in run.to(1, UpdateMetadata))
    assert run.to(3, UpdateMetadata) == []


NEW = core.Topic({0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)})
NEW_TPS = [("new", p) for p in range(3)]


def _create_topic_failing_on_zookeeper(ctrl: core.Controller, zk: Znodes, committed: list) -> None:
    """TopicsChanged for topic "new" whose state creation ZooKeeper fails part-way: the
    chunks holding `committed` went through, then the connection was lost (the driver
    aborts the event)."""
    ready = ctrl.handle(core.TopicsChanged(frozenset({"t", "new"}), {"new": NEW}), 0)
    assert isinstance(ready.io, core.CreateStates) and sorted(ready.io.states) == NEW_TPS
    for tp in committed:
        zk.nodes[tp] = ready.io.states[tp]
    ctrl.abort(ErrorCode.NOT_CONTROLLER)
    assert not ctrl.busy and "new" in ctrl.topics and not any(tp in ctrl.states for tp in NEW_TPS)


def test_a_topic_whose_state_creation_failed_part_way_gets_every_state_when_the_event_runs_again():
    """Before: the topic was known, so the next topic change skipped it, and it stayed
    without leaders (or listed with only the partitions whose chunk committed) until a
    controller failover."""
    zk = Znodes()
    ctrl, _ = active(zk)
    _create_topic_failing_on_zookeeper(ctrl, zk, committed=[("new", 0)])
    run = drive(ctrl, zk, core.TopicsChanged(frozenset({"t", "new"}), {}))  # the driver's retry
    assert all(tp in ctrl.states and tp in zk.nodes for tp in NEW_TPS)
    assert ctrl.states[("new", 0)] == zk.nodes[("new", 0)]  # created before: taken as it is
    assert [ctrl.states[tp].leader for tp in NEW_TPS] == [1, 2, 3]
    for b in (1, 2, 3):
        told = {p.topic_partition for lai in run.to(b, LeaderAndIsr) for p in lai.partitions}
        assert told == set(NEW_TPS)
        assert any(set(NEW_TPS) <= {(pm.topic, pm.partition) for pm in um.partitions} for um in run.to(b, UpdateMetadata))
    assert any("creating again" in n for n in run.notes)
    # Done once: the next change has nothing to create again.
    assert not [s for s in drive(ctrl, zk, core.TopicsChanged(frozenset({"t", "new"}), {})).sends]


def test_a_failed_state_write_is_created_again_by_the_next_topic_event_and_a_deleted_topic_is_not():
    zk = Znodes()
    ctrl, _ = active(zk)
    ready = ctrl.handle(core.TopicsChanged(frozenset({"t", "new"}), {"new": NEW}), 0)
    outcome = {tp: core.Failed("connection loss") if tp == ("new", 2) else core.Written(0) for tp in NEW_TPS}
    for tp in NEW_TPS[:2]:
        zk.nodes[tp] = ready.io.states[tp]
    while ready.io is not None:
        ready = ctrl.resume(outcome, 0)
        outcome = zk.perform(ready.io) if ready.io is not None else None
    assert ("new", 2) not in ctrl.states and ("new", 2) not in zk.nodes
    drive(ctrl, zk, core.TopicsChanged(frozenset({"t", "new"}), {}))
    assert zk.nodes[("new", 2)].leader == 3 == ctrl.states[("new", 2)].leader
    # A topic deleted before the event ran again has nothing created for it.
    _create_topic_failing_on_zookeeper(ctrl2 := active(zk2 := Znodes())[0], zk2, committed=[])
    run = drive(ctrl2, zk2, core.TopicsChanged(frozenset({"t"}), {}))
    assert not any(tp in zk2.nodes for tp in NEW_TPS) and not any("creating again" in n for n in run.notes)


def test_added_partitions_whose_states_failed_after_the_topic_znode_get_them_when_the_event_runs_again():
    zk = Znodes()
    ctrl, _ = active(zk)
    ready = ctrl.handle(core.PartitionsAddRequested({("t", 2): (3, 1, 2)}), 0)
    ready = ctrl.resume(zk.perform(ready.io), 0)  # the topic znode is written
    assert isinstance(ready.io, core.CreateStates)
    ctrl.abort(ErrorCode.NOT_CONTROLLER)  # then ZooKeeper fails
    assert ctrl.topics["t"].partitions[2] == (3, 1, 2) and ("t", 2) not in ctrl.states
    run = drive(ctrl, zk, core.PartitionsAddRequested({("t", 2): (3, 1, 2)}))  # the driver's retry
    assert zk.nodes[("t", 2)].leader == 3 and ctrl.states[("t", 2)].leader == 3
    assert any(p.topic_partition == ("t", 2) for lai in run.to(3, LeaderAndIsr) for p in lai.partitions)
    assert zk.admin_deleted == [("add", (("t", 2),))]


def test_a_topic_write_keeps_the_topic_id_read_from_the_znode():
    """KIP-516: the id CreateTopics gave the topic survives the controller's own writes of
    its znode (here a partition removal; reassignment ends and config changes alike)."""
    zk = Znodes()
    ctrl, _ = active(zk, topics={"t": core.Topic({0: (1, 2, 3), 1: (2, 3, 1)}, topic_id="Fo2k4ddTRzq0Tpo4OwCIlw")})
    drive(ctrl, zk, core.TopicConfigsChanged({"t": {"retention.ms": "5"}}))
    assert ctrl.topics["t"].topic_id == "Fo2k4ddTRzq0Tpo4OwCIlw"
    ready = ctrl.handle(core.PartitionsRemoveRequested((T1,)), 0)
    assert ready.io == core.WriteTopic("t", core.Topic({0: (1, 2, 3)}, {"retention.ms": "5"}, topic_id="Fo2k4ddTRzq0Tpo4OwCIlw"))


def test_leader_and_isr_carries_the_ids_of_topics_that_have_one():
    zk = Znodes()
    topics = {"t": core.Topic({0: (1, 2, 3), 1: (2, 3, 1)}, topic_id="Fo2k4ddTRzq0Tpo4OwCIlw"), "old": core.Topic({0: (1, 2)})}
    zk.nodes[("old", 0)] = PartitionState(1, 0, (1, 2), 0, 1)
    _, run = active(zk, topics=topics)
    (lai,) = run.to(1, LeaderAndIsr)
    assert {p.topic for p in lai.partitions} == {"t", "old"}
    assert lai.topic_ids == {"t": "Fo2k4ddTRzq0Tpo4OwCIlw"}  # a topic created before ids has none
