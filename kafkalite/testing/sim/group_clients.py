"""Offset-committing clients (node 0, issue 10): "simple" consumers that keep their
positions in Kafka (OffsetCommit with generation -1, no group membership), and readers of
those offsets (OffsetFetch).

One committer per (group, partition of topic t), one commit in flight at a time, each with
a higher offset than the last, sent to the broker that leads the group's
`__consumer_offsets` partition (`partition_for`; the leader read from the ZooKeeper model,
as clients.py does, in place of FindCoordinator). NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT and no answer at
all are retried with the next offset; any other error is a violation. What the checker
needs (kafkalite.testing.sim.checker, "consumer groups"): every offset sent, every commit
answered NONE, and every fetch answered with what the client had been told before it sent
the fetch.

At the end of a run (`final_check`, after the cluster settled): committing stops, the
commits in flight are answered or time out, and every group's offsets are fetched from its
current coordinator, which must answer within a bound (not stuck loading); the fetched
offsets are checked like any other fetch, which, with nothing sent after the last
acknowledged commit, means equal to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_messages import OFFSETS_TOPIC, OffsetCommitResponse, OffsetFetchResponse, partition_for
from kafkalite.testing.sim import zk as zkm

if TYPE_CHECKING:
    from kafkalite.testing.sim.runner import Simulation

TP = tuple[str, int]
GTP = tuple[str, TP]  # (group id, topic partition)
E = ErrorCode
RETRY_MS = 10
FINAL_CHECK_MS_MAX = 5_000


@dataclass
class Committer:
    group: str
    tp: TP
    next_offset: int = 1
    in_flight: bool = False

    @property
    def key(self) -> GTP:
        return self.group, self.tp


class GroupClients:
    def __init__(self, sim: Simulation, topic: str) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.groups = [f"g{i}" for i in range(self.cfg.groups)]
        tps = [(topic, p) for p in range(self.cfg.group_topic_partitions)]
        self.committers = [Committer(g, tp) for g in self.groups for tp in tps]
        self.tps = tps
        self.committing = True
        self.fetching = True
        self.fetches_checked = 0
        self.last_fetched: dict[GTP, int] = {}  # the offset each group partition was last fetched at
        self.final: dict[str, str] = {}  # group -> "" once its final fetch was checked, else the last error

    def start(self) -> None:
        for c in self.committers:
            self.sim.sched.after(1, "client commit", lambda c=c: self._commit_tick(c))
        self.sim.sched.after(1, "client offset fetch", self._fetch_tick)

    def coordinator(self, group: str) -> int:
        p = partition_for(group, self.cfg.offsets_partitions)
        node = self.sim.zk.get(zkm.state_path((OFFSETS_TOPIC, p)))
        return -1 if node is None else node.data["leader"]

    # ------------------------------------------------------------ commits

    def _commit_later(self, c: Committer) -> None:
        self.sim.sched.after(self.sim.rng.randint(1, self.cfg.group_commit_interval_ms_max), "client commit",
                             lambda: self._commit_tick(c))

    def _commit_tick(self, c: Committer) -> None:
        if not self.committing:
            return
        if self.commit(c) is None:
            self._commit_later(c)  # no coordinator known yet

    def commit(self, c: Committer, then: Callable[[ErrorCode], None] | None = None) -> int | None:
        """One OffsetCommit of the committer's next offset (None: no coordinator known);
        `then` gets its answer (REQUEST_TIMED_OUT: none came)."""
        coordinator = self.coordinator(c.group)
        if coordinator < 0:
            return None
        assert not c.in_flight, "one commit in flight per committer"
        offset = c.next_offset
        c.next_offset += 1
        c.in_flight = True
        self.sim.checker.on_commit_sent(c.key, offset)

        def on_response(resp: OffsetCommitResponse | None) -> None:
            c.in_flight = False
            if resp is None:
                code = E.REQUEST_TIMED_OUT  # no answer: it may or may not have been written
            else:
                (result,) = resp.partitions
                code = result.error
            self.sim.checker.on_commit_answered(c.key, offset, code, coordinator)
            if then is not None:
                then(code)
            self._commit_later(c)

        timeout = self.cfg.offsets_commit_timeout_ms + 4 * self.cfg.net_delay_ms_max
        self.sim.clients.rpc(coordinator, "OffsetCommit", {"group": c.group, "offsets": [(c.tp, offset)]},
                             timeout, on_response)  # type: ignore[arg-type]
        return offset

    # ------------------------------------------------------------ fetches

    def _fetch_tick(self) -> None:
        if self.fetching:
            self.fetch(self.sim.rng.choice(self.groups), None)
            self.sim.sched.after(self.sim.rng.randint(1, self.cfg.group_fetch_interval_ms_max), "client offset fetch",
                                 self._fetch_tick)

    def committer(self, group: str, tp: TP) -> Committer:
        return next(c for c in self.committers if c.key == (group, tp))

    def fetch(self, group: str, on_error: Callable[[str], None] | None) -> None:
        """OffsetFetch of the group's partitions from its coordinator; the answer is checked
        against what was acknowledged before it was sent."""
        coordinator = self.coordinator(group)
        if coordinator < 0:
            if on_error is not None:
                on_error("no leader of its offsets partition")
            return
        floors = {tp: self.sim.checker.commit_acked.get((group, tp)) for tp in self.tps}

        def on_response(resp: OffsetFetchResponse | None) -> None:
            if resp is None or resp.error is not E.NONE:
                error = "no answer" if resp is None else resp.error.name
                if resp is not None and resp.error not in RETRIABLE:
                    self.sim.checker.fail(f"groups: OffsetFetch of {group} from b{coordinator} answered {error}")
                if on_error is not None:
                    on_error(f"b{coordinator}: {error}")
                return
            self.fetches_checked += 1
            by_tp = {(f.topic, f.partition): f for f in resp.partitions}
            for tp in self.tps:
                f = by_tp[tp]
                if f.error is not E.NONE:
                    self.sim.checker.fail(f"groups: OffsetFetch of {group} {tp} from b{coordinator} answered {f.error.name}")
                    continue
                self.sim.checker.on_offset_fetched((group, tp), floors[tp], f.offset, coordinator)
                self.last_fetched[(group, tp)] = f.offset
            if on_error is None:
                return
            self.final[group] = ""

        self.sim.clients.rpc(coordinator, "OffsetFetch", {"group": group, "partitions": list(self.tps)},
                             self.cfg.request_timeout_ms, on_response)  # type: ignore[arg-type]

    # ------------------------------------------------------------ end of a run

    def final_check(self) -> list[str]:
        """After the cluster settled: stop committing, let what is in flight end, then fetch
        every group's offsets from its coordinator, retrying until answered. Returns the
        liveness problems (groups whose coordinator did not answer within the bound)."""
        sim = self.sim
        self.committing = False
        self.fetching = False
        until = sim.sched.now_ms + FINAL_CHECK_MS_MAX
        while any(c.in_flight for c in self.committers) and sim.sched.now_ms < until:
            sim.step()
        self.final = {g: "not asked yet" for g in self.groups}

        def ask(group: str) -> None:
            def on_error(error: str) -> None:
                self.final[group] = error
                sim.sched.after(RETRY_MS, "client final offset fetch", lambda: ask(group))

            self.fetch(group, on_error)

        for group in self.groups:
            ask(group)
        while any(self.final.values()) and sim.sched.now_ms < until:
            sim.step()
        stuck = [c.key for c in self.committers if c.in_flight]
        return ([f"groups: commit of {key} still unanswered" for key in stuck] +
                [f"groups: the coordinator of {g} did not answer OffsetFetch ({error})"
                 for g, error in sorted(self.final.items()) if error])


RETRIABLE = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                       E.REQUEST_TIMED_OUT})
