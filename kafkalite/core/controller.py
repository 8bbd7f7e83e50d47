"""The controller as one synchronous state machine (DESIGN.md sections 6 and 10; seed 000
sections A, B and D; KIP-497).

It owns the controller's state: live brokers with their epochs, topic assignments,
partition states with their znode versions (partition epochs), brokers shutting down and
the controller epoch. Two drivers run it: `kafkalite.broker.controller` (kazoo, the RPC
channel) and `kafkalite.testing.sim` (the simulated ZooKeeper and network).

The shape is etcd raft's `Ready`: a driver hands in one event with `handle(event, now_ms)`
and gets back a `Ready` of effects:
- `sends`: requests for brokers (LeaderAndIsr, UpdateMetadata, StopReplica). The driver
  delivers each one until the broker answers or leaves (re-registers); see SEND_POLICY.
- `answers`: replies for callers waiting on an event (`reply_to` is the driver's token).
- `notes`: what happened, for the driver's log or trace.
- `io`: at most one ZooKeeper operation (conditional writes fenced on the controller
  epoch, creates, deletes). While it is set, the event is not finished: the driver performs
  it and hands the outcome back with `resume(outcome, now_ms)`, which returns the next
  `Ready`. Memory changes only after a write succeeded (STYLE habit 4).

Handlers are generators that `yield` each ZooKeeper operation and receive its outcome, so
a handler reads top to bottom like the decision it makes. If the controller epoch moved
(another controller won) the driver calls `abort`, which answers the waiting caller
NOT_CONTROLLER, and then `resign`.

A stale znode version means someone else wrote the partition state since we read it (an
older controller, or a lost response of our own): the driver reports the state it finds
now, and the handler decides again from it (WRITE_ATTEMPTS_MAX times); AlterIsr instead
answers INVALID_UPDATE_VERSION and lets the leader retry from the new state.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafkalite.core import election, reassignment
from kafkalite.core.codes import ErrorCode
from kafkalite.core.election import PartitionChange, PartitionState
from kafkalite.core.messages import (
    AlterIsrPartitionResult,
    AlterIsrRequest,
    AlterIsrResponse,
    BrokerEndpoint,
    ControlledShutdownResponse,
    ControllerRequest,
    ControllerResponse,
    LeaderAndIsr,
    PartitionLeadership,
    PartitionMetadata,
    PreferredElectionResponse,
    StopReplica,
    UpdateMetadata,
)
from kafkalite.core.quota import FOLLOWER_RATE, LEADER_RATE
from kafkalite.core.reassignment import Move
from kafkalite.core.replica_state import NO_LEADER, AlterIsrItem

TP = tuple[str, int]

WRITE_ATTEMPTS_MAX = 5
PARTITIONS_NOTED_MAX = 20  # partitions a note names (`_named`); the rest are counted
TOPIC_DELETION_WAIT_MS = 30_000  # StopReplica answers awaited before the znodes go

SEND_POLICY = """A request to a broker is sent, and resent after a failure or timeout, for
as long as that broker stays registered with the same broker epoch; requests to one broker
are delivered in order. An UpdateMetadata is held until the LeaderAndIsr requests emitted
before it have been answered (bounded): clients must not learn of a leader before the
leader does (issue 7)."""


# ------------------------------------------------------------------ state


@dataclass(frozen=True)
class LiveBroker:
    """A registered broker: its /brokers/ids znode and its epoch (the znode's czxid)."""

    id: int
    epoch: int
    host: str = "127.0.0.1"
    port: int = 0
    inter_broker_port: int = 0
    admin_port: int = 0
    rack: str | None = None
    # Named client listeners (name, advertised host, port) when there are several: clients
    # connected on listener NAME are told each broker's NAME address (Kafka's listeners).
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # Its process recovered its logs after a crash: what it had not flushed may be gone.
    # Every registration of that process says so; one of a process that started after a
    # clean shutdown, or that never crashed, does not.
    unclean_start: bool = False


@dataclass(frozen=True)
class Topic:
    """/brokers/topics/<t>: partition -> assigned replicas (first is preferred), config, and
    for partitions being moved the replicas being added and removed (KIP-455). `topic_id`
    (KIP-516) as the znode holds it, None for a topic created before topic ids: kept by
    every write of the topic and sent in LeaderAndIsr."""

    partitions: Mapping[int, tuple[int, ...]]
    config: Mapping[str, str] = field(default_factory=dict)
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    topic_id: str | None = None

    def with_partitions(self, replicas: Mapping[int, tuple[int, ...]] | None = None, moves: Mapping[int, Move] | None = None,
                        dropped: Iterable[int] = ()) -> Topic:
        """This topic with partitions set (ended moves), moved, or dropped."""
        parts, adding, removing = dict(self.partitions), dict(self.adding), dict(self.removing)
        replicas, moves = replicas or {}, moves or {}
        for p in dropped:
            parts.pop(p, None)
            adding.pop(p, None)
            removing.pop(p, None)
        for p, r in replicas.items():
            parts[p] = tuple(r)
            adding.pop(p, None)
            removing.pop(p, None)
        for p, m in moves.items():
            parts[p] = m.replicas
            adding[p], removing[p] = m.adding, m.removing
            if not m.moving:
                del adding[p], removing[p]
        return Topic(parts, self.config, adding, removing, self.topic_id)


# ------------------------------------------------------------------ events


@dataclass(frozen=True)
class Activated:
    """This broker won /controller with `epoch`; everything read back from ZooKeeper.
    `written_zxid[tp]` is the mzxid of the state znode's last write (bounced-broker check)."""

    epoch: int
    brokers: Mapping[int, LiveBroker]
    topics: Mapping[str, Topic]
    states: Mapping[TP, PartitionState]
    written_zxid: Mapping[TP, int] = field(default_factory=dict)
    pending_deletions: tuple[str, ...] = ()
    preferred_election: tuple[TP, ...] | None = None  # /admin/preferred_replica_election, if present
    reassignments: Mapping[TP, tuple[int, ...]] = field(default_factory=dict)  # /admin/reassign_partitions
    throttle: Mapping[str, int] = field(default_factory=dict)
    partitions_add: Mapping[TP, tuple[int, ...]] = field(default_factory=dict)  # /admin/partitions_add
    partitions_remove: tuple[TP, ...] = ()  # /admin/partitions_remove
    # Registrations this broker already knew gone (BrokerProcessGone's evidence, found by its
    # own watches before it won): handled as failed from the start, so a failover after the
    # controller's own kill -9 elects for the dead broker's partitions in the same pass,
    # and builds no LeaderAndIsr or UpdateMetadata for it.
    gone: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokersChanged:
    brokers: Mapping[int, LiveBroker]


@dataclass(frozen=True)
class BrokerProcessGone:
    """Evidence, before its ZooKeeper session ends, that the process registered as
    `broker_id` at `epoch` is gone: the controller's connection to it closed and connecting
    again was refused, or another incarnation answers on its address (issue 13). The broker
    is handled as failed at once; its registration, until the session expires, no longer
    counts. Safe even if the evidence were wrong: the partitions it led get new leader
    epochs, so a zombie can neither acknowledge a write nor shrink an ISR (seed section A)."""

    broker_id: int
    epoch: int


@dataclass(frozen=True)
class BrokerProcessBack:
    """The process of a registration declared gone answers again as that same registration
    (the evidence was wrong): it counts again, handled as a broker that started."""

    broker: LiveBroker


@dataclass(frozen=True)
class ReplicasOffline:
    """Every broker's report of replicas whose log dir failed (KIP-112, issue 14; the
    children of /log_dir_failures): broker -> (its registration's epoch, partitions). A
    report counts while that registration is live; the replicas are then ineligible for
    their partitions (not leaders, not in the ISR), and shown offline in UpdateMetadata."""

    reports: Mapping[int, tuple[int, tuple[TP, ...]]]


@dataclass(frozen=True)
class TopicsChanged:
    """The children of /brokers/topics: `present` all names, `loaded` the assignments of
    those `topics_to_load` named, `states` any state znodes they already have."""

    present: frozenset[str]
    loaded: Mapping[str, Topic]
    states: Mapping[TP, PartitionState] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicConfigsChanged:
    """Issue 16: topics' configs as /config/topics now holds them (a /config/changes
    notification named them). Every broker gets them in UpdateMetadata; the controller's
    own elections read unclean.leader.election.enable from them."""

    configs: Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class TopicsMarkedForDeletion:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class PreferredElectionZnode:
    """/admin/preferred_replica_election was written; its partitions, parsed."""

    partitions: tuple[TP, ...]


@dataclass(frozen=True)
class PreferredElectionRequested:
    partitions: tuple[TP, ...] | None
    reply_to: Any


@dataclass(frozen=True)
class ReassignmentsChanged:
    """/admin/reassign_partitions as it is now (empty when the znode is gone: a cancel)."""

    wanted: Mapping[TP, tuple[int, ...]]
    throttle: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionsAddRequested:
    """The children of /admin/partitions_add: new partition -> its replicas."""

    partitions: Mapping[TP, tuple[int, ...]]


@dataclass(frozen=True)
class PartitionsRemoveRequested:
    """The children of /admin/partitions_remove."""

    partitions: tuple[TP, ...]


@dataclass(frozen=True)
class AutoRebalanceDue:
    imbalance_pct_max: float


@dataclass(frozen=True)
class AlterIsrRequested:
    request: AlterIsrRequest
    reply_to: Any


@dataclass(frozen=True)
class ControlledShutdownRequested:
    broker_id: int
    broker_epoch: int
    reply_to: Any


@dataclass(frozen=True)
class BrokerAnswered:
    """A broker answered a request the controller sent (only StopReplica answers matter)."""

    broker_id: int
    request: ControllerRequest
    error: int


ControllerEvent = (
    Activated | BrokersChanged | BrokerProcessGone | BrokerProcessBack | ReplicasOffline | TopicsChanged | TopicsMarkedForDeletion
    | PreferredElectionZnode
    | PreferredElectionRequested | AutoRebalanceDue | AlterIsrRequested | ControlledShutdownRequested
    | ReassignmentsChanged | PartitionsAddRequested | PartitionsRemoveRequested | TopicConfigsChanged
)


# ------------------------------------------------------------------ ZooKeeper operations and outcomes


@dataclass(frozen=True)
class WriteStates:
    """Conditional sets of state znodes: tp -> (new state, expected znode version)."""

    updates: Mapping[TP, tuple[PartitionState, int]]


@dataclass(frozen=True)
class CreateStates:
    """State znodes of new partitions (version 0)."""

    states: Mapping[TP, PartitionState]


@dataclass(frozen=True)
class DeleteTopic:
    """Remove /brokers/topics/<t> (with its partitions) and /admin/delete_topics/<t>."""

    topic: str


@dataclass(frozen=True)
class DeletePreferredElectionZnode:
    pass


@dataclass(frozen=True)
class WriteTopic:
    """Set /brokers/topics/<t> (fenced on the controller epoch): outcome Written or Failed."""

    topic: str
    assignment: Topic


@dataclass(frozen=True)
class RemoveReassignments:
    """Drop these partitions' entries from /admin/reassign_partitions (the znode goes when
    none remain; nothing happens if it is gone already)."""

    partitions: tuple[TP, ...]


@dataclass(frozen=True)
class DeletePartitions:
    """Remove the partition and state znodes of removed partitions."""

    partitions: tuple[TP, ...]


@dataclass(frozen=True)
class DeletePartitionAdminZnodes:
    """Remove /admin/partitions_add/<t>/<p> (kind "add") or /admin/partitions_remove/... ("remove")."""

    kind: str
    partitions: tuple[TP, ...]


@dataclass(frozen=True)
class WaitForAnswers:
    """Hold the event until the listed brokers answered `request_kind` or `deadline_ms`."""

    brokers: frozenset[int]
    deadline_ms: int


ZkOperation = (
    WriteStates | CreateStates | DeleteTopic | DeletePreferredElectionZnode | WaitForAnswers | WriteTopic
    | RemoveReassignments | DeletePartitions | DeletePartitionAdminZnodes
)


@dataclass(frozen=True)
class Written:
    version: int


@dataclass(frozen=True)
class Stale:
    """The expected version did not match (or the znode already existed): what is there now."""

    current: PartitionState | None


@dataclass(frozen=True)
class Failed:
    reason: str


WriteOutcome = Written | Stale | Failed


# ------------------------------------------------------------------ effects


@dataclass(frozen=True)
class Send:
    broker_id: int
    request: ControllerRequest


@dataclass(frozen=True)
class Answer:
    reply_to: Any
    response: ControllerResponse


@dataclass(frozen=True)
class Note:
    level: str  # "info" | "warning"
    text: str


@dataclass
class Ready:
    sends: list[Send] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    io: ZkOperation | None = None


Handler = Generator[ZkOperation, Any, Any]


class Controller:
    def __init__(self, broker_id: int, *, unclean_leader_election: bool = False) -> None:
        self.broker_id = broker_id
        self.unclean_default = unclean_leader_election
        self.epoch = 0
        self.active = False
        self.live: dict[int, LiveBroker] = {}
        # Registrations whose process is known gone (BrokerProcessGone): broker -> epoch.
        # Not live, though ZooKeeper still lists them until their session expires.
        self.gone: dict[int, int] = {}
        # Replicas whose broker reported their log dir failed (ReplicasOffline): partition ->
        # brokers, and the reports as last read (re-applied when registrations change).
        self.offline: dict[TP, frozenset[int]] = {}
        self._offline_reports: dict[int, tuple[int, tuple[TP, ...]]] = {}
        self.topics: dict[str, Topic] = {}
        self.states: dict[TP, PartitionState] = {}
        self.shutting_down: set[int] = set()
        self.unclean_elections = 0
        self.reassignments: dict[TP, tuple[int, ...]] = {}  # accepted entries of /admin/reassign_partitions
        self.throttle: dict[str, int] = {}
        # The admin znode as read at take-over has been acted on (_on_reassignments_changed).
        # Until then a move without an accepted entry is not taken for cancelled: a take-over
        # that ZooKeeper failed before that step stays active, and would otherwise revert
        # moves whose entry it has not yet judged.
        self._reassignments_read = False
        self._out = Ready()
        self._running: Handler | None = None
        self._reply: tuple[Any, type[ControllerResponse]] | None = None  # the running event's caller
        self._answered: set[int] = set()  # brokers that answered what WaitForAnswers waits on
        # A take-over that has not yet told every broker the truth (`_tell_everyone`): if it
        # is aborted on ZooKeeper before then, abort() tells them what it has.
        self._owes_init = False
        # Registrations this controller has sent a full UpdateMetadata: broker -> epoch (see
        # _send_update_metadata).
        self._told_full: dict[int, int] = {}
        # New partitions whose state znode this controller set out to create and has no
        # outcome for: ZooKeeper failed the event part-way (a lost connection leaves a
        # chunked creation's outcome unknown) or failed that write. Created again by the
        # next topic event (the driver tries a failed one again); a failover finds them as
        # missing states (_on_activated).
        self._uncreated: set[TP] = set()
        # ISR members whose registration arrived from a crash (`unclean_start`) after the
        # partition's ISR last had them: partition -> brokers. Their membership predates
        # the crash and they may lack acknowledged records, so elections pass them over
        # while another ISR member is live (_elect_offline). Dropped from a partition once a
        # write leaves them out of its ISR or makes them its leader.
        self._stale_members: dict[TP, frozenset[int]] = {}
        # Moves whose replicas are in the topic znode but whose leader-epoch bump, which
        # tells every replica (the new ones start fetching), was not written: ZooKeeper
        # failed in between. Announced again by the next event that advances moves.
        self._unannounced_moves: set[TP] = set()

    # -------------------------------------------------------------- driving

    @property
    def busy(self) -> bool:
        """An event is waiting for the outcome of its ZooKeeper operation."""
        return self._running is not None

    def handle(self, event: ControllerEvent, now_ms: int) -> Ready:
        assert self._running is None, "one event at a time: resume() the running one first"
        self._now = now_ms
        reply = _caller_of(event)
        if isinstance(event, Activated):
            self._activate(event)
        elif not self.active:
            if reply is not None:
                self._refuse(reply, ErrorCode.NOT_CONTROLLER)
            return self._flush()
        self._reply = reply
        self._start(self._dispatch(event))
        return self._flush()

    def resume(self, outcome: Any, now_ms: int) -> Ready:
        assert self._running is not None, "nothing is waiting for an outcome"
        self._now = now_ms
        self._step(outcome)
        return self._flush()

    def on_answer(self, event: BrokerAnswered) -> None:
        """A broker answered; does not start an event (StopReplica answers for deletions)."""
        if isinstance(event.request, StopReplica) and event.request.delete:
            self._answered.add(event.broker_id)

    def abort(self, code: ErrorCode, *, deposed: bool = False) -> Ready:
        """The running event cannot finish (ZooKeeper refused or failed): answer its caller
        `code` and drop it. What was written stays written and is in memory already. A
        take-over aborted before it told the brokers anything tells them now what it holds
        (unless `deposed`: another controller's epoch fenced the write)."""
        self._running = None
        if self._owes_init and not deposed:  # (owed only while active: _activate to resign)
            self._tell_everyone()
        self._owes_init = False
        if self._reply is not None:
            self._refuse(self._reply, code)
            self._reply = None
        return self._flush()

    def resign(self) -> Ready:
        out = self.abort(ErrorCode.NOT_CONTROLLER, deposed=True)
        self.active = False
        self.live, self.topics, self.states, self.shutting_down = {}, {}, {}, set()
        self.reassignments, self.throttle, self.gone = {}, {}, {}
        self._reassignments_read = False
        self.offline, self._offline_reports = {}, {}
        self._uncreated, self._stale_members, self._unannounced_moves = set(), {}, set()
        return out

    def _start(self, gen: Handler) -> None:
        self._running = gen
        self._step(None)

    def _step(self, outcome: Any) -> None:
        assert self._running is not None
        try:
            self._out.io = self._running.send(outcome)
        except StopIteration:
            self._running = None
            assert self._reply is None, "an event that waits for an answer ended without one"

    def _flush(self) -> Ready:
        out, self._out = self._out, Ready()
        return out

    def _note(self, text: str, level: str = "info") -> None:
        self._out.notes.append(Note(level, text))

    def _answer(self, reply_to: Any, response: ControllerResponse) -> None:
        assert self._reply is not None and self._reply[0] is reply_to, "answered twice, or someone not waiting"
        self._out.answers.append(Answer(reply_to, response))
        self._reply = None

    def _refuse(self, reply: tuple[Any, type[ControllerResponse]], code: ErrorCode) -> None:
        reply_to, response_type = reply
        self._out.answers.append(Answer(reply_to, response_type(int(code))))

    def _dispatch(self, event: ControllerEvent) -> Handler:
        match event:
            case Activated():
                yield from self._on_activated(event)
            case BrokersChanged(brokers=brokers):
                self.gone = {b: e for b, e in self.gone.items() if b in brokers and brokers[b].epoch == e}
                yield from self._on_brokers_changed({b: v for b, v in brokers.items() if self.gone.get(b) != v.epoch})
            case BrokerProcessGone(broker_id=bid, epoch=epoch):
                if bid in self.live and self.live[bid].epoch == epoch:
                    self.gone[bid] = epoch
                    self._note(f"broker {bid} (epoch {epoch}) is gone: its connection closed and reconnecting failed; "
                               "handled as failed before its ZooKeeper session ends")
                    yield from self._on_brokers_changed({b: v for b, v in self.live.items() if b != bid})
            case BrokerProcessBack(broker=broker):
                if self.gone.get(broker.id) == broker.epoch and broker.id not in self.live:
                    del self.gone[broker.id]
                    self._note(f"broker {broker.id} (epoch {broker.epoch}) answers again: live")
                    yield from self._on_brokers_changed({**self.live, broker.id: broker})
            case ReplicasOffline(reports=reports):
                self._offline_reports = dict(reports)
                before = self.offline
                changed = self._refresh_offline()
                # Replicas back from a repair (a corrupt batch truncated away): their broker
                # is told their role again, and refills as a follower.
                back: dict[int, list[TP]] = {}
                for tp in changed:
                    for bid in before.get(tp, frozenset()) - self.offline.get(tp, frozenset()):
                        if bid in self.live and tp in self.states:
                            back.setdefault(bid, []).append(tp)
                for bid, tps in sorted(back.items()):
                    self._note(f"broker {bid} serves {len(tps)} repaired replicas again: {tps[:5]}")
                    self._send_leader_and_isr(bid, tps)
                if changed:
                    self._note("replicas offline after log dir failures: " + ", ".join(
                        f"{t}-{p} on {sorted(self.offline[(t, p)])}" for t, p in changed[:20] if (t, p) in self.offline)
                        + (f" and {len(changed) - 20} more" if len(changed) > 20 else ""), "warning")
                    yield from self._elect_offline(update_metadata=False)
                    self._send_update_metadata(sorted(self.live), tps=changed)
            case TopicsChanged():
                yield from self._on_topics_changed(event)
            case TopicsMarkedForDeletion(topics=topics):
                yield from self._on_topic_deletion(topics)
            case TopicConfigsChanged(configs=configs):
                yield from self._on_topic_configs_changed(configs)
            case PreferredElectionZnode(partitions=partitions):
                yield from self._preferred_elect(partitions)
                yield DeletePreferredElectionZnode()
            case PreferredElectionRequested(partitions=partitions, reply_to=reply_to):
                elected = yield from self._preferred_elect(partitions)
                self._answer(reply_to, PreferredElectionResponse(0, tuple(elected)))
            case AutoRebalanceDue(imbalance_pct_max=pct):
                todo = election.partitions_to_rebalance(self._replica_map(), self.states, self._eligible(), pct)
                if todo:
                    moved = yield from self._preferred_elect(todo)
                    self._note(f"auto leader rebalance moved {len(moved)} partitions")
            case AlterIsrRequested(request=request, reply_to=reply_to):
                yield from self._on_alter_isr(request, reply_to)
            case ControlledShutdownRequested(broker_id=bid, broker_epoch=epoch, reply_to=reply_to):
                yield from self._on_controlled_shutdown(bid, epoch, reply_to)
            case ReassignmentsChanged(wanted=wanted, throttle=throttle):
                yield from self._on_reassignments_changed(wanted, throttle)
            case PartitionsAddRequested(partitions=partitions):
                yield from self._on_partitions_add(partitions)
            case PartitionsRemoveRequested(partitions=partitions):
                yield from self._on_partitions_remove(partitions)
            case _:
                raise AssertionError(f"unhandled controller event {event!r}")

    # -------------------------------------------------------------- views

    def partitions_of(self, broker_id: int) -> list[TP]:
        return [(t, p) for t, topic in sorted(self.topics.items()) for p, replicas in sorted(topic.partitions.items())
                if broker_id in replicas]

    def registrations(self) -> dict[int, int]:
        """broker -> epoch of every registration the controller knows of, live or gone: what
        ZooKeeper lists while nothing changed there."""
        return {**{b: lb.epoch for b, lb in self.live.items()}, **self.gone}

    def topics_to_load(self, present: Iterable[str]) -> list[str]:
        return sorted(t for t in present if t not in self.topics)

    def describe(self) -> dict[str, Any]:
        return {
            "active": self.active, "epoch": self.epoch, "live_brokers": sorted(self.live),
            "gone_brokers": sorted(self.gone),
            "shutting_down": sorted(self.shutting_down), "partitions": len(self.states),
            "offline_partitions": sum(1 for st in self.states.values() if st.leader == NO_LEADER or st.leader not in self.live),
            "unclean_elections": self.unclean_elections,
            "reassigning": [f"{t}-{p}" for t, p in self.moving()],
        }

    def moving(self) -> list[TP]:
        """Partitions whose topic znode says replicas are being added or removed."""
        return [(t, p) for t, topic in sorted(self.topics.items()) for p in sorted(set(topic.adding) | set(topic.removing))]

    def _move_of(self, tp: TP) -> Move:
        topic = self.topics[tp[0]]
        return Move(tuple(topic.partitions[tp[1]]), tuple(topic.adding.get(tp[1], ())), tuple(topic.removing.get(tp[1], ())))

    def _replicas_of(self, tp: TP) -> tuple[int, ...]:
        """The assigned replicas of one partition (empty for an unknown one), without
        building the whole map (a LeaderAndIsr for 10,000 partitions asks for each)."""
        topic = self.topics.get(tp[0])
        return () if topic is None else tuple(topic.partitions.get(tp[1], ()))

    def _replica_map(self) -> dict[TP, tuple[int, ...]]:
        return {(t, p): r for t, topic in self.topics.items() for p, r in topic.partitions.items()}

    def _eligible(self) -> set[int]:
        return set(self.live) - self.shutting_down

    def _eligible_for(self, tp: TP) -> set[int]:
        """Who may lead `tp` when a move ends: not a replica whose log dir failed (as in
        `_elect_offline`). A move finished, or reverted, onto one made it leader of a log
        it cannot serve, and deleted the healthy copies being removed."""
        return self._eligible() - self.offline.get(tp, frozenset())

    def _refresh_offline(self) -> list[TP]:
        """`offline` from the reports of live registrations; the partitions whose offline
        replicas changed. A broker that restarted (a new registration) or died takes its
        report with it: its dirs are checked again when it starts."""
        new: dict[TP, set[int]] = {}
        for bid, (epoch, tps) in self._offline_reports.items():
            if bid in self.live and self.live[bid].epoch == epoch:
                for tp in tps:
                    if tp in self.states:
                        new.setdefault(tp, set()).add(bid)
        frozen = {tp: frozenset(b) for tp, b in new.items()}
        changed = sorted(tp for tp in set(frozen) | set(self.offline) if frozen.get(tp) != self.offline.get(tp))
        self.offline = frozen
        return changed

    def _unclean_by_topic(self) -> dict[str, bool]:
        out = {}
        for t, topic in self.topics.items():
            raw = topic.config.get("unclean.leader.election.enable")
            out[t] = self.unclean_default if raw is None else str(raw).lower() == "true"
        return out

    # -------------------------------------------------------------- failover (seed D)

    def _activate(self, ev: Activated) -> None:
        self.active = True
        self._owes_init = True
        self._told_full = {}
        self._uncreated = set()  # a take-over creates every missing state (_on_activated)
        self.epoch = ev.epoch
        self.gone = {b: e for b, e in ev.gone.items() if b in ev.brokers and ev.brokers[b].epoch == e}
        self.live = {b: lb for b, lb in ev.brokers.items() if self.gone.get(b) != lb.epoch}
        self.offline, self._offline_reports = {}, {}  # the shell reads /log_dir_failures next
        self.topics = dict(ev.topics)
        self.states = {tp: st for tp, st in ev.states.items() if tp[0] in self.topics}
        self.shutting_down = set()
        # The moves in progress keep their entries from the start, not only from the
        # take-over's last step (seed D 7): ZooKeeper may fail a write before it, the driver
        # aborts and the core stays active, and the next AlterIsr or broker change took every
        # move for cancelled (reverted, its new replicas deleted) while the admin znode still
        # asked for it. An entry with another target than its move is judged at that step.
        self.reassignments = {tp: tuple(target) for tp, target in sorted(ev.reassignments.items())
                              if tp[0] in self.topics and tp[1] in self.topics[tp[0]].partitions
                              and (move := self._move_of(tp)).moving and _same_replicas(target, move.target)}
        self._reassignments_read = False
        # Before `_tell_everyone`: its LeaderAndIsr carries the throttle of the moving
        # partitions, and a broker sets the rates a request with adding replicas carries.
        # Sent empty, every broker dropped the throttle for the rest of the moves.
        self.throttle = _throttle_rates(ev.throttle)

    def _on_activated(self, ev: Activated) -> Handler:
        for bid, epoch in sorted(self.gone.items()):
            self._note(f"broker {bid} (epoch {epoch}) was found gone before this failover: handled as failed from the start")
        replicas = self._replica_map()
        missing = [tp for tp in sorted(replicas) if tp not in self.states]
        if missing:  # the previous controller died while creating these topics
            yield from self._init_leaders(missing)
        # Fence brokers that restarted unseen before anyone is told anything: the states
        # read back may name one as leader of an epoch whose data it lost (seed 1317).
        yield from self._fence_bounced(ev.written_zxid)
        # Partitions whose leader is gone are elected before anyone is told anything, so
        # that the `init` requests below carry their outcome. Told first (as Kafka does),
        # every broker decoded and applied a full UpdateMetadata and a LeaderAndIsr of all
        # its partitions while this controller wrote the new states, and then a second
        # round for what changed: with 100,000 partitions that made the writes 2-3 times
        # slower on two shared cores (issue 13).
        yield from self._elect_offline(propagate=False)
        self._tell_everyone()
        if ev.pending_deletions:
            yield from self._on_topic_deletion(ev.pending_deletions)
        if ev.preferred_election is not None:
            yield from self._preferred_elect(ev.preferred_election)
            yield DeletePreferredElectionZnode()
        # Seed D 7-9: moves resume (or revert, if cancelled meanwhile), additions and removals.
        yield from self._on_reassignments_changed(ev.reassignments, ev.throttle)
        if ev.partitions_add:
            yield from self._on_partitions_add(ev.partitions_add)
        if ev.partitions_remove:
            yield from self._on_partitions_remove(ev.partitions_remove)
        self._note(f"controller {self.broker_id} active at epoch {self.epoch}: {len(self.live)} brokers, {len(self.states)} partitions")

    def _tell_everyone(self) -> None:
        """A new controller's first word to every live broker: the truth, with `init`. One
        full UpdateMetadata for all (its partition list is built, and encoded, once)."""
        self._owes_init = False
        self._send_update_metadata(sorted(self.live), full=True)
        for bid in sorted(self.live):
            self._send_leader_and_isr(bid, self.partitions_of(bid), init=True)

    def _fence_bounced(self, written_zxid: Mapping[TP, int]) -> Handler:
        """An ISR member whose registration (epoch = czxid) is newer than the state znode's
        last write restarted after the last decision about it, unseen by any controller
        (it may have been the controller). Handle it as failed for that partition: re-elect
        if it leads, drop it from the ISR; it rejoins through AlterIsr once caught up.
        Without this a restarted leader keeps leading at the old epoch with whatever its
        disk kept (found by the simulator, flush_mode="random", seed 55). Kafka's ZooKeeper
        controller has the same gap; KIP-966 closes it in KRaft.
        A replica outside the ISR that restarted unseen gets its leader a new epoch, as in
        `_on_brokers_changed` (the leader's progress of it is its previous incarnation's:
        issue 9, sweep seed 5383)."""
        # Only a state written before the newest live registration can name a replica that
        # registered after it: the rest of 100,000 cost one comparison each.
        newest = max((lb.epoch for lb in self.live.values()), default=-1)
        restarted = {tp: {b for b in self._replicas_of(tp) if b in self.live and self.live[b].epoch > zxid}
                     for tp in self.states if (zxid := written_zxid.get(tp)) is not None and zxid < newest}
        outside = [tp for tp in sorted(restarted)
                   if (st := self.states[tp]).leader != NO_LEADER and restarted[tp] - set(st.isr) - {st.leader}]
        # Of the ISR members that registered again, only those whose process came back from a
        # crash may lack records they had acknowledged; one whose session expired (the same
        # process) or that shut down cleanly holds all it had, and may lead. Counting those
        # too left a partition whose every member had registered again without a leader,
        # and the offline election then took the first live member, the crashed one
        # included: acknowledged records lost (simulator, seed 684585).
        bounced = {tp: {b for b in members & set(self.states[tp].isr) if self.live[b].unclean_start}
                   for tp, members in restarted.items()}
        bounced = {tp: members for tp, members in bounced.items() if members}
        if outside:
            yield from self._bump_leader_epochs([tp for tp in outside if tp not in bounced])
        if not bounced:
            return
        self._note(f"controller failover: {len(bounced)} partitions have ISR members that restarted unseen; re-deciding them")
        replicas = self._replica_map()
        unclean = self._unclean_by_topic()

        def decide(tps: Sequence[TP]) -> list[PartitionChange]:
            return [ch for tp in tps
                    for ch in election.on_brokers_failed({tp: self.states[tp]}, {tp: replicas[tp]}, self._eligible() - bounced[tp], unclean)]

        yield from self._decide_write_propagate(decide, sorted(bounced))
        # ...then as started: the caller elects for partitions left without a leader.

    # -------------------------------------------------------------- broker changes (seed A)

    def _on_brokers_changed(self, brokers: Mapping[int, LiveBroker]) -> Handler:
        old = self.live
        # A broker registered again with a new epoch restarted in between (Kafka's bounced
        # brokers): handled as failed first, so it loses its leaderships (epoch + 1)
        # instead of keeping them with a fresh replica state, then as started.
        bounced = {b for b in brokers if b in old and brokers[b].epoch != old[b].epoch}
        dead = {b for b in old if b not in brokers} | bounced
        new = {b for b in brokers if b not in old} | bounced
        if not dead and not new:
            self.live = dict(brokers)  # registration details may have changed
            # Nothing new, yet an earlier change may have been left half done: the live set
            # is recorded before its elections are written, so when ZooKeeper failed those
            # writes, the shell's re-check (this event again) finds no difference and must
            # still elect for partitions led by a broker that is gone, and finish moves.
            live = set(self.live)
            if any(st.leader not in live or not live.issuperset(st.isr) for st in self.states.values()):
                yield from self._elect_offline()
            yield from self._advance_moves(self.moving())
            return
        self.shutting_down -= dead
        for b in dead | new:  # a registration back from `gone` missed updates meanwhile: it is told anew
            self._told_full.pop(b, None)
        self._note(f"brokers failed {sorted(dead)}, started {sorted(new)} (bounced {sorted(bounced)}); live {sorted(brokers)}")
        # Partitions a bounced broker replicates outside their ISR: their leaders still hold
        # what its previous incarnation fetched and may propose it for the ISR from that
        # (a proposal handled after this event would add a broker that restarted with less
        # data: KIP-903's case, found by the simulator, issue 9, sweep seed 4655). A new
        # leader epoch makes the leader forget it and refuses proposals built before it.
        outside = [tp for tp, st in sorted(self.states.items())
                   if st.leader not in (NO_LEADER, *bounced) and any(b in self._replicas_of(tp) and b not in st.isr for b in bounced)
                   ] if bounced else []
        if dead:
            self.live = {b: v for b, v in brokers.items() if b not in bounced}
            yield from self._elect_offline(update_metadata=False)  # the live set changed: all partitions follow
        if outside:
            yield from self._bump_leader_epochs(outside)
        self.live = dict(brokers)
        self._refresh_offline()  # a broker that restarted or died takes its log dir report with it
        self._send_update_metadata(sorted(self.live), brokers_changed=True)  # the new ones: a full update
        if crashed := {b for b in new if brokers[b].unclean_start}:
            # A member that came back from a crash is still in the ISRs that every member
            # left at once (kept whole), or that lost it before this controller heard. Its
            # unflushed records may be gone, acknowledged ones among them: a member that
            # kept its records (a session expiry, a clean restart) leads instead, and the
            # crashed one rejoins through AlterIsr once caught up. Taking the first live
            # member lost acknowledged records when all came back in one change.
            for tp, st in self.states.items():
                if not crashed.isdisjoint(st.isr):
                    self._stale_members[tp] = self._stale_members.get(tp, frozenset()) | (crashed & set(st.isr))
        if new:
            for bid in sorted(new):
                # With `init`: it drops replicas not listed. A broker that lost its session
                # without restarting (seed E's start-up check does not run) was not sent the
                # StopReplica(delete) of partitions removed or moved away meanwhile (found
                # by the simulator, issue 9).
                self._send_leader_and_isr(bid, self.partitions_of(bid), init=True)
            yield from self._elect_offline()
        yield from self._advance_moves(self.moving())

    def _bump_leader_epochs(self, tps: Sequence[TP]) -> Handler:
        """Same leader and ISR at leader epoch + 1 (partitions that still have a leader)."""
        def bump(todo: Sequence[TP]) -> list[PartitionChange]:
            return [PartitionChange(tp, st.leader, st.leader_epoch + 1, tuple(st.isr), st.version)
                    for tp in todo if (st := self.states.get(tp)) is not None and st.leader != NO_LEADER]

        yield from self._decide_write_propagate(bump, tps, update_metadata=False)

    def _elect_offline(self, *, update_metadata: bool = True, propagate: bool = True) -> Handler:
        """New leaders from the live ISR for partitions whose leader is gone; ISRs shrunk
        behind live leaders (election.on_brokers_failed). A replica whose log dir failed
        (`offline`) counts as gone for its partition only."""
        # A broker in controlled shutdown is alive: the partitions it leads are moved by its
        # ControlledShutdown (those that cannot move stay with it, as in Kafka), not elected
        # away here, where one without another ISR member could get an unclean leader while
        # it still holds acknowledged records. It leads on; new leaders are never chosen
        # among such brokers.
        live = set(self.live)
        offline = self.offline
        # Only partitions on_brokers_failed could change: a leader that is not live (or
        # none), or an ISR member that is not. The rest of 100,000 cost a set test each.
        candidates = sorted(tp for tp, st in self.states.items()
                            if st.leader not in live or not live.issuperset(st.isr)
                            or (tp in offline and (st.leader in offline[tp] or not offline[tp].isdisjoint(st.isr))))
        if not candidates:
            return
        replicas = {tp: self._replicas_of(tp) for tp in candidates}
        unclean = self._unclean_by_topic()

        def decide(tps: Sequence[TP]) -> list[PartitionChange]:
            now_eligible = self._eligible()
            stays = self.shutting_down & set(self.live)
            changes: list[PartitionChange] = []
            for tp in tps:
                st = self.states[tp]
                eligible = now_eligible | ({st.leader} & stays)
                if tp in self.offline:
                    eligible -= self.offline[tp]
                if (stale := self._stale_members.get(tp, frozenset()) & eligible):
                    # A clean leader among the other members, the stale ones left out of
                    # the ISR; failing that, as if they were not stale (nothing better is
                    # known: Kafka's ZooKeeper controller takes them too, KIP-966).
                    first = election.on_brokers_failed({tp: st}, replicas, eligible - stale)
                    if first and first[0].leader != NO_LEADER:
                        changes += first
                        continue
                changes += election.on_brokers_failed({tp: st}, replicas, eligible, unclean)
            return sorted(changes, key=lambda ch: ch.topic_partition)

        yield from self._decide_write_propagate(decide, candidates, update_metadata=update_metadata, propagate=propagate)

    # -------------------------------------------------------------- writes

    def _decide_write_propagate(self, decide: Callable[[Sequence[TP]], list[PartitionChange]], tps: Sequence[TP],
                                *, update_metadata: bool = True, propagate: bool = True) -> Generator[ZkOperation, Any, list[TP]]:
        """Decide, write conditionally, apply what was written, send LeaderAndIsr (and
        UpdateMetadata) for it. Partitions whose znode moved under us are decided again
        from the state found there."""
        written: list[TP] = []
        offline: list[TP] = []
        todo = list(tps)
        for _ in range(WRITE_ATTEMPTS_MAX):
            changes = {ch.topic_partition: ch for ch in decide(todo)}
            if not changes:
                break
            outcomes = yield WriteStates({tp: (self._state_of(ch), ch.expected_version) for tp, ch in changes.items()})
            todo = []
            for tp, ch in changes.items():
                if self._apply(tp, outcomes[tp], self._state_of(ch)):
                    written.append(tp)
                    if ch.leader == NO_LEADER and not ch.unclean:
                        offline.append(tp)  # one note for all: a broker may take 30,000 offline
                    else:
                        self._note_change(ch)
                elif isinstance(outcomes[tp], Stale) and tp in self.states:
                    todo.append(tp)
            if not todo:
                break
        if offline:
            self._note(f"{len(offline)} partitions are offline, no live replica in their ISR: {_named(offline)}", "warning")
        if propagate:
            self._propagate(written, update_metadata=update_metadata)
        return written

    def _state_of(self, ch: PartitionChange) -> PartitionState:
        return PartitionState(ch.leader, ch.leader_epoch, tuple(ch.isr), ch.expected_version + 1, self.epoch)

    def _apply(self, tp: TP, outcome: WriteOutcome, wanted: PartitionState) -> bool:
        match outcome:
            case Written(version=version):
                self.states[tp] = PartitionState(wanted.leader, wanted.leader_epoch, wanted.isr, version, self.epoch)
                if (stale := self._stale_members.get(tp)) is not None:
                    if left := (stale - {wanted.leader}) & set(wanted.isr):
                        self._stale_members[tp] = left
                    else:
                        del self._stale_members[tp]
                return True
            case Stale(current=current):
                if current is None:
                    self.states.pop(tp, None)
                else:
                    self.states[tp] = current
            case Failed(reason=reason):
                self._note(f"state write for {tp[0]}-{tp[1]} failed: {reason}", "warning")
        return False

    def _note_change(self, ch: PartitionChange) -> None:
        t, p = ch.topic_partition
        if ch.unclean:
            self.unclean_elections += 1
            self._note(f"UNCLEAN leader election for {t}-{p}: broker {ch.leader} was not in the ISR; acknowledged data may be lost", "warning")
        elif ch.leader == NO_LEADER:
            self._note(f"{t}-{p} is offline: no live replica in its ISR", "warning")

    def _init_leaders(self, tps: list[TP]) -> Handler:
        """New partitions: leader = first live assigned replica, ISR = the live replicas."""
        replicas = self._replica_map()
        decided = election.init_leaders({tp: replicas[tp] for tp in tps}, self.live)
        states = {tp: PartitionState(st.leader, st.leader_epoch, st.isr, 0, self.epoch) for tp, st in decided.items()}
        if not states:
            return
        self._uncreated.update(states)
        outcomes = yield CreateStates(states)
        for tp, st in states.items():
            self._apply(tp, outcomes[tp], st)
            if not isinstance(outcomes[tp], Failed):
                self._uncreated.discard(tp)

    def _create_uncreated(self) -> Handler:
        """Partitions of live topics whose state creation had no outcome (`_uncreated`):
        created now (one that ZooKeeper did create is read back as Stale and taken as it
        is). Without this a topic created while ZooKeeper failed the controller's writes
        part-way listed only the partitions that got a state, until a failover."""
        topics = self.topics
        retry = sorted(tp for tp in self._uncreated
                       if tp not in self.states and tp[0] in topics and tp[1] in topics[tp[0]].partitions)
        self._uncreated.clear()
        if not retry:
            return
        self._note(f"creating again the states of {len(retry)} partitions whose creation failed: {_named(retry)}")
        yield from self._init_leaders(retry)
        self._propagate([tp for tp in retry if tp in self.states])

    # -------------------------------------------------------------- requests to brokers

    def _propagate(self, tps: list[TP], *, update_metadata: bool = True) -> None:
        if not tps or self._owes_init:  # a take-over tells everyone everything next (_tell_everyone)
            return
        per_broker: dict[int, list[TP]] = {}
        for tp in tps:
            for b in self._replicas_of(tp):
                if b in self.live:
                    per_broker.setdefault(b, []).append(tp)
        for b, its in sorted(per_broker.items()):
            self._send_leader_and_isr(b, its)
        if update_metadata:
            self._send_update_metadata(sorted(self.live), tps=tps)

    def _send_leader_and_isr(self, broker_id: int, tps: list[TP], *, init: bool = False) -> None:
        tps = [tp for tp in tps if tp in self.states]
        if broker_id not in self.live or (not tps and not init):
            return
        # A plain loop: a new controller builds this for every partition of every broker.
        states, topics = self.states, self.topics
        partitions = []
        leaders = set()
        for t, p in tps:
            st = states[(t, p)]
            topic = topics[t]
            leaders.add(st.leader)
            partitions.append(PartitionLeadership(t, p, st.leader, st.leader_epoch, tuple(st.isr), st.version,
                                                  tuple(topic.partitions.get(p, ())), tuple(topic.adding.get(p, ())),
                                                  tuple(topic.removing.get(p, ()))))
        names = sorted({tp[0] for tp in tps})
        request = LeaderAndIsr(
            controller_id=self.broker_id, controller_epoch=self.epoch, broker_epoch=self.live[broker_id].epoch, init=init,
            live_leaders={b: (self.live[b].host, self.live[b].inter_broker_port) for b in sorted(leaders & set(self.live))},
            topic_configs={t: topics[t].config for t in names},
            partitions=tuple(partitions),
            throttle=dict(self.throttle) if any(topics[t].adding for t in names) else {},
            topic_ids={t: topic_id for t in names if (topic_id := topics[t].topic_id) is not None},
        )
        self._out.sends.append(Send(broker_id, request))

    def _send_update_metadata(self, brokers: list[int], *, full: bool = False, tps: Iterable[TP] = (),
                              brokers_changed: bool = False, deleted: Sequence[str] = (),
                              deleted_partitions: Sequence[TP] = ()) -> None:
        """A registration's first UpdateMetadata from this controller is a full one, whatever
        was asked. A delta to a broker whose cache holds nothing yet (just restarted) made it
        list a topic with only the partitions the delta named; librdkafka takes a partition
        missing from a listed topic for one that does not exist, and keeps that answer until
        its metadata.max.age.ms (15 minutes): get_watermark_offsets failed with "Unknown
        partition" for a minute after a ZooKeeper outage in CI, where a failover's fencing
        of bounced brokers sent deltas before the take-over's full update."""
        targets = [b for b in brokers if b in self.live]
        if not targets:
            return
        fresh = set(targets) if full else {b for b in targets if self._told_full.get(b) != self.live[b].epoch}
        endpoints = tuple(BrokerEndpoint(b.id, b.host, b.port, b.inter_broker_port, b.admin_port, b.rack, b.epoch, b.endpoints)
                          for _, b in sorted(self.live.items()))
        # Offline replica lists depend on the live set: a change of it resends every partition.
        everything = self._partition_metadata(list(self.states)) if fresh or brokers_changed else ()
        if brokers_changed:
            delta = everything
        elif len(fresh) < len(targets):
            delta = self._partition_metadata(list(tps))
        else:
            delta = ()

        def configs_of(parts: tuple[PartitionMetadata, ...]) -> dict[str, Mapping[str, str]]:
            return {t: self.topics[t].config for t in sorted({m.topic for m in parts})}

        full_configs = configs_of(everything)
        delta_configs = full_configs if delta is everything else configs_of(delta)
        for bid in targets:
            epoch = self.live[bid].epoch
            parts, configs = (everything, full_configs) if bid in fresh else (delta, delta_configs)
            self._out.sends.append(Send(bid, UpdateMetadata(
                self.broker_id, self.epoch, epoch, endpoints, parts, bid in fresh, tuple(deleted), configs, tuple(deleted_partitions))))
            if bid in fresh:
                self._told_full[bid] = epoch
        assert all(self._told_full.get(b) == self.live[b].epoch for b in targets), "a registration got a delta before a full update"

    def _partition_metadata(self, tps: Iterable[TP]) -> tuple[PartitionMetadata, ...]:
        """What UpdateMetadata says of each partition; a plain loop, since a new controller
        builds it for every partition (100,000) at once."""
        live, states, topics = self.live, self.states, self.topics
        # Brokers named by some assignment but not live: most partitions name none of them,
        # so their offline list is () after one set test.
        dead = {b for topic in topics.values() for replicas in topic.partitions.values() for b in replicas} - live.keys() \
            if len(tps) > 1000 else None
        parts = []
        for tp in tps:
            st = states.get(tp)
            topic = topics.get(tp[0])
            if st is None or topic is None:
                continue
            replicas = topic.partitions.get(tp[1])
            if not replicas:
                continue
            replicas = tuple(replicas)
            failed = self.offline.get(tp)
            if failed:  # replicas whose log dir failed (ReplicasOffline)
                offline: tuple[int, ...] = tuple(b for b in replicas if b not in live or b in failed)
            elif dead is not None and dead.isdisjoint(replicas):
                offline = ()
            else:
                offline = tuple(b for b in replicas if b not in live)
            parts.append(PartitionMetadata(tp[0], tp[1], st.leader, st.leader_epoch, tuple(st.isr), replicas, offline))
        return tuple(parts)

    # -------------------------------------------------------------- topics (seed B)

    def _on_topics_changed(self, ev: TopicsChanged) -> Handler:
        removed = sorted(t for t in self.topics if t not in ev.present)
        for t in removed:
            self._forget_topic(t)
        if removed:
            self._send_update_metadata(sorted(self.live), deleted=removed)
        yield from self._create_uncreated()
        new_tps = []
        for t, topic in sorted(ev.loaded.items()):
            if t in ev.present and t not in self.topics:
                self.topics[t] = topic
                new_tps.extend((t, p) for p in sorted(topic.partitions))
        if not new_tps:
            return
        self.states.update({tp: st for tp, st in ev.states.items() if tp in new_tps})
        yield from self._init_leaders([tp for tp in new_tps if tp not in self.states])
        self._propagate([tp for tp in new_tps if tp in self.states])

    def _on_topic_configs_changed(self, configs: Mapping[str, Mapping[str, str]]) -> Handler:
        changed = []
        for t, cfg in sorted(configs.items()):
            topic = self.topics.get(t)
            if topic is not None and dict(topic.config) != dict(cfg):
                self.topics[t] = Topic(topic.partitions, dict(cfg), topic.adding, topic.removing, topic.topic_id)
                changed.extend((t, p) for p in sorted(topic.partitions))
        if not changed:
            return
        self._note(f"configs changed: {', '.join(sorted({t for t, _ in changed}))}")
        self._send_update_metadata(sorted(self.live), tps=changed)
        # As Kafka's TopicUncleanLeaderElectionEnable: a topic that now allows unclean
        # elections gets a leader for its offline partitions at once.
        if any(self._unclean_by_topic().get(t) for t, _ in changed):
            yield from self._elect_offline()

    def _forget_topic(self, topic: str) -> None:
        gone = self.topics.pop(topic, None)
        for p in (gone.partitions if gone is not None else {}):
            self.states.pop((topic, p), None)
            self._stale_members.pop((topic, p), None)

    def _on_topic_deletion(self, topics: Sequence[str]) -> Handler:
        # Every topic's StopReplica(delete) first, then one wait for their holders: a holder
        # that does not answer (hung, or cut off with its session kept) holds this event,
        # and every event queued behind it, for one TOPIC_DELETION_WAIT_MS, not one per topic.
        self._answered = set()
        waiting: set[int] = set()
        for topic in topics:
            gone = self.topics.get(topic)
            if gone is None:
                continue
            holders = sorted({b for r in gone.partitions.values() for b in r} & set(self.live))
            for b in holders:
                self._out.sends.append(Send(b, StopReplica(
                    self.broker_id, self.epoch, self.live[b].epoch,
                    tuple((topic, p) for p, r in sorted(gone.partitions.items()) if b in r), delete=True)))
            waiting.update(holders)
        if waiting:
            yield WaitForAnswers(frozenset(waiting), self._now + TOPIC_DELETION_WAIT_MS)
        for topic in topics:
            yield DeleteTopic(topic)
            self._forget_topic(topic)
            self._note(f"topic {topic} deleted")
            # Told at once, each: if ZooKeeper fails the next topic's deletion, this one is
            # forgotten here already and no later event would tell the brokers.
            self._send_update_metadata(sorted(self.live), deleted=[topic])

    def answered(self, brokers: Iterable[int]) -> bool:
        """WaitForAnswers: have these brokers all answered?"""
        return set(brokers) <= self._answered

    # -------------------------------------------------------------- AlterIsr (KIP-497)

    def _on_alter_isr(self, request: AlterIsrRequest, reply_to: Any) -> Handler:
        live_epochs = {b: lb.epoch for b, lb in self.live.items()}
        code = election.validate_alter_isr_request(request.broker_id, request.broker_epoch, live_epochs, self.active)
        if code != ErrorCode.NONE:
            self._answer(reply_to, AlterIsrResponse(int(code)))
            return
        replicas = self._replica_map()
        codes: dict[TP, int] = {}
        wanted: dict[TP, PartitionState] = {}
        expected: dict[TP, int] = {}
        ineligible: list[TP] = []  # refused for adding a broker that cannot join now (or not this incarnation of it)
        for a in request.partitions:
            tp = (a.topic, a.partition)
            item = AlterIsrItem(a.topic, a.partition, a.leader, a.leader_epoch, tuple(a.new_isr), a.partition_epoch, a.new_isr_epochs)
            current = self.states.get(tp) if tp in replicas else None
            d = election.validate_alter_isr(current, item, replicas.get(tp, ()), live_epochs, self.shutting_down)
            if d.ineligible:
                ineligible.append(tp)
            if d.error != ErrorCode.NONE or not d.write_needed:
                codes[tp] = int(d.error)
                continue
            assert d.new_state is not None
            wanted[tp] = PartitionState(d.new_state.leader, d.new_state.leader_epoch, d.new_state.isr, d.expected_version + 1, self.epoch)
            expected[tp] = d.expected_version
        written = []
        if wanted:
            outcomes = yield WriteStates({tp: (st, expected[tp]) for tp, st in wanted.items()})
            for tp, st in wanted.items():
                ok = self._apply(tp, outcomes[tp], st)
                codes[tp] = 0 if ok else int(ErrorCode.INVALID_UPDATE_VERSION)
                if ok:
                    written.append(tp)
        # The leader learns its new ISR from this answer; everyone else from UpdateMetadata.
        if written:
            self._send_update_metadata(sorted(self.live), tps=written)
        results = []
        for tp, c in codes.items():
            st = self.states.get(tp, PartitionState(NO_LEADER, -1, (), -1))
            results.append(AlterIsrPartitionResult(tp[0], tp[1], c, st.leader, st.leader_epoch, tuple(st.isr), st.version))
        self._answer(reply_to, AlterIsrResponse(0, tuple(results)))
        # The only refusal that depends on when it is decided (the same proposal is accepted
        # once the broker is live again) fences the proposal: the leader gets a new epoch,
        # so another copy of it (a retry after a timeout, a duplicate) cannot commit an ISR
        # the leader gave up on (simulator, issue 9, sweep seed 7804).
        if ineligible:
            yield from self._bump_leader_epochs(ineligible)
        # An ISR that grew may complete a move (seed F 3.2: RAR ⊆ ISR).
        moving = [tp for tp in written if tp[0] in self.topics and self._move_of(tp).moving]
        if moving:
            yield from self._advance_moves(moving)

    # -------------------------------------------------------------- controlled shutdown

    def _on_controlled_shutdown(self, bid: int, broker_epoch: int, reply_to: Any) -> Handler:
        if bid not in self.live or self.live[bid].epoch != broker_epoch:
            self._answer(reply_to, ControlledShutdownResponse(int(ErrorCode.STALE_BROKER_EPOCH)))
            return
        self.shutting_down.add(bid)
        replicas = self._replica_map()

        def decide(tps: Sequence[TP]) -> list[PartitionChange]:
            changes, _ = election.on_controlled_shutdown(bid, {tp: self.states[tp] for tp in tps}, replicas, self.live, self.shutting_down)
            return changes

        # Leaderships first (as Kafka's controlled shutdown): their writes, LeaderAndIsr and
        # UpdateMetadata go out before the ISR shrinks of the partitions it only follows,
        # so with 10,000 partitions the moved ones are writable elsewhere after a third of
        # the work. Then the shrinks (their leaders need the new ISR and partition epoch).
        led = [tp for tp, st in sorted(self.states.items()) if st.leader == bid]
        moved = yield from self._decide_write_propagate(decide, led)
        followed = [tp for tp, st in sorted(self.states.items()) if st.leader != bid and bid in st.isr]
        moved += yield from self._decide_write_propagate(decide, followed)
        # Answered from what was written: as Kafka, only partitions with another replica
        # can move; RF 1 ones stop with the broker.
        remaining = tuple(tp for tp, st in sorted(self.states.items()) if st.leader == bid and len(replicas.get(tp, ())) > 1)
        self._note(f"controlled shutdown of broker {bid}: moved {len(moved)} partitions, {len(remaining)} still led")
        self._answer(reply_to, ControlledShutdownResponse(0, remaining))

    # -------------------------------------------------------------- preferred leader election

    def _preferred_elect(self, tps: Iterable[TP] | None) -> Generator[ZkOperation, Any, list[TP]]:
        replicas = self._replica_map()
        candidates = [tp for tp in (sorted(self.states) if tps is None else tps) if tp in self.states and tp in replicas]

        def decide(todo: Sequence[TP]) -> list[PartitionChange]:
            # Not onto a replica whose log dir failed (as `_elect_offline`): it would lead a
            # log it cannot serve, until its report moved the partition away again.
            eligible, offline = self._eligible(), self.offline
            changes = election.preferred_leader_changes([tp for tp in todo if tp not in offline], self.states, replicas, eligible)
            for tp in todo:
                if tp in offline:
                    changes += election.preferred_leader_changes([tp], self.states, replicas, eligible - offline[tp])
            return sorted(changes, key=lambda ch: ch.topic_partition)

        return (yield from self._decide_write_propagate(decide, candidates))

    # -------------------------------------------------------------- reassignment (seed F)

    def _on_reassignments_changed(self, wanted: Mapping[TP, tuple[int, ...]], throttle: Mapping[str, int]) -> Handler:
        """/admin/reassign_partitions changed (or was read at failover): start what is new,
        finish what is no move (a reorder, or already there), refuse what cannot be done
        (another target for a partition still moving too), revert moves whose entry is gone
        (cancelled)."""
        self.throttle = _throttle_rates(throttle)
        accepted: dict[TP, tuple[int, ...]] = {}
        dropped: list[TP] = []  # entries to take out of the znode
        starts: dict[TP, tuple[int, ...]] = {}
        for tp, target in sorted(wanted.items()):
            target = tuple(target)
            if tp[0] not in self.topics or tp[1] not in self.topics[tp[0]].partitions:
                self._note(f"reassignment of {tp[0]}-{tp[1]} refused: no such partition", "warning")
                dropped.append(tp)
                continue
            move = self._move_of(tp)
            if move.moving:
                if not _same_replicas(target, move.target):
                    # Another target for a partition still moving: a cancelled move that
                    # cannot go back yet (no original replica can lead) planned anew, or an
                    # entry written over. Taken out, never adopted: adopting the move's own
                    # target resumed the cancelled move and it ended on the target the user
                    # cancelled. With no entry, the move in progress is a cancelled one.
                    self._note(f"reassignment of {tp[0]}-{tp[1]} to {list(target)} refused, its entry removed: it is still "
                               f"moving {list(move.original)} -> {list(move.target)}, a move now cancelled that goes back to "
                               f"{list(move.original)} first", "warning")
                    dropped.append(tp)
                    continue
                accepted[tp] = target
                continue
            reason = reassignment.invalid_target(target, self.live)
            if reason is not None:
                self._note(f"reassignment of {tp[0]}-{tp[1]} to {list(target)} refused: {reason}", "warning")
                dropped.append(tp)
                continue
            accepted[tp] = target
            starts[tp] = target
        # The refused entries leave the znode before any move is reverted for lack of one: if
        # ZooKeeper failed in between, the retried read would find a refused entry for a
        # partition no longer moving and start it.
        if dropped:
            yield RemoveReassignments(tuple(dropped))
        self.reassignments = accepted
        self._reassignments_read = True
        yield from self._start_moves(starts)
        yield from self._advance_moves(self.moving())

    def _start_moves(self, starts: Mapping[TP, tuple[int, ...]]) -> Handler:
        """Steps 1-2: AR+RAR into the topic znode, then the leader epoch bumped and
        LeaderAndIsr to every replica (the new ones start fetching, the leader tracks them).
        A target equal to the current replicas up to order is written and done at once."""
        if not starts:
            return
        moves = {tp: reassignment.start(self._replicas_of(tp), target) for tp, target in starts.items()}
        for t in sorted({tp[0] for tp in moves}):
            written = yield from self._write_topic(t, self.topics[t].with_partitions(
                moves={p: m for (tt, p), m in moves.items() if tt == t}))
            if not written:
                return
        started = sorted(tp for tp, m in moves.items() if m.moving)
        reordered = sorted(tp for tp, m in moves.items() if not m.moving)
        for tp in started:
            m = moves[tp]
            self._note(f"reassignment of {tp[0]}-{tp[1]} started: {list(m.original)} -> {list(starts[tp])}")
        if reordered:
            self._propagate(reordered)
            yield RemoveReassignments(tuple(reordered))
            for tp in reordered:
                self.reassignments.pop(tp, None)

        self._unannounced_moves.update(started)
        yield from self._announce_moves(started)

    def _announce_moves(self, tps: Sequence[TP]) -> Handler:
        """Step 2: the leader epoch bumped and LeaderAndIsr to every replica of each moving
        partition. One whose bump ZooKeeper failed stays in `_unannounced_moves` and is
        announced by the next event that advances moves: else its new replicas, never told,
        never fetched, and the move waited for a broker change or a failover."""
        def bump(todo: Sequence[TP]) -> list[PartitionChange]:
            return [PartitionChange(tp, st.leader, st.leader_epoch + 1, tuple(st.isr), st.version)
                    for tp in todo if (st := self.states.get(tp)) is not None]

        written = yield from self._decide_write_propagate(bump, tps)
        self._unannounced_moves.difference_update(written)

    def _advance_moves(self, tps: Iterable[TP]) -> Handler:
        """Moves that can finish (RAR ⊆ ISR), and cancelled ones that can go back."""
        if self._unannounced_moves:
            self._unannounced_moves &= set(self.moving())
            yield from self._announce_moves(sorted(self._unannounced_moves))
        finishing, reverting = [], []
        for tp in sorted(set(tps)):
            if tp[0] not in self.topics or tp not in self.states:
                continue
            move = self._move_of(tp)
            if not move.moving:
                continue
            if tp not in self.reassignments:
                if self._reassignments_read:  # else its entry, if any, is not judged yet
                    reverting.append(tp)
            elif reassignment.completion(self.states[tp], move, self._eligible_for(tp), self._target(tp)) is not None:
                finishing.append(tp)
        if finishing:
            yield from self._end_moves(
                finishing, lambda tp, st, m, e: reassignment.completion(st, m, e, self._target(tp)), "finished", self._target)
        if reverting:
            yield from self._end_moves(
                reverting, lambda tp, st, m, e: reassignment.reversion(st, m, e), "cancelled", lambda tp: self._move_of(tp).original)

    def _target(self, tp: TP) -> tuple[int, ...]:
        """RAR in the admin entry's order (the topic znode keeps AR's order), the same set
        as the move's target (a different target is refused while one is moving)."""
        return self.reassignments[tp]

    def _end_moves(self, tps: list[TP], decide_state: Callable[[TP, PartitionState, Move, set[int]], PartitionState | None],
                   how: str, keep_of: Callable[[TP], tuple[int, ...]]) -> Handler:
        """Steps 3-7 (or a cancel): the new state (leader from the kept replicas, ISR shrunk
        to them, epoch + 1), the topic znode with only the kept replicas, LeaderAndIsr and
        UpdateMetadata, StopReplica(delete) to the dropped replicas, the admin entries out."""
        moves = {tp: self._move_of(tp) for tp in tps}
        keep = {tp: keep_of(tp) for tp in tps}

        def decide(todo: Sequence[TP]) -> list[PartitionChange]:
            out = []
            for tp in todo:
                st = self.states.get(tp)
                new = None if st is None else decide_state(tp, st, moves[tp], self._eligible_for(tp))
                if new is not None:
                    out.append(PartitionChange(tp, new.leader, new.leader_epoch, new.isr, st.version))
            return out

        ended = yield from self._decide_write_propagate(decide, tps, propagate=False)
        for tp in sorted(set(tps) - set(ended)):
            self._note(f"reassignment of {tp[0]}-{tp[1]} {how}, but it cannot end yet: no kept replica can lead", "warning")
        if not ended:
            return
        for t in sorted({tp[0] for tp in ended}):
            written = yield from self._write_topic(t, self.topics[t].with_partitions(
                replicas={p: keep[(tt, p)] for tt, p in ended if tt == t}))
            if not written:
                return
        self._propagate(ended)
        dropped: dict[int, list[TP]] = {}
        for tp in ended:
            for b in set(moves[tp].replicas) - set(keep[tp]):
                dropped.setdefault(b, []).append(tp)
        for b, its in sorted(dropped.items()):
            if b in self.live:
                self._out.sends.append(Send(b, StopReplica(self.broker_id, self.epoch, self.live[b].epoch, tuple(sorted(its)), delete=True)))
        for tp in ended:
            self._note(f"reassignment of {tp[0]}-{tp[1]} {how}: replicas {list(keep[tp])}, "
                       f"leader {self.states[tp].leader}, epoch {self.states[tp].leader_epoch}")
        if how == "finished":
            yield RemoveReassignments(tuple(ended))
        for tp in ended:
            self.reassignments.pop(tp, None)

    def _write_topic(self, topic: str, assignment: Topic) -> Generator[ZkOperation, Any, bool]:
        outcome = yield WriteTopic(topic, assignment)
        if isinstance(outcome, Written):
            self.topics[topic] = assignment
            return True
        self._note(f"topic znode write for {topic} failed: {outcome}", "warning")
        return False

    # -------------------------------------------------------------- partition add / remove (seed 000)

    def _on_partitions_add(self, adds: Mapping[TP, tuple[int, ...]]) -> Handler:
        """Seed on_partitions_add: the topic znode first (a failover after it initialises
        the new partitions as missing states), then init_leaders, then the admin znodes go.
        New partitions must continue the numbering; anything else is refused."""
        yield from self._create_uncreated()  # this event tried again after a ZooKeeper failure
        handled: list[TP] = []
        for t in sorted({tp[0] for tp in adds}):
            mine = {p: tuple(r) for (tt, p), r in adds.items() if tt == t}
            handled.extend((t, p) for p in mine)
            topic = self.topics.get(t)
            if topic is None:
                self._note(f"partitions {sorted(mine)} of {t} not added: no such topic", "warning")
                continue
            new = {p: r for p, r in mine.items() if p not in topic.partitions}
            if not new:
                continue  # added before a failover
            n = len(topic.partitions)
            bad = next((f"replicas {list(r)}" for r in new.values() if not r or len(set(r)) != len(r)), None)
            if sorted(new) != list(range(n, n + len(new))):
                bad = f"partitions {sorted(new)} do not continue 0..{n - 1}"
            if bad is not None:
                self._note(f"partitions of {t} not added: {bad}", "warning")
                continue
            if not (yield from self._write_topic(t, topic.with_partitions(replicas=new))):
                return
            tps = [(t, p) for p in sorted(new)]
            yield from self._init_leaders(tps)
            self._propagate([tp for tp in tps if tp in self.states])
            self._note(f"topic {t}: partitions {sorted(new)} added")
        if handled:
            yield DeletePartitionAdminZnodes("add", tuple(sorted(handled)))

    def _on_partitions_remove(self, tps: Sequence[TP]) -> Handler:
        """Seed on_partitions_remove: only a topic's highest-numbered partitions, never all
        of them, never one being moved. The topic znode first (clients stop being offered
        the partitions once UpdateMetadata goes out), then StopReplica(delete) to every
        replica, the state znodes, metadata, and the admin znodes. A broker down meanwhile
        deletes its copy when it starts (seed E), a failover re-runs the rest."""
        handled: list[TP] = []
        for t in sorted({tp[0] for tp in tps}):
            asked = sorted({p for tt, p in tps if tt == t})
            handled.extend((t, p) for p in asked)
            topic = self.topics.get(t)
            if topic is None:
                self._note(f"partitions {asked} of {t} not removed: no such topic", "warning")
                continue
            gone = [p for p in asked if p in topic.partitions]
            n = len(topic.partitions)
            bad = None
            if gone and gone != list(range(n - len(gone), n)):
                bad = f"only the highest-numbered partitions can go; {t} has 0..{n - 1}"
            elif gone and len(gone) == n:
                bad = "a topic keeps at least one partition"
            elif moving := [p for p in gone if p in topic.adding or p in topic.removing]:
                bad = f"partitions {moving} are being reassigned"
            if bad is not None:
                self._note(f"partitions {asked} of {t} not removed: {bad}", "warning")
                continue
            holders: dict[int, list[TP]] = {}
            for p in gone:
                for b in topic.partitions[p]:
                    holders.setdefault(b, []).append((t, p))
            if gone and not (yield from self._write_topic(t, topic.with_partitions(dropped=gone))):
                return
            removed = [(t, p) for p in asked]  # those already out of the topic znode too (a failover)
            for tp in removed:
                self.states.pop(tp, None)
            live_holders = sorted(b for b in holders if b in self.live)
            self._answered = set()
            for b in live_holders:
                self._out.sends.append(Send(b, StopReplica(self.broker_id, self.epoch, self.live[b].epoch,
                                                           tuple(sorted(holders[b])), delete=True)))
            self._send_update_metadata(sorted(self.live), deleted_partitions=removed)
            if live_holders:
                yield WaitForAnswers(frozenset(live_holders), self._now + TOPIC_DELETION_WAIT_MS)
            yield DeletePartitions(tuple(removed))
            self._note(f"topic {t}: partitions {asked} removed")
        if handled:
            yield DeletePartitionAdminZnodes("remove", tuple(sorted(handled)))


def _throttle_rates(throttle: Mapping[str, int]) -> dict[str, int]:
    """The replication rates of the admin znode's throttle (bytes/s), nothing else."""
    return {k: int(v) for k, v in throttle.items() if k in (LEADER_RATE, FOLLOWER_RATE)}


def _same_replicas(target: Sequence[int], replicas: Sequence[int]) -> bool:
    """The same brokers, maybe reordered (`replicas` has no duplicates)."""
    return len(target) == len(replicas) and set(target) == set(replicas)


def _named(tps: Sequence[TP]) -> str:
    """The first PARTITIONS_NOTED_MAX partitions as "t-0, t-1", and how many more (a broker
    may take 30,000 offline: a note names a few and counts the rest)."""
    shown = ", ".join(f"{t}-{p}" for t, p in tps[:PARTITIONS_NOTED_MAX])
    return shown + (f" and {len(tps) - PARTITIONS_NOTED_MAX} more" if len(tps) > PARTITIONS_NOTED_MAX else "")


def _caller_of(event: ControllerEvent) -> tuple[Any, type[ControllerResponse]] | None:
    """Who waits for this event, and the shape of their answer."""
    match event:
        case AlterIsrRequested(reply_to=r):
            return r, AlterIsrResponse
        case ControlledShutdownRequested(reply_to=r):
            return r, ControlledShutdownResponse
        case PreferredElectionRequested(reply_to=r):
            return r, PreferredElectionResponse
    return None
