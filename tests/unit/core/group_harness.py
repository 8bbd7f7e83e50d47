"""A driver for the group coordinator core in unit tests: a fake clock, a simulated
`__consumer_offsets` log (records kept as the bytes the codec writes), and a check that
every reply token is answered at most once."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from kafkalite.core.codes import ErrorCode
from kafkalite.core.consumer_protocol import encode_subscription
from kafkalite.core.group_coordinator import GroupCoordinator, GroupCoordinatorConfig
from kafkalite.core.group_messages import (
    AppendCompleted,
    AppendFailed,
    AppendRecords,
    BecameFollower,
    BecameLeader,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeavingMember,
    ListGroupsRequest,
    LoadedRecord,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    Ready,
    RecordsLoaded,
    SyncGroupRequest,
)
from kafkalite.core.offsets_records import decode_record, encode_record

E = ErrorCode
SUB_T = encode_subscription(["t"])
PROTOCOLS = (("range", SUB_T),)


@dataclass
class Harness:
    partitions: int = 1
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = itertools.count(1)
        self.gc = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_partitions=self.partitions, **self.config),
                                   new_member_uuid=lambda: f"u{next(ids)}")
        self.now = 0
        self.answers: dict[Any, Any] = {}
        self.pending: dict[int, AppendRecords] = {}
        self.log: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        self.loads: list[Any] = []
        self.notes: list[Any] = []
        self._tokens = itertools.count(1)
        self.epoch: dict[int, int] = {}

    # -------------------------------------------------------------- plumbing

    def collect(self, ready: Ready) -> Ready:
        for a in ready.answers:
            assert a.reply_to not in self.answers, f"{a.reply_to} answered twice"
            self.answers[a.reply_to] = a.response
        for ap in ready.appends:
            self.pending[ap.append_id] = ap
        self.loads.extend(ready.loads)
        self.notes.extend(ready.notes)
        assert ready.deadline_ms == self.gc.next_deadline_ms
        return ready

    def step(self, event: Any) -> Ready:
        return self.collect(self.gc.handle(event, self.now))

    def tick(self, ms: int) -> Ready:
        """Advance the clock by `ms`, firing every deadline on the way in order."""
        target = self.now + ms
        while (d := self.gc.next_deadline_ms) is not None and d <= target:
            self.now = max(self.now, d)
            self.collect(self.gc.poll(self.now))
        self.now = target
        return self.collect(self.gc.poll(self.now))

    def token(self, kind: str) -> str:
        return f"{kind}{next(self._tokens)}"

    def answer(self, token: str) -> Any:
        return self.answers.get(token)

    # -------------------------------------------------------------- the offsets log

    def complete(self, append_id: int | None = None) -> None:
        """Commit pending appends (all, oldest first, or one) to the simulated log."""
        ids = sorted(self.pending) if append_id is None else [append_id]
        for i in ids:
            ap = self.pending.pop(i)
            log = self.log.setdefault(ap.partition, [])
            base = len(log)
            for r in ap.records:
                key, value = encode_record(r)
                log.append((len(log), key, value))
            self.step(AppendCompleted(i, base))

    def fail(self, error: ErrorCode, append_id: int | None = None) -> None:
        ids = sorted(self.pending) if append_id is None else [append_id]
        for i in ids:
            self.pending.pop(i)
            self.step(AppendFailed(i, error))

    def lead(self, partition: int = 0, epoch: int | None = None, *, finish: bool = True) -> None:
        epoch = self.epoch.get(partition, 0) + 1 if epoch is None else epoch
        self.epoch[partition] = epoch
        self.step(BecameLeader(partition, epoch))
        if finish:
            self.finish_load(partition, epoch)

    def finish_load(self, partition: int = 0, epoch: int | None = None) -> None:
        epoch = self.epoch[partition] if epoch is None else epoch
        records = tuple(LoadedRecord(o, k, v) for o, k, v in self.log.get(partition, []))
        self.step(RecordsLoaded(partition, epoch, records, True))

    def follow(self, partition: int = 0, epoch: int | None = None) -> None:
        epoch = self.epoch.get(partition, 0) + 1 if epoch is None else epoch
        self.epoch[partition] = epoch
        self.step(BecameFollower(partition, epoch))

    def decoded_log(self, partition: int = 0) -> list[Any]:
        return [decode_record(k, v) for _, k, v in self.log.get(partition, [])]

    # -------------------------------------------------------------- requests

    def join(self, group: str = "g", member_id: str = "", *, instance: str | None = None, protocols=PROTOCOLS,
             session_ms: int = 10_000, rebalance_ms: int = 30_000, require_known: bool = False,
             protocol_type: str = "consumer", client_id: str = "c") -> str:
        t = self.token("join")
        self.step(JoinGroupRequest(group, member_id, instance, protocol_type, tuple(protocols), session_ms, rebalance_ms,
                                   require_known, t, client_id=client_id, client_host="/127.0.0.1"))
        return t

    def sync(self, group: str, generation: int, member_id: str, assignments=(), *, instance: str | None = None) -> str:
        t = self.token("sync")
        self.step(SyncGroupRequest(group, generation, member_id, instance, tuple(assignments), t))
        return t

    def heartbeat(self, group: str, generation: int, member_id: str, *, instance: str | None = None) -> ErrorCode:
        t = self.token("hb")
        self.step(HeartbeatRequest(group, generation, member_id, instance, t))
        return self.answers[t].error

    def leave(self, group: str, *members: tuple[str, str | None]) -> Any:
        t = self.token("leave")
        self.step(LeaveGroupRequest(group, tuple(LeavingMember(m, i) for m, i in members), t))
        return self.answers[t]

    def commit(self, group: str, generation: int, member_id: str, offsets: dict, *, instance: str | None = None,
               metadata: str | None = None, retention_ms: int = -1) -> str:
        t = self.token("commit")
        parts = tuple(OffsetCommitPartition(tp[0], tp[1], o, metadata) for tp, o in offsets.items())
        self.step(OffsetCommitRequest(group, generation, member_id, instance, parts, t, retention_ms))
        return t

    def fetch(self, group: str, partitions=None) -> Any:
        t = self.token("fetch")
        self.step(OffsetFetchRequest(group, None if partitions is None else tuple(partitions), t))
        return self.answers[t]

    def offsets(self, group: str) -> dict:
        resp = self.fetch(group)
        assert resp.error is E.NONE, resp
        return {(p.topic, p.partition): p.offset for p in resp.partitions}

    def list_groups(self) -> Any:
        t = self.token("list")
        self.step(ListGroupsRequest(t))
        return self.answers[t]

    def describe(self, *groups: str) -> Any:
        t = self.token("describe")
        self.step(DescribeGroupsRequest(tuple(groups), t))
        return self.answers[t]

    def delete_groups(self, *groups: str) -> str:
        t = self.token("delete")
        self.step(DeleteGroupsRequest(tuple(groups), t))
        return t

    def delete_offsets(self, group: str, *tps: tuple[str, int]) -> str:
        t = self.token("offdel")
        self.step(OffsetDeleteRequest(group, tuple(tps), t))
        return t

    # -------------------------------------------------------------- composite steps

    def state(self, group: str = "g") -> str | None:
        g = self.gc.groups.get(group)
        return None if g is None else g.state.value

    def join_new(self, group: str = "g", **kw: Any) -> tuple[str, str]:
        """A dynamic member's first JoinGroup v4+: MEMBER_ID_REQUIRED, then the real one.
        Returns (member id, token of the parked JoinGroup)."""
        first = self.join(group, require_known=True, **kw)
        resp = self.answers[first]
        assert resp.error is E.MEMBER_ID_REQUIRED, resp
        return resp.member_id, self.join(group, resp.member_id, require_known=True, **kw)

    def settle(self, *tokens: str) -> None:
        """Let initial rebalance delays pass until every token is answered (joins during
        the delay extend it, KIP-134)."""
        for _ in range(100):
            if all(t in self.answers for t in tokens):
                return
            self.tick(self.gc.config.group_initial_rebalance_delay_ms)
        raise AssertionError(f"not answered: {[t for t in tokens if t not in self.answers]}")

    def settle_all(self, group: str = "g") -> None:
        """Let the group's initial rebalance delay (however often extended) run out."""
        for _ in range(100):
            g = self.gc.groups.get(group)
            if g is None or g.join is None or not g.join.initial:
                return
            self.tick(g.join.deadline.at_ms - self.now)
        raise AssertionError("the initial delay never ends")

    def stable_group(self, n: int = 2, group: str = "g", **kw: Any) -> tuple[list[str], int]:
        """n dynamic members through the initial delay, JoinGroup, SyncGroup and the group
        record: a Stable group. Returns (member ids, generation)."""
        joins = [self.join_new(group, **kw) for _ in range(n)]
        self.settle(*(t for _, t in joins))
        responses = [self.answers[t] for _, t in joins]
        assert all(r.error is E.NONE for r in responses), responses
        generation = responses[0].generation_id
        leader = responses[0].leader
        members = [m for m, _ in joins]
        syncs = [self.sync(group, generation, m, [(x, x.encode()) for x in members] if m == leader else ())
                 for m in members]
        self.complete()
        assert all(self.answers[s].error is E.NONE for s in syncs), [self.answers.get(s) for s in syncs]
        assert self.state(group) == "Stable"
        return members, generation
