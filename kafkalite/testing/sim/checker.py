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
Consumer groups (issue 10, with `offsets_partitions`): the `__consumer_offsets` partitions
are checked like any other (1-4 above; an offsets record is "produced" when the group
coordinator appends it and "acked" when its append completes), and
5. an acknowledged offset commit is never lost: an OffsetFetch answers, for each group
   partition, an offset that was sent and is not below the last commit acknowledged before
   the fetch was sent (one committer per group partition, offsets increasing; a commit
   answered with an error or not at all may or may not have been written); at most one
   coordinator per (offsets partition, leader epoch); once the cluster settled, the leader
   of every offsets partition coordinates its groups (loaded) at its leader epoch.
Plus the replica-state rules (check_partition_invariants) and the controller's state
(check_controller_state). Nothing invented: every stored payload was produced to it.

The partitions checked are those the topic znode lists at each step (`sim.assignments`).
A removed partition's acknowledged records are deliberately gone: they are counted
(`acked_removed`) and its ledgers archived, never checked again. Reassignment (issue 9):
- every change of the topic znode keeps KIP-455's shape (adding and removing within the
  replicas, disjoint) and a move ends with exactly its target replicas (finished) or
  exactly its original ones (cancelled), never anything else;
- `quiesce_problems` (asked at the end of a run, after every fault healed, until it
  reports nothing or a generous bound passes): no partition still moving, no admin request
  left unhandled, every assigned replica in the ISR and at the leader's epoch, and no
  running broker keeping the data of a partition it no longer replicates.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kafkalite.core import invariants as inv
from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_messages import NO_OFFSET, OFFSETS_TOPIC
from kafkalite.testing.sim import zk as zkm

if TYPE_CHECKING:
    from kafkalite.testing.sim.broker import SimBroker, SimReplica
    from kafkalite.testing.sim.runner import Simulation

TP = tuple[str, int]
GTP = tuple[str, TP]  # (group id, topic partition)
COMMIT_RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                              ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT})


class Checker:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.violations: list[str] = []
        self.leader_epochs = inv.LeaderEpochTracker()
        self.leader_hw = inv.MonotonicTracker("leader HW within an epoch")
        self.consumer_positions = inv.MonotonicTracker("consumer position")
        self.committed: defaultdict[TP, list[tuple[int, int]]] = defaultdict(list)
        self.acked: defaultdict[TP, dict[int, int]] = defaultdict(dict)
        self.ack_epochs: defaultdict[TP, dict[int, int]] = defaultdict(dict)
        self.produced: defaultdict[TP, set[int]] = defaultdict(set)
        # tp -> leader epoch -> (leader, log at the moment it took over)
        self.epoch_starts: defaultdict[TP, dict[int, tuple[int, tuple[tuple[int, int], ...]]]] = defaultdict(dict)
        self._acked_ok_key: dict[TP, Any] = {}
        self._member_ok: set[Any] = set()
        self.acks = 0
        self.consumed = 0
        for tp in sorted(sim.assignments):
            self.committed[tp] = []
        # Reassignment and partition removal.
        self._topic_view: tuple[int, dict[TP, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]] = (-1, {})
        self.removed: dict[TP, int] = {}  # removed partition -> acked records it had then
        self.generation: dict[TP, int] = {}  # removals so far per partition number
        self.acked_removed = 0  # acknowledged records of removed partitions (deliberately gone)
        self.moves_finished = 0
        self.moves_cancelled = 0
        # Consumer groups (issue 10).
        self.commits_sent: defaultdict[GTP, list[int]] = defaultdict(list)  # increasing
        self.commit_acked: dict[GTP, int] = {}  # the last commit answered NONE
        self.commits_acked = 0

    def fail(self, message: str) -> None:
        self.violations.append(message)

    # ------------------------------------------------------------ events

    def _key(self, tp: TP) -> tuple[TP, int]:
        """Trackers are per partition incarnation: one added again after its removal is new."""
        return tp, self.generation.get(tp, 0)

    def on_become_leader(self, broker: SimBroker, rep: SimReplica, epoch: int) -> None:
        if rep.tp in self.removed:
            return  # a stale LeaderAndIsr for a removed partition: it cannot ack anything checked
        for v in self.leader_epochs.observe(self._key(rep.tp), epoch, broker.id):
            self.fail(f"guarantee 4: {v}")
        self.epoch_starts[rep.tp].setdefault(epoch, (broker.id, tuple(rep.log)))
        # Guarantee 1 for the leader the ZK state names is checked every step; a stale
        # LeaderAndIsr may make a zombie "lead" an old epoch with less data, which is safe
        # as long as it cannot ack (guarantee 4, checked in on_ack).

    def on_ack(self, broker: SimBroker, tp: TP, epoch: int, offset: int, payload: int) -> None:
        self.acks += 1
        if tp in self.removed:  # acked by a leader that had not heard of the removal yet
            self.acked_removed += 1
            return
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
        assert tp not in self.removed, "the producer only picks partitions the topic znode lists"
        self.produced[tp].add(payload)

    def on_consumer_served(self, broker: SimBroker, tp: TP, offset: int, count: int, hw: int) -> None:
        if count and offset + count > hw:
            self.fail(f"guarantee 3: b{broker.id} served {tp} up to {offset + count - 1} with HW {hw}")

    def on_consumed(self, tp: TP, offset: int, records: list[tuple[int, int]]) -> None:
        if tp in self.removed:
            return  # read before the removal, answered after it
        for v in self.consumer_positions.observe(self._key(tp), offset + len(records)):
            self.fail(f"guarantee 3: {v}")
        ledger = self.committed[tp]
        for i, record in enumerate(records):
            at = offset + i
            self.consumed += 1
            if at < len(ledger) and ledger[at] != record:
                self.fail(f"guarantee 2/3: consumer read {tp}@{at} = {record}, committed was {ledger[at]}")

    def on_consumer_out_of_range(self, tp: TP, position: int, leader: int, leo: int) -> None:
        if not self.sim.loss_permitted and tp not in self.removed:
            self.fail(f"guarantee 1/3: consumer position {position} on {tp} is beyond leader b{leader}'s LEO {leo}")

    # ------------------------------------------------------------ consumer groups (issue 10)

    def on_commit_sent(self, key: GTP, offset: int) -> None:
        sent = self.commits_sent[key]
        assert not sent or offset > sent[-1], "a committer's offsets increase"
        sent.append(offset)

    def on_commit_answered(self, key: GTP, offset: int, code: ErrorCode, coordinator: int) -> None:
        if code is ErrorCode.NONE:
            previous = self.commit_acked.get(key)
            assert previous is None or offset > previous, "one commit in flight per committer"
            self.commit_acked[key] = offset
            self.commits_acked += 1
        elif code not in COMMIT_RETRIABLE:
            self.fail(f"groups: commit of {key} offset {offset} answered {code.name} by b{coordinator}")

    def on_offset_fetched(self, key: GTP, floor: int | None, fetched: int, coordinator: int) -> None:
        """The commit guarantee (guarantee 1 for offset commits). `floor`: the last commit acknowledged before the fetch was sent."""
        sent = self.commits_sent.get(key, [])
        if fetched == NO_OFFSET:
            ok = floor is None
        else:
            i = bisect.bisect_left(sent, fetched)
            ok = i < len(sent) and sent[i] == fetched and (floor is None or fetched >= floor)
        if not ok:
            after = [o for o in sent if floor is None or o > floor]
            self.fail(f"commit guarantee: b{coordinator} answered {key} offset {fetched}; the last commit acknowledged"
                      f" before the fetch was {floor}, sent after it: {after[:5]}{'...' if len(after) > 5 else ''}")

    def _check_coordinators(self) -> None:
        """At most one coordinator of an offsets partition per leader epoch."""
        seen: dict[tuple[int, int], int] = {}
        for broker in self.sim.running_brokers():
            if broker.groups is None:
                return
            for p, owned in broker.groups.core.partitions.items():
                other = seen.setdefault((p, owned.leader_epoch), broker.id)
                if other != broker.id:
                    self.fail(f"groups: offsets partition {p} epoch {owned.leader_epoch} coordinated by b{other}"
                              f" and b{broker.id} at once")

    def _coordinators_settled(self) -> list[str]:
        out = []
        for p in range(self.sim.cfg.offsets_partitions):
            node = self.sim.zk.get(zkm.state_path((OFFSETS_TOPIC, p)))
            if node is None or node.data["leader"] not in self.sim.brokers:
                continue  # reported as a partition without leader
            leader, epoch = node.data["leader"], node.data["leader_epoch"]
            broker = self.sim.brokers[leader]
            loaded = broker.groups.loaded_epoch(p) if broker.running and broker.groups is not None else None
            if loaded != epoch:
                out.append(f"offsets partition {p}: its leader b{leader} coordinates it at epoch {loaded}, not {epoch}")
        return out

    # ------------------------------------------------------------ every step

    def check_step(self) -> None:
        sim = self.sim
        self._follow_topic_znodes()
        zk_states: dict[TP, tuple[int, list[int]]] = {}
        for tp in sorted(sim.assignments):
            node = sim.zk.get(zkm.state_path(tp))
            if node is None:
                continue
            zk_states[tp] = (node.data["leader"], node.data["isr"])
            self._check_partition(tp, node.data)
        for v in inv.check_controller_state(zk_states, sim.assignments):
            self.fail(f"controller state: {v}")
        if sim.cfg.offsets_partitions:
            self._check_coordinators()

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
            for v in self.leader_hw.observe((broker.id, broker.incarnation, self._key(tp), epoch), rep.hw):
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
            key = (self._key(tp), member, broker.incarnation, len(log), len(self.acked[tp]))
            if key in self._member_ok:
                continue
            payloads = [payload for _, payload in log]
            for v in inv.check_acked_not_lost(self.acked[tp], payloads):
                self.fail(f"guarantee 1: {tp} on ISR member b{member}: {v}")
            self._member_ok.add(key)

    # ------------------------------------------------------------ topic znodes (issue 9)

    def _follow_topic_znodes(self) -> None:
        """Compare the topic znodes with the last step's: removed partitions, and moves that
        started or ended."""
        zk = self.sim.zk
        if self._topic_view[0] == zk.writes:
            return
        view: dict[TP, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}
        for t in zk.topics():
            moving = zk.moving(t)
            for p, replicas in zk.assignment(t).items():
                adding, removing = moving.get(p, ((), ()))
                view[(t, p)] = (replicas, adding, removing)
        before = self._topic_view[1]
        self._topic_view = (zk.writes, view)
        for tp, (replicas, adding, removing) in sorted(view.items()):
            if len(set(replicas)) != len(replicas) or not set(adding) | set(removing) <= set(replicas):
                self.fail(f"topic znode: {tp} replicas {list(replicas)} adding {list(adding)} removing {list(removing)}")
            if set(adding) & set(removing):
                self.fail(f"topic znode: {tp} adds and removes {sorted(set(adding) & set(removing))}")
            old = before.get(tp)
            if old is not None and (old[1] or old[2]) and not (adding or removing):
                self._move_ended(tp, old, replicas)
            if tp in self.removed:  # added again: a new partition with the same number
                del self.removed[tp]
        for tp in sorted(set(before) - set(view)):
            self._partition_removed(tp)

    def _move_ended(self, tp: TP, old: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]],
                    replicas: tuple[int, ...]) -> None:
        old_replicas, adding, removing = old
        target = {r for r in old_replicas if r not in removing}
        original = {r for r in old_replicas if r not in adding}
        if set(replicas) == target:
            self.moves_finished += 1
        elif set(replicas) == original:
            self.moves_cancelled += 1
        else:
            self.fail(f"reassignment: {tp} moving {list(old_replicas)} (+{list(adding)} -{list(removing)}) ended"
                      f" with {list(replicas)}, neither its target {sorted(target)} nor its original {sorted(original)}")

    def _partition_removed(self, tp: TP) -> None:
        """Its acknowledged records are gone on purpose: counted, and nothing about the
        partition is checked again (a partition added later with its number is new)."""
        self.removed[tp] = len(self.acked.get(tp, {}))
        self.acked_removed += self.removed[tp]
        for per_tp in (self.committed, self.acked, self.ack_epochs, self.produced, self.epoch_starts):
            per_tp.pop(tp, None)
        self._acked_ok_key.pop(tp, None)
        self.generation[tp] = self.generation.get(tp, 0) + 1
        self.sim.trace_note(f"checker: {tp} removed with {self.removed[tp]} acknowledged records")

    # ------------------------------------------------------------ end of a run

    def quiesce_problems(self) -> list[str]:
        """What keeps the cluster from having finished everything asked of it, once every
        fault healed: empty when done. Asked repeatedly; a run fails if it stays non-empty
        past a generous bound (liveness)."""
        sim, zk = self.sim, self.sim.zk
        out: list[str] = []
        if zk.controller_id() < 0:
            out.append("no controller")
        for t in zk.topics():
            for p, (adding, removing) in zk.moving(t).items():
                out.append(f"{(t, p)} is still moving (adding {list(adding)}, removing {list(removing)})")
        if zk.reassignment():
            out.append(f"/admin/reassign_partitions still has {sorted(zk.reassignment())}")
        for kind in zkm.ADMIN_KINDS:
            if zk.partition_admin_requests(kind):
                out.append(f"/admin/partitions_{kind} still has {sorted(zk.partition_admin_requests(kind))}")
        assignments = sim.assignments
        for tp, replicas in sorted(assignments.items()):
            out.extend(self._partition_settled(tp, replicas))
        if sim.cfg.offsets_partitions:
            out.extend(self._coordinators_settled())
        for broker in sim.running_brokers():
            strays = sorted(tp for tp in set(broker.disk) | set(broker.replicas) if broker.id not in assignments.get(tp, ()))
            if strays:
                out.append(f"b{broker.id} still keeps replicas of {strays}, which it no longer replicates")
        return out

    def _partition_settled(self, tp: TP, replicas: tuple[int, ...]) -> list[str]:
        node = self.sim.zk.get(zkm.state_path(tp))
        if node is None:
            return [f"{tp} has no state znode"]
        leader, epoch, isr = node.data["leader"], node.data["leader_epoch"], node.data["isr"]
        if leader < 0:
            return [f"{tp} has no leader"]
        if set(isr) != set(replicas):
            return [f"{tp} ISR {isr} is not its replicas {list(replicas)}"]
        out = []
        for b in replicas:
            broker = self.sim.brokers[b]
            rep = broker.replicas.get(tp) if broker.running else None
            if rep is None or rep.state.leader_epoch != epoch or rep.state.is_leader != (b == leader):
                out.append(f"{tp}: b{b} has not taken its role at leader epoch {epoch}")
        return out
