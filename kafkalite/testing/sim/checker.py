"""DESIGN section 7 guarantees, checked after every simulation step with
kafkalite.core.invariants (and on the events that matter: become-leader, ack, read).

1. every acked batch is at its acked offset on the current leader and on every in-sync
   ISR member (unclean election off; flush mode and fault budget keep failures in bounds);
2. below the HW every in-sync replica holds identical batches; over time, whatever any
   leader ever exposed below its HW (the committed ledger) never changes;
3. consumers only get offsets below the serving leader's HW, their positions only grow,
   and a leader's HW never decreases within its epoch;
4. at most one leader per (partition, leader epoch); no deposed leader acknowledges an
   acks=all write (an ack in epoch e for an offset the leader of a later epoch did not
   hold when it took over).
Plus the replica-state rules (check_partition_invariants) and the controller's state
(check_controller_state). Nothing invented: every stored payload was produced to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalite.core import invariants as inv
from kafkalite.testing.sim import zk as zkm

if TYPE_CHECKING:
    from kafkalite.testing.sim.broker import SimBroker, SimReplica
    from kafkalite.testing.sim.runner import Simulation

TP = tuple[str, int]


class Checker:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.violations: list[str] = []
        self.leader_epochs = inv.LeaderEpochTracker()
        self.leader_hw = inv.MonotonicTracker("leader HW within an epoch")
        self.consumer_positions = inv.MonotonicTracker("consumer position")
        tps = sorted(sim.assignments)
        self.committed: dict[TP, list[tuple[int, int]]] = {tp: [] for tp in tps}
        self.acked: dict[TP, dict[int, int]] = {tp: {} for tp in tps}
        self.ack_epochs: dict[TP, dict[int, int]] = {tp: {} for tp in tps}
        self.produced: dict[TP, set[int]] = {tp: set() for tp in tps}
        # tp -> leader epoch -> (leader, log at the moment it took over)
        self.epoch_starts: dict[TP, dict[int, tuple[int, tuple[tuple[int, int], ...]]]] = {tp: {} for tp in tps}
        self._acked_ok_key: dict[TP, Any] = {}
        self._member_ok: set[Any] = set()
        self.acks = 0
        self.consumed = 0

    def fail(self, message: str) -> None:
        self.violations.append(message)

    # ------------------------------------------------------------ events

    def on_become_leader(self, broker: SimBroker, rep: SimReplica, epoch: int) -> None:
        for v in self.leader_epochs.observe(rep.tp, epoch, broker.id):
            self.fail(f"guarantee 4: {v}")
        self.epoch_starts[rep.tp].setdefault(epoch, (broker.id, tuple(rep.log)))
        # Guarantee 1 for the leader the ZK state names is checked every step; a stale
        # LeaderAndIsr may make a zombie "lead" an old epoch with less data, which is safe
        # as long as it cannot ack (guarantee 4, checked in on_ack).

    def on_ack(self, broker: SimBroker, tp: TP, epoch: int, offset: int, payload: int) -> None:
        self.acks += 1
        previous = self.acked[tp].get(offset)
        if previous is not None and previous != payload and not self.sim.loss_permitted:
            self.fail(f"guarantee 1/4: {tp} offset {offset} acked as {previous} and later as {payload}")
        self.acked[tp][offset] = payload
        self.ack_epochs[tp][offset] = epoch
        for later_epoch, (leader, log) in sorted(self.epoch_starts[tp].items()):
            if later_epoch <= epoch:
                continue
            if offset >= len(log) or log[offset][1] != payload:
                self.fail(
                    f"guarantee 4: deposed leader b{broker.id} (epoch {epoch}) acked {tp} offset {offset}"
                    f" ({payload}) after b{leader} took epoch {later_epoch} without it"
                )

    def on_produce_sent(self, tp: TP, payload: int) -> None:
        self.produced[tp].add(payload)

    def on_consumer_served(self, broker: SimBroker, tp: TP, offset: int, count: int, hw: int) -> None:
        if count and offset + count > hw:
            self.fail(f"guarantee 3: b{broker.id} served {tp} up to {offset + count - 1} with HW {hw}")

    def on_consumed(self, tp: TP, offset: int, records: list[tuple[int, int]]) -> None:
        for v in self.consumer_positions.observe(tp, offset + len(records)):
            self.fail(f"guarantee 3: {v}")
        ledger = self.committed[tp]
        for i, record in enumerate(records):
            at = offset + i
            self.consumed += 1
            if at < len(ledger) and ledger[at] != record:
                self.fail(f"guarantee 2/3: consumer read {tp}@{at} = {record}, committed was {ledger[at]}")

    def on_consumer_out_of_range(self, tp: TP, position: int, leader: int, leo: int) -> None:
        if not self.sim.loss_permitted:
            self.fail(f"guarantee 1/3: consumer position {position} on {tp} is beyond leader b{leader}'s LEO {leo}")

    # ------------------------------------------------------------ every step

    def check_step(self) -> None:
        sim = self.sim
        zk_states: dict[TP, tuple[int, list[int]]] = {}
        for tp in sorted(sim.assignments):
            node = sim.zk.get(zkm.state_path(tp))
            if node is None:
                continue
            zk_states[tp] = (node.data["leader"], node.data["isr"])
            self._check_partition(tp, node.data)
        for v in inv.check_controller_state(zk_states, sim.assignments):
            self.fail(f"controller state: {v}")

    def _check_partition(self, tp: TP, zk_state: dict[str, Any]) -> None:
        sim = self.sim
        leader_epochs_seen: dict[int, int] = {}
        for broker in sim.running_brokers():
            rep = broker.replicas.get(tp)
            if rep is None:
                continue
            for v in inv.check_partition_invariants(rep.state, rep.leo):
                self.fail(f"replica state: {v}")
            if not rep.state.is_leader:
                continue
            epoch = rep.state.leader_epoch
            other = leader_epochs_seen.setdefault(epoch, broker.id)
            if other != broker.id:
                self.fail(f"guarantee 4: {tp} epoch {epoch} led by b{other} and b{broker.id} at once")
            for v in self.leader_hw.observe((broker.id, broker.incarnation, tp, epoch), rep.hw):
                self.fail(f"guarantee 3: {v}")
            self._extend_committed(broker, rep)
        leader = zk_state["leader"]
        if leader < 0 or leader not in sim.brokers:
            return
        lb = sim.brokers[leader]
        lrep = lb.replicas.get(tp) if lb.running else None
        if lrep is None or not lrep.state.is_leader or lrep.state.leader_epoch != zk_state["leader_epoch"]:
            return  # the leader has not taken over yet
        self._check_acked(tp, lb, lrep)
        self._check_isr_in_sync(tp, zk_state, lb, lrep)

    def _extend_committed(self, broker: SimBroker, rep: SimReplica) -> None:
        ledger = self.committed[rep.tp]
        hw = rep.hw
        n = min(len(ledger), hw)
        if rep.log[:n] != ledger[:n] and self.sim.loss_permitted:
            del ledger[next(i for i in range(n) if rep.log[i] != ledger[i]):]  # beyond the budget
            n = len(ledger)
        if rep.log[:n] != ledger[:n]:
            first = next(i for i in range(n) if rep.log[i] != ledger[i])
            self.fail(f"guarantee 2: leader b{broker.id} of {rep.tp} epoch {rep.state.leader_epoch} has"
                      f" {rep.log[first]} at committed offset {first}, committed was {ledger[first]}")
            return
        if hw > len(ledger):
            for offset in range(len(ledger), hw):
                payload = rep.log[offset][1]
                if payload not in self.produced[rep.tp]:
                    self.fail(f"invented data: {rep.tp}@{offset} payload {payload} was never produced")
            ledger.extend(rep.log[len(ledger):hw])

    def _check_acked(self, tp: TP, lb: SimBroker, lrep: SimReplica) -> None:
        if self.sim.loss_permitted:
            return
        key = (lb.id, lb.incarnation, lrep.state.leader_epoch, len(self.acked[tp]))
        if self._acked_ok_key.get(tp) == key:
            return  # the leader's log below what it had does not change within its epoch
        log = [payload for _, payload in lrep.log]
        for v in inv.check_acked_not_lost(self.acked[tp], log):
            self.fail(f"guarantee 1: {tp} on leader b{lb.id} epoch {lrep.state.leader_epoch}: {v}")
        self._acked_ok_key[tp] = key

    def _check_isr_in_sync(self, tp: TP, zk_state: dict[str, Any], lb: SimBroker, lrep: SimReplica) -> None:
        hw = lrep.hw
        logs = {lb.id: lrep.log}
        for member in zk_state["isr"]:
            if member == lb.id or member not in self.sim.brokers:
                continue
            mb = self.sim.brokers[member]
            rep = mb.replicas.get(tp) if mb.running else None
            if rep is None or not rep.state.is_follower or rep.state.leader_epoch != zk_state["leader_epoch"]:
                continue  # has not heard of this epoch yet
            if rep.fetch is None or rep.fetch.truncating:
                continue  # still finding where it diverges
            logs[member] = rep.log
        self._check_acked_on_members(tp, logs)
        if all(log[:hw] == lrep.log[:hw] for log in logs.values()):
            return
        for v in inv.check_replicas_identical_below_hw(logs, hw):
            self.fail(f"guarantee 2: {tp} ISR {zk_state['isr']} below HW {hw} of leader b{lb.id}: {v}")

    def _check_acked_on_members(self, tp: TP, logs: dict[int, list[tuple[int, int]]]) -> None:
        """Guarantee 1 on in-sync ISR members: they joined at or past the start of this
        leader epoch, which is past every acked offset."""
        if self.sim.loss_permitted or not self.acked[tp]:
            return
        for member, log in sorted(logs.items()):
            broker = self.sim.brokers[member]
            key = (tp, member, broker.incarnation, len(log), len(self.acked[tp]))
            if key in self._member_ok:
                continue
            payloads = [payload for _, payload in log]
            for v in inv.check_acked_not_lost(self.acked[tp], payloads):
                self.fail(f"guarantee 1: {tp} on ISR member b{member}: {v}")
            self._member_ok.add(key)
