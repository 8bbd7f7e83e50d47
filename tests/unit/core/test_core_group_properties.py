"""Random event sequences against the group coordinator core (Hypothesis): clients join, sync,
heartbeat, commit, leave and go silent; appends succeed or fail in any order; time jumps;
the offsets partition moves away and comes back (reloaded from the simulated log).

Checked after every step: the coordinator's own invariants (it asserts them as it goes, and
here on every group), no reply token answered twice, generations of a group never go back.
At the end, with clients silent and every append resolved: every request was answered; every
OffsetCommit and SyncGroup answered without error is backed by a record in the log; and the
offsets in memory are what replaying the log gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from group_harness import PROTOCOLS, Harness
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite.core.codes import ErrorCode
from kafkalite.core.consumer_protocol import encode_subscription
from kafkalite.core.group_messages import JoinGroupResponse, OffsetCommitResponse, PartitionsDeleted, SyncGroupResponse
from kafkalite.core.offsets_records import GroupMetadataKey, OffsetCommitKey

E = ErrorCode
GROUPS = ("g", "h")
TPS = (("t", 0), ("t", 1), ("u", 0))
OTHER_PROTOCOLS = (("roundrobin", encode_subscription(["t", "u"])), ("range", encode_subscription(["u"])))
APPEND_ERRORS = (E.NOT_ENOUGH_REPLICAS, E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT, E.MESSAGE_TOO_LARGE)
TICKS = (0, 1, 100, 1_000, 3_000, 6_000, 10_000, 30_000, 600_000)


@dataclass
class Client:
    group: str
    instance: str | None
    member_id: str = ""
    generation: int = -1


class Run:
    def __init__(self) -> None:
        self.h = Harness(config={"group_max_size": 4, "offsets_retention_ms": 3_600_000,
                                 "offsets_retention_check_interval_ms": 60_000})
        self.h.lead()
        self.clients = [Client(GROUPS[i % 2], f"i{i}" if i % 3 == 0 else None) for i in range(6)]
        self.sent: dict[str, tuple[Client | None, object]] = {}
        self.generations: dict[object, int] = {}
        self.acked_commits: list[tuple[str, tuple[str, int], int]] = []
        self.acked_syncs: list[tuple[str, int, str, bytes]] = []

    # -------------------------------------------------------------- learning from answers

    def learn(self) -> None:
        for token, (client, extra) in list(self.sent.items()):
            resp = self.h.answer(token)
            if resp is None:
                continue
            del self.sent[token]
            if isinstance(resp, JoinGroupResponse) and client is not None:
                if resp.error in (E.NONE, E.MEMBER_ID_REQUIRED):
                    client.member_id = resp.member_id
                if resp.error is E.NONE:
                    client.generation = resp.generation_id
                if resp.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                    client.member_id, client.generation = "", -1
            elif isinstance(resp, SyncGroupResponse) and resp.error is E.NONE:
                group, generation, member_id = extra  # type: ignore[misc]
                self.acked_syncs.append((group, generation, member_id, resp.assignment))
            elif isinstance(resp, OffsetCommitResponse):
                group, offsets = extra  # type: ignore[misc]
                for p in resp.partitions:
                    if p.error is E.NONE:
                        self.acked_commits.append((group, (p.topic, p.partition), offsets[(p.topic, p.partition)]))

    def check(self) -> None:
        self.learn()
        for group in self.h.gc.groups.values():
            group.check_invariants()
            before = self.generations.get(group)
            assert before is None or group.generation_id >= before, "a generation went back"
            self.generations[group] = group.generation_id

    # -------------------------------------------------------------- actions

    def act(self, data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(
            ["join", "join", "sync", "heartbeat", "heartbeat", "commit", "simple_commit", "leave", "tick", "tick",
             "complete", "complete", "fail", "move", "fetch", "delete", "offset_delete", "topic_deleted",
             "cooperate", "cooperate"]))
        h = self.h
        c = data.draw(st.sampled_from(self.clients))
        if kind == "join":
            protocols = data.draw(st.sampled_from([PROTOCOLS, PROTOCOLS, OTHER_PROTOCOLS]))
            member_id = c.member_id if data.draw(st.booleans()) else ""
            t = h.join(c.group, member_id, instance=c.instance, protocols=protocols, require_known=data.draw(st.booleans()),
                       session_ms=data.draw(st.sampled_from([6_000, 10_000])), rebalance_ms=data.draw(st.sampled_from([6_000, 20_000, 20_000, 0, -1])))
            self.sent[t] = (c, None)
        elif kind == "sync":
            generation = c.generation if data.draw(st.integers(0, 3)) else data.draw(st.integers(0, 4))
            group = h.gc.groups.get(c.group)
            assignments = [(m, m.encode()) for m in group.members] if group is not None else []
            t = h.sync(c.group, generation, c.member_id, assignments, instance=c.instance)
            self.sent[t] = (c, (c.group, generation, c.member_id))
        elif kind == "heartbeat":
            h.heartbeat(c.group, c.generation, c.member_id, instance=c.instance)
        elif kind in ("commit", "simple_commit"):
            offsets = {tp: data.draw(st.integers(0, 1000)) for tp in data.draw(st.sets(st.sampled_from(TPS), min_size=1))}
            if kind == "commit":
                group = c.group
                t = h.commit(group, c.generation, c.member_id, offsets, instance=c.instance)
            else:
                group = data.draw(st.sampled_from(GROUPS + ("s",)))
                t = h.commit(group, -1, "", offsets)
            self.sent[t] = (None, (group, offsets))
        elif kind == "leave":
            members = [(c.member_id, c.instance)] if data.draw(st.booleans()) else [("", c.instance)]
            h.leave(c.group, *members)
        elif kind == "tick":
            h.tick(data.draw(st.sampled_from(TICKS)))
        elif kind == "complete" and h.pending:
            h.complete(data.draw(st.sampled_from(sorted(h.pending))))
        elif kind == "fail" and h.pending:
            h.fail(data.draw(st.sampled_from(APPEND_ERRORS)), data.draw(st.sampled_from(sorted(h.pending))))
        elif kind == "move":
            h.follow()
            for pending in list(h.pending):  # the old leader's appends: some made it to the log
                if data.draw(st.booleans()):
                    h.complete(pending)
                else:
                    h.fail(E.NOT_LEADER_OR_FOLLOWER, pending)
            h.lead(finish=data.draw(st.booleans()))
        elif kind == "fetch":
            h.fetch(c.group, data.draw(st.none() | st.just(TPS[:2])))
        elif kind == "delete":
            self.sent[h.delete_groups(*data.draw(st.sets(st.sampled_from(GROUPS + ("s",)), min_size=1)))] = (None, None)
        elif kind == "offset_delete":
            self.sent[h.delete_offsets(c.group, *data.draw(st.sets(st.sampled_from(TPS), min_size=1)))] = (None, None)
        elif kind == "cooperate":
            self.cooperate(c.group, data)
        elif kind == "topic_deleted":
            h.step(PartitionsDeleted((data.draw(st.sampled_from(TPS)),)))

    def cooperate(self, group: str, data: st.DataObject) -> None:
        """The well-behaved path, so that runs reach Stable often: the group's clients join
        (again), wait out the delay, sync, and the group record is written (or not)."""
        h = self.h
        members = [c for c in self.clients if c.group == group]
        joins = {}
        for c in members:
            t = h.join(group, c.member_id, instance=c.instance, require_known=True)
            self.sent[t] = (c, None)
            joins[t] = c
        self.learn()
        for t, c in joins.items():  # the second JoinGroup of those told MEMBER_ID_REQUIRED
            if h.answer(t) is not None and h.answer(t).error is E.MEMBER_ID_REQUIRED:
                t2 = h.join(group, c.member_id, require_known=True)
                self.sent[t2] = (c, None)
        h.settle_all(group)
        h.tick(data.draw(st.sampled_from([0, 100, 3_000])))
        self.learn()
        g = h.gc.groups.get(group)
        for c in members:
            if g is not None and c.member_id in g.members:
                assignments = [(m, m.encode()) for m in g.members] if g.leader_id == c.member_id else []
                t = h.sync(group, c.generation, c.member_id, assignments, instance=c.instance)
                self.sent[t] = (c, (group, c.generation, c.member_id))
        if h.pending and data.draw(st.integers(0, 3)):
            h.complete()

    # -------------------------------------------------------------- the end

    def settle(self) -> None:
        """Clients fall silent; appends resolve; time passes until nothing is left."""
        h = self.h
        if h.gc.partitions.get(0) is not None and h.gc.partitions[0].load is not None:
            h.finish_load(0)
        for _ in range(20):
            h.complete()
            h.tick(400_000)
        h.complete()
        self.learn()
        unanswered = [t for t in self.sent if h.answer(t) is None]
        assert not unanswered, f"never answered: {unanswered}"
        assert not h.pending

    def check_log_backs_acknowledgements(self) -> None:
        records = self.h.decoded_log()
        committed = {(r.key.group, (r.key.topic, r.key.partition), r.value.offset)
                     for r in records if isinstance(r.key, OffsetCommitKey) and r.value is not None}
        for ack in self.acked_commits:
            assert ack in committed, f"commit {ack} acknowledged but not in the log"
        stored = set()
        for r in records:
            if isinstance(r.key, GroupMetadataKey) and r.value is not None:
                for m in r.value.members:
                    stored.add((r.key.group, r.value.generation, m.member_id, m.assignment))
        for ack in self.acked_syncs:
            assert ack in stored, f"assignment {ack} answered but never written"

    def check_memory_matches_the_log(self) -> None:
        replay = Harness(config=self.h.config)
        replay.log = self.h.log
        replay.lead()
        for group_id, group in self.h.gc.groups.items():
            reloaded = replay.gc.groups.get(group_id)
            for tp, committed in group.offsets.items():
                assert reloaded is not None and tp in reloaded.offsets, f"{group_id} {tp} in memory, not in the log"
                assert reloaded.offsets[tp].offset == committed.offset


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_event_sequences_keep_every_invariant_and_answer_everything(data):
    run = Run()
    for _ in range(data.draw(st.integers(1, 80))):
        run.act(data)
        run.check()
    run.settle()
    run.check()
    run.check_log_backs_acknowledgements()
    run.check_memory_matches_the_log()
