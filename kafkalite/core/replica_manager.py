"""The broker side of replication as one synchronous object (DESIGN.md sections 5 and 10;
seed 000 sections C and G; KIP-101, KIP-320, KIP-497).

`ReplicaManager` owns every partition replica on one broker (`Replica`: the core's
PartitionReplicaState over the local log), the controller and broker epochs it has seen,
and which leader each followed partition fetches from. It decides:
- LeaderAndIsr and StopReplica: fencing, become leader / follower, which fetches start or
  stop (`RoleChanges`, executed by the driver's fetchers), which replicas go;
- the leader's side of a follower fetch (KIP-320 epoch fencing, DIVERGING_EPOCH, the
  follower's LEO for ISR and HW) and of OffsetsForLeaderEpoch (a follower's, or a
  consumer's, KIP-320); where a consumer's fetch is served and how far it reads (KIP-392,
  kafkalite.core.consumer_fetch); whether a produce may append;
- the follower's side of a fetch: where to truncate (KIP-101) and what to do after an error;
- AlterIsr (KIP-497): the proposals to send, one in flight per partition, and the answers.

The log of a replica is a port (`ReplicaLog`): synchronous local calls that the broker
implements with kafkalite.log and the simulator with its model disk. Network I/O is the
drivers': `kafkalite.broker` (asyncio) and `kafkalite.testing.sim`. Time is passed in.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kafkalite.core.codes import (
    FENCING_ERRORS,
    CoreError,
    ErrorCode,
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
)
from kafkalite.core.consumer_fetch import ClusterView, ConsumerFetch, ConsumerRead, decide_consumer_read
from kafkalite.core.delete_records import decide_log_start
from kafkalite.core.messages import (
    AlterIsrPartitionResult,
    AlterIsrProposal,
    AlterIsrRequest,
    AlterIsrResponse,
    LeaderAndIsr,
    StopReplica,
)
from kafkalite.core.quota import ReplicationQuotas
from kafkalite.core.replica_selector import LeaderSelector, ReplicaSelector
from kafkalite.core.replica_state import (
    UNKNOWN_OFFSET,
    AlterIsrItem,
    FollowerFetchResult,
    LeaderAndIsrState,
    PartitionReplicaState,
)
from kafkalite.core.truncation import (
    EpochEndOffset,
    diverging_epoch_check,
    end_offset_for_epoch,
    follower_truncation_state,
)

TP = tuple[str, int]


class StaleControllerEpochError(CoreError):
    code = ErrorCode.STALE_CONTROLLER_EPOCH


class StaleBrokerEpochError(CoreError):
    code = ErrorCode.STALE_BROKER_EPOCH


class NotEnoughReplicasError(CoreError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class UnknownTopicOrPartitionError(CoreError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class KafkaStorageError(CoreError):
    """The replica's log dir failed (KIP-112): offline here until the broker restarts."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class ReplicaLog(Protocol):
    """One replica's local log, as replication sees it."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    def epoch_entries(self) -> Sequence[tuple[int, int]]:
        """(leader epoch, its start offset), ascending."""
        ...

    def assign_epoch(self, epoch: int, start_offset: int) -> None: ...

    def truncate_to(self, offset: int) -> None:
        """Drop offsets >= `offset` and every epoch that starts there or later (also when
        nothing is dropped: an epoch led without data ends at the LEO, issue 7)."""
        ...

    @property
    def topic_id(self) -> str | None:
        """The id of the topic this log belongs to (KIP-516, partition.metadata); None if
        never told."""
        ...

    def assign_topic_id(self, topic_id: str) -> None:
        """Record the id (only on a log with none, or the same one)."""
        ...


class TopicIdAction(enum.Enum):
    """What a LeaderAndIsr's topic id means for the local log of one of its partitions."""

    KEEP = "keep"  # the same topic, or one side does not know its id
    RECORD = "record"  # a log without an id (made before ids): it is told the request's
    REPLACE = "replace"  # another topic's log (the topic was deleted and made again): delete it, start empty


def topic_id_action(local: str | None, requested: str | None) -> TopicIdAction:
    """KIP-516 (Kafka's Partition.checkLogTopicId): a log whose topic id differs from the
    controller's is the replica of an earlier topic of the same name, deleted while this
    broker was away. Adopting it kept the old topic's records (and epochs) as the new
    topic's replica: different records from the leader's below the HW (guarantee 2), and
    read by consumers if it ever led. Without an id on either side nothing can be told
    (a topic created before ids, or an older controller): kept as before."""
    if requested is None or local == requested:
        return TopicIdAction.KEEP
    if local is None:
        return TopicIdAction.RECORD
    return TopicIdAction.REPLACE


class Replica:
    """One partition replica on this broker: the core's state machine over its log."""

    def __init__(self, topic: str, partition: int, broker_id: int, replica_log: ReplicaLog, initial_hw: int) -> None:
        self.topic = topic
        self.partition = partition
        self.tp: TP = (topic, partition)  # (an attribute: read on every fetch and append)
        self.broker_id = broker_id
        self.replica_log = replica_log
        self.state = PartitionReplicaState(topic, partition, broker_id)
        # Until a role's own HW passes it, the checkpointed HW is all we know.
        self.initial_hw = min(max(initial_hw, replica_log.log_start_offset), replica_log.log_end_offset)

    @property
    def topic_id(self) -> str | None:
        return self.replica_log.topic_id

    @property
    def leo(self) -> int:
        return self.replica_log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.replica_log.log_start_offset

    @property
    def hw(self) -> int:
        return max(self.state.hw, self.initial_hw)

    @property
    def is_leader(self) -> bool:
        return self.state.is_leader

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def epoch_at(self, offset: int) -> int:
        """The leader epoch the log records for `offset`; -1 outside the log."""
        if not self.log_start_offset <= offset < self.leo:
            return -1
        entries = self.replica_log.epoch_entries()
        i = bisect.bisect_right([start for _, start in entries], offset)
        return entries[i - 1][0] if i > 0 else -1

    def check_enough_replicas_reach_offset(self, required_offset: int, min_insync_replicas: int) -> tuple[bool, ErrorCode]:
        return self.state.check_enough_replicas_reach_offset(required_offset, min_insync_replicas)

    def low_watermark(self) -> int:
        """The least log start over the ISR (DeleteRecords' acks); only on the leader."""
        return self.state.low_watermark()

    def log_start_moved(self) -> bool:
        """The log's start moved up (retention, DeleteRecords, or a follower following the
        leader's): the state follows, so follower fetches below it are refused and the low
        watermark counts it. Returns whether the state's log start changed."""
        return self.state.maybe_update_log_start_offset(self.log_start_offset)

    # -- role changes -----------------------------------------------------------------
    def make_leader(self, st: LeaderAndIsrState, now_ms: int) -> bool:
        """Become (or stay) leader; a new epoch starts at our LEO (KIP-101). Returns
        whether this is a new leadership (a new epoch here)."""
        new_epoch = st.leader_epoch > self.state.leader_epoch or not self.state.is_leader
        self.state.become_leader(st, self.leo, min(self.hw, self.leo), now_ms, self.log_start_offset)
        if new_epoch:
            self.replica_log.assign_epoch(st.leader_epoch, self.leo)
        return new_epoch

    def make_follower(self, st: LeaderAndIsrState, now_ms: int) -> bool:
        return self.state.become_follower(st, now_ms)

    # -- leader -----------------------------------------------------------------------
    def leader_appended(self) -> bool:
        """Records were appended at this leader: the HW may move (RF 1, or all caught up)."""
        return self.state.maybe_increment_hw(self.leo) if self.state.is_leader else False

    # -- follower ---------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        self.replica_log.truncate_to(min(offset, self.leo))
        if not self.state.is_leader:
            # (a truncation below the log start restarts the log there: its start goes down)
            self.state.on_truncate(self.leo, self.log_start_offset)
        self.initial_hw = min(self.initial_hw, self.leo)

    def truncate_by_epoch(self, leader_answer: EpochEndOffset | tuple[int, int]) -> bool:
        """KIP-101: truncate to where our log and the leader's can first differ, from the
        leader's (epoch, end offset) for our latest epoch. Returns whether that settled it
        (False: we lacked the leader's epoch; ask again about an older one)."""
        st = follower_truncation_state(self.replica_log.epoch_entries(), self.leo, leader_answer, local_hw=self.hw)
        self.truncate_to(st.truncate_to)
        return st.completed

    def follower_appended(self, leader_hw: int) -> bool:
        """Records from the leader were appended (or none came): HW = min(leader's, LEO)."""
        if self.state.is_leader:
            return False
        return self.state.follower_update_hw(leader_hw, self.leo)


class FetchErrorAction(enum.Enum):
    """What a follower does after its leader answered a partition with an error."""

    RESTART_AT_LEADER_LOG_START = "restart_at_leader_log_start"  # we fell below its retention
    TRUNCATE_AGAIN = "truncate_again"  # we are ahead of the leader: redo the epoch round
    AWAIT_LEADER_AND_ISR = "await_leader_and_isr"  # our view or the leader's is stale: slow retry
    BACK_OFF = "back_off"


def after_fetch_error(replica: Replica, error: int, leader_log_start: int = -1, leader_leo: int = -1) -> FetchErrorAction:
    if error == ErrorCode.OFFSET_OUT_OF_RANGE and leader_log_start >= 0 and replica.leo < leader_log_start:
        return FetchErrorAction.RESTART_AT_LEADER_LOG_START
    if error == ErrorCode.OFFSET_OUT_OF_RANGE and 0 <= leader_leo < replica.leo:
        return FetchErrorAction.TRUNCATE_AGAIN  # should not happen with epoch truncation
    if error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return FetchErrorAction.AWAIT_LEADER_AND_ISR
    return FetchErrorAction.BACK_OFF


@dataclass(eq=False)
class Follow:
    """One partition this broker follows (seed G, KIP-101): from which leader at which
    epoch, and what it needs next. A new LeaderAndIsr makes a new Follow, so an answer to a
    request made for an older one is recognised (`is not`) and dropped by the driver."""

    replica: Replica
    leader: int
    leader_epoch: int
    truncating: bool = True  # ask OffsetsForLeaderEpoch before fetching
    in_flight: bool = False
    not_before_ms: int = 0

    def ready(self, now_ms: int) -> bool:
        return not self.in_flight and now_ms >= self.not_before_ms

    def latest_epoch(self) -> int:
        entries = self.replica.replica_log.epoch_entries()
        return entries[-1][0] if entries else -1

    def on_leader_epoch_end(self, answer: EpochEndOffset | tuple[int, int]) -> None:
        """The leader's (epoch, end offset) for our latest epoch, from OffsetsForLeaderEpoch
        or a DIVERGING_EPOCH fetch answer: truncate there (KIP-101); when that did not
        settle it, ask again about an older epoch."""
        self.in_flight = False
        self.truncating = not self.replica.truncate_by_epoch(answer)

    def on_fetched(self, leader_hw: int) -> None:
        """Records from the fetch offset were appended (or none came)."""
        self.in_flight = False
        self.replica.follower_appended(leader_hw)

    def on_error(self, error: int, now_ms: int, *, backoff_ms: int, await_leader_and_isr_ms: int,
                 leader_log_start: int = -1, leader_leo: int = -1) -> FetchErrorAction:
        """The leader answered an error, or nothing (REQUEST_TIMED_OUT). The driver carries
        out RESTART_AT_LEADER_LOG_START (a log operation only the broker has)."""
        self.in_flight = False
        action = after_fetch_error(self.replica, error, leader_log_start, leader_leo)
        if action is FetchErrorAction.TRUNCATE_AGAIN:
            self.truncating = True
        elif action is FetchErrorAction.AWAIT_LEADER_AND_ISR:
            self.not_before_ms = now_ms + await_leader_and_isr_ms
        elif action is FetchErrorAction.BACK_OFF:
            self.not_before_ms = now_ms + backoff_ms
        return action


@dataclass
class RoleChanges:
    """What a LeaderAndIsr or StopReplica decided, for the driver to carry out."""

    codes: list[tuple[TP, int]] = field(default_factory=list)
    fetch: dict[TP, Follow] = field(default_factory=dict)  # start fetching (from Follow.leader at its epoch)
    stop_fetching: list[TP] = field(default_factory=list)
    removed: list[TP] = field(default_factory=list)  # replicas gone from this broker
    delete: bool = False  # ... and their logs are to be deleted
    new_leaderships: list[tuple[TP, int]] = field(default_factory=list)  # (tp, leader epoch)
    # (tp, old topic id, new topic id): the local log of an earlier topic was deleted and an
    # empty one made (open_replica(fresh=True) did it; the driver logs it)
    replaced: list[tuple[TP, str, str]] = field(default_factory=list)
    touched: list[TP] = field(default_factory=list)  # role or HW changed: wake waiters


@dataclass(frozen=True)
class FollowerRead:
    """The leader's decision on one partition of a follower fetch: answer DIVERGING_EPOCH,
    or read records from the fetch offset below `upper` (the LEO)."""

    diverging: EpochEndOffset | None
    upper: int
    hw_changed: bool
    log_start_changed: bool = False  # the follower's log start moved: waiting DeleteRecords are checked


OpenReplica = Callable[[TP, Mapping[str, str], bool], Replica]


class ReplicaManager:
    def __init__(self, broker_id: int, open_replica: OpenReplica) -> None:
        self.broker_id = broker_id
        # The driver's: open (or create) the local log of a replica; with fresh=True first
        # delete the local log there is (a log of an earlier topic: TopicIdAction.REPLACE),
        # with its checkpoint entries, and create an empty one.
        self.open_replica = open_replica
        self.replicas: dict[TP, Replica] = {}
        # Replicas whose log dir failed (KIP-112, issue 14): answered KAFKA_STORAGE_ERROR and
        # never opened again (a LeaderAndIsr must not make a new, empty log for one in a
        # healthy dir) until the broker restarts.
        self.offline: set[TP] = set()
        self.controller_epoch = 0
        self.broker_epoch = -1
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.fetching: dict[TP, Follow] = {}  # followed partitions
        self.last_init_controller_epoch = -1
        self._alter_isr_due: set[TP] = set()
        self._alter_isr_in_flight: dict[TP, AlterIsrItem] = {}
        self.quotas = ReplicationQuotas(broker_id)  # the throttle of replicas being added
        # `replica.selector.class` (KIP-392): who serves a consumer's fetch of a partition
        # this broker leads. The driver installs the configured one; None: leaders serve.
        self.replica_selector: ReplicaSelector | None = LeaderSelector()

    def add(self, replica: Replica) -> None:
        """A local replica found at start-up: no role until the controller gives one."""
        assert replica.tp not in self.replicas
        self.replicas[replica.tp] = replica

    def _check_online(self, tp: TP) -> None:
        if tp in self.offline:
            raise KafkaStorageError(f"{tp[0]}-{tp[1]}: its log dir on broker {self.broker_id} is offline")

    def mark_offline(self, tps: Iterable[TP]) -> RoleChanges:
        """Their log dir failed: the replicas go (logs kept on disk, not deleted), with their
        fetchers and waiters, and stay offline."""
        out = RoleChanges(delete=False)
        for tp in tps:
            self._remove(tp, out)
            self.offline.add(tp)
        return out

    def leader(self, tp: TP) -> Replica:
        self._check_online(tp)
        replica = self.replicas.get(tp)
        if replica is None or not replica.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not lead {tp[0]}-{tp[1]}")
        return replica

    # -- controller requests --------------------------------------------------------------
    def check_controller(self, controller_epoch: int, broker_epoch: int) -> None:
        if controller_epoch < self.controller_epoch:
            raise StaleControllerEpochError(f"controller epoch {controller_epoch} < {self.controller_epoch}")
        # KIP-380: only an epoch older than ours is stale. A newer one is our own new
        # registration, which the controller can see before our register call returns.
        if broker_epoch != -1 and broker_epoch < self.broker_epoch:
            raise StaleBrokerEpochError(f"broker epoch {broker_epoch} is older than ours ({self.broker_epoch})")
        self.controller_epoch = controller_epoch

    def on_leader_and_isr(self, req: LeaderAndIsr, now_ms: int) -> RoleChanges:
        """Seed section C; ordered by leader epoch per partition, idempotent."""
        self.check_controller(req.controller_epoch, req.broker_epoch)
        for topic, cfg in req.topic_configs.items():
            self.topic_configs[topic] = dict(cfg)
        out = RoleChanges()
        if any(p.adding for p in req.partitions):
            self.quotas.set_rates(req.throttle, now_ms)
        for p in req.partitions:
            tp = p.topic_partition
            self.quotas.on_partition(tp, p.adding)
            st = LeaderAndIsrState(leader=p.leader, leader_epoch=p.leader_epoch, isr=p.isr, partition_epoch=p.partition_epoch,
                                   replicas=p.replicas, controller_epoch=req.controller_epoch)
            try:
                out.codes.append((tp, self._apply_leadership(tp, st, now_ms, out, req.topic_ids.get(p.topic))))
            except CoreError as e:
                out.codes.append((tp, int(e.code)))
        if req.init:
            # Seed D: a new controller's first LeaderAndIsr lists everything this broker
            # replicates; what it does not list was deleted while we were away.
            self.last_init_controller_epoch = req.controller_epoch
            listed = {p.topic_partition for p in req.partitions}
            out.delete = True
            for tp in sorted(tp for tp in self.replicas if tp not in listed):
                self._remove(tp, out)
        return out

    def _apply_leadership(self, tp: TP, st: LeaderAndIsrState, now_ms: int, out: RoleChanges,
                          topic_id: str | None = None) -> int:
        self._check_online(tp)
        replica = self.replicas.get(tp)
        if replica is None:
            replica = self.replicas[tp] = self.open_replica(tp, self.topic_configs.get(tp[0], {}), False)
        replica = self._check_topic_id(replica, topic_id, out)
        if st.leader_epoch < replica.leader_epoch:
            raise FencedLeaderEpochError(f"leader epoch {st.leader_epoch} < {replica.leader_epoch}")
        if st.leader == self.broker_id:
            self._stop_fetching(tp, out)
            if replica.make_leader(st, now_ms):
                out.new_leaderships.append((tp, st.leader_epoch))
        else:
            old = (replica.state.leader_id, replica.leader_epoch)
            replica.make_follower(st, now_ms)
            if st.leader >= 0 and (old != (st.leader, st.leader_epoch) or tp not in self.fetching):
                if tp in self.fetching:
                    out.stop_fetching.append(tp)  # the old Follow ends; answers to it are dropped
                self.fetching[tp] = out.fetch[tp] = Follow(replica, st.leader, st.leader_epoch)
            elif st.leader < 0:
                self._stop_fetching(tp, out)
        self._alter_isr_in_flight.pop(tp, None)  # an answer to it will be ignored (the state moved)
        out.touched.append(tp)
        return 0

    def _check_topic_id(self, replica: Replica, topic_id: str | None, out: RoleChanges) -> Replica:
        """The replica the LeaderAndIsr is about: this one, told its topic id if it had
        none, or a fresh one in place of a log of an earlier topic (topic_id_action). The
        old one goes as a removed replica does, without its role or epochs (the new
        topic's epochs are not fenced by the old topic's)."""
        action = topic_id_action(replica.topic_id, topic_id)
        if action is TopicIdAction.KEEP:
            return replica
        assert topic_id is not None
        if action is TopicIdAction.RECORD:
            replica.replica_log.assign_topic_id(topic_id)
            return replica
        tp, old_id = replica.tp, replica.topic_id
        assert old_id is not None
        fresh = self.open_replica(tp, self.topic_configs.get(tp[0], {}), True)
        self._stop_fetching(tp, out)
        self._alter_isr_due.discard(tp)
        self._alter_isr_in_flight.pop(tp, None)
        self.replicas[tp] = fresh
        assert fresh is not replica
        assert fresh.leo == 0
        assert fresh.topic_id is None
        fresh.replica_log.assign_topic_id(topic_id)
        out.replaced.append((tp, old_id, topic_id))
        return fresh

    def _stop_fetching(self, tp: TP, out: RoleChanges) -> None:
        if self.fetching.pop(tp, None) is not None:
            out.stop_fetching.append(tp)
        out.fetch.pop(tp, None)

    def on_stop_replica(self, req: StopReplica) -> RoleChanges:
        self.check_controller(req.controller_epoch, req.broker_epoch)
        out = self.remove_replicas(req.partitions, delete=req.delete)
        out.codes = [(tp, 0) for tp in req.partitions]
        return out

    def remove_replicas(self, tps: Iterable[TP], *, delete: bool) -> RoleChanges:
        """StopReplica, or start-up finding local replicas no longer assigned here (seed E)."""
        out = RoleChanges(delete=delete)
        for tp in tps:
            self._remove(tp, out)
        if delete:  # a topic's config goes with its last replica here (not with one removed partition)
            for topic in {tp[0] for tp in tps} - {tp[0] for tp in self.replicas}:
                self.topic_configs.pop(topic, None)
        return out

    def _remove(self, tp: TP, out: RoleChanges) -> None:
        self._stop_fetching(tp, out)
        self._alter_isr_due.discard(tp)
        self._alter_isr_in_flight.pop(tp, None)
        self.quotas.on_partition(tp, ())
        if self.replicas.pop(tp, None) is not None:
            out.touched.append(tp)
        out.removed.append(tp)

    # -- leader side ------------------------------------------------------------------------
    def check_append(self, tp: TP, acks: int, min_insync_replicas: int) -> Replica:
        """Before a produce appends: leader here, and for acks=all enough ISR members."""
        self._check_online(tp)
        replica = self.replicas.get(tp)
        if replica is None:
            raise UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} is not on broker {self.broker_id}")
        if not replica.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not lead {tp[0]}-{tp[1]}")
        if acks == -1 and replica.state.under_min_isr(min_insync_replicas):
            raise NotEnoughReplicasError(f"ISR {list(replica.state.isr)} is smaller than min.insync.replicas={min_insync_replicas}")
        return replica

    def delete_records_target(self, tp: TP, requested_offset: int, *, partition_known: bool,
                              deletion_allowed: Callable[[Replica], bool]) -> tuple[Replica, int]:
        """DeleteRecords for one partition: the local leader and the log start it moves to
        (kafkalite.core.delete_records.decide_log_start). A partition not on this broker is
        NOT_LEADER_OR_FOLLOWER when the cluster has it, else UNKNOWN_TOPIC_OR_PARTITION."""
        self._check_online(tp)
        replica = self.replicas.get(tp)
        if replica is None:
            error = NotLeaderOrFollowerError if partition_known else UnknownTopicOrPartitionError
            raise error(f"{tp[0]}-{tp[1]} is not on broker {self.broker_id}")
        return replica, decide_log_start(tp, requested_offset, is_leader=replica.is_leader, hw=replica.hw,
                                         deletion_allowed=deletion_allowed(replica))

    def follower_fetch(self, tp: TP, replica_id: int, fetch_offset: int, current_leader_epoch: int,
                       last_fetched_epoch: int, now_ms: int, follower_log_start: int = UNKNOWN_OFFSET,
                       follower_broker_epoch: int = -1, *, read_again: bool = False) -> FollowerRead:
        """The leader's side of one partition of a ReplicaFetch (seed G, KIP-320).
        `follower_log_start`: the follower's own log start (Kafka's fetch request carries
        it), for the low watermark DeleteRecords waits on; -1 from a sender that omits it.
        `follower_broker_epoch`: the epoch its request carried, which an ISR expansion
        names (KIP-903); -1 if not said.

        `read_again`: the same request read this partition before it waited, and reads it
        once more (an append woke it, or something marked it). For a follower in the ISR
        that named its leader epoch, as Kafka's DelayedFetch completes with a read only:
        the follower's state is not updated a second time (the offset is the one already
        counted, and a HW it moved already moved), and only what the wait may have changed
        is checked: this replica still leads in that epoch (so no new epoch began and no
        divergence arose that the first read did not see) and the offset is still within
        the log (retention or DeleteRecords may have moved its start). A follower outside
        the ISR gets the whole decision again: this read may be the one that proposes it
        back (the driver's idle-partition check marks a partition for that), and it may no
        longer be a replica at all (a reassignment in the same leader epoch)."""
        replica = self._fenced_leader(tp, current_leader_epoch)
        leo = replica.leo
        state = replica.state
        read_only = read_again and current_leader_epoch >= 0 and replica_id in state.isr
        if not read_only:
            diverging = diverging_epoch_check(replica.replica_log.epoch_entries(), leo, fetch_offset, last_fetched_epoch)
            if diverging is not None:
                return FollowerRead(diverging, leo, False)
        log_start = replica.log_start_offset
        if not log_start <= fetch_offset <= leo:
            raise OffsetOutOfRangeError(f"offset {fetch_offset} outside [{log_start}, {leo}] of {tp[0]}-{tp[1]}")
        if read_only:
            return FollowerRead(None, leo, False)
        result: FollowerFetchResult = state.update_follower_fetch(replica_id, fetch_offset, leo, now_ms,
                                                                  min(follower_log_start, fetch_offset), follower_broker_epoch)
        if result.alter_isr is not None:
            self._alter_isr_due.add(tp)
        return FollowerRead(None, leo, result.hw_changed, result.log_start_changed)

    def hw_answered(self, tp: TP, replica_id: int, hw: int) -> None:
        """The answer to `replica_id`'s fetch of `tp` went out with `hw` (the read it carries,
        not an earlier one of a fetch that waited)."""
        replica = self.replicas.get(tp)
        if replica is not None:
            replica.state.note_hw_sent(replica_id, hw)

    def offsets_for_leader_epoch(self, tp: TP, current_leader_epoch: int, requested_epoch: int, *,
                                 for_consumer: bool = False) -> EpochEndOffset:
        """The leader's answer to OffsetsForLeaderEpoch: a follower's (KIP-101) or a
        consumer's truncation check (KIP-320). Only leaders answer. For a consumer the end
        offset is limited to the HW (it must not learn of offsets it could not read); a new
        leader whose HW is still below the start of its epoch does not know the true HW
        yet and answers OFFSET_NOT_AVAILABLE instead, so the consumer retries rather than
        mistake the lagging HW for a truncation (KIP-392, seed 003). Once the HW has
        reached the epoch's start, only the latest epoch can end above it."""
        replica = self._fenced_leader(tp, current_leader_epoch)
        if requested_epoch < 0:
            return EpochEndOffset(-1, -1)
        answer = end_offset_for_epoch(replica.replica_log.epoch_entries(), replica.leo, requested_epoch)
        if not for_consumer or answer.end_offset <= replica.hw:
            return answer
        if replica.hw < replica.state.leader_epoch_start_offset:
            raise OffsetNotAvailableError(f"{tp[0]}-{tp[1]}: the HW {replica.hw} of leader epoch {replica.leader_epoch} "
                                          f"is still below the epoch's start {replica.state.leader_epoch_start_offset}")
        return EpochEndOffset(answer.epoch, replica.hw)

    def consumer_fetch(self, tp: TP, fetch: ConsumerFetch, cluster: ClusterView, now_ms: int) -> tuple[Replica, ConsumerRead]:
        """One partition of a consumer's Fetch: served by this replica (as leader or, for
        Fetch v11+, as an in-sync follower) below its HW, or redirected by the leader to
        the preferred read replica the selector chose (KIP-392; kafkalite.core.consumer_fetch).
        A partition this broker does not hold is NOT_LEADER_OR_FOLLOWER when the cluster
        has it (the client asks the leader again), else UNKNOWN_TOPIC_OR_PARTITION."""
        self._check_online(tp)
        replica = self.replicas.get(tp)
        if replica is None:
            error = NotLeaderOrFollowerError if cluster.partition_known else UnknownTopicOrPartitionError
            raise error(f"{tp[0]}-{tp[1]} is not on broker {self.broker_id}")
        read = decide_consumer_read(tp, replica.state, log_start_offset=replica.log_start_offset, hw=replica.hw,
                                    leo=replica.leo, fetch=fetch, cluster=cluster, selector=self.replica_selector,
                                    now_ms=now_ms)
        return replica, read

    def _fenced_leader(self, tp: TP, current_leader_epoch: int) -> Replica:
        self._check_online(tp)
        replica = self.replicas.get(tp)
        if replica is None:
            raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]} is not on broker {self.broker_id}")
        code = replica.state.validate_leader_epoch(current_leader_epoch)  # not leader, or KIP-320 fencing
        if code != ErrorCode.NONE:
            raise FENCING_ERRORS[code](f"{tp[0]}-{tp[1]}: leader epoch {current_leader_epoch} here at {replica.leader_epoch}")
        return replica

    def maybe_shrink_isrs(self, now_ms: int, lag_time_max_ms: int) -> None:
        for tp, replica in self.replicas.items():
            if replica.is_leader and replica.state.maybe_shrink_isr(now_ms, lag_time_max_ms, replica.leo) is not None:
                self._alter_isr_due.add(tp)

    # -- AlterIsr (KIP-497) -----------------------------------------------------------------
    def alter_isr_to_send(self) -> list[AlterIsrItem]:
        """The proposals to send now: each partition's pending change, at most one in
        flight per partition. Mark them in flight; `on_alter_isr_answer` ends that."""
        items = []
        for tp in sorted(self._alter_isr_due):
            replica = self.replicas.get(tp)
            item = None if replica is None or not replica.is_leader else replica.state.pending_alter_isr_item()
            if item is not None and tp not in self._alter_isr_in_flight:
                self._alter_isr_in_flight[tp] = item
                items.append(item)
        self._alter_isr_due.clear()
        return items

    def alter_isr_request(self, items: Sequence[AlterIsrItem]) -> AlterIsrRequest:
        return AlterIsrRequest(self.broker_id, self.broker_epoch, tuple(
            AlterIsrProposal(i.topic, i.partition, i.leader_id, i.leader_epoch, tuple(i.new_isr), i.partition_epoch, i.new_isr_epochs)
            for i in items))

    def on_alter_isr_answer(self, items: Sequence[AlterIsrItem], response: AlterIsrResponse | None) -> list[TP]:
        """The controller answered (None: no answer, a transport error). Returns the
        partitions whose HW moved. Proposals to retry are due again."""
        by_tp = {(r.topic, r.partition): r for r in (response.partitions if response is not None else ())}
        moved = []
        for item in items:
            tp = (item.topic, item.partition)
            if self._alter_isr_in_flight.get(tp) is item:
                del self._alter_isr_in_flight[tp]
            replica = self.replicas.get(tp)
            if replica is None:
                continue
            new_state = None
            if response is None:
                code = int(ErrorCode.REQUEST_TIMED_OUT)
            elif response.error != 0:
                code = response.error  # NOT_CONTROLLER, STALE_BROKER_EPOCH: nothing decided, retried
            elif tp not in by_tp:
                continue
            else:
                r: AlterIsrPartitionResult = by_tp[tp]
                code = r.error
                if r.error == 0 and r.leader >= 0 and r.leader in r.isr:
                    new_state = LeaderAndIsrState(r.leader, r.leader_epoch, r.isr, r.partition_epoch, replica.state.replicas,
                                                  replica.state.controller_epoch)
                elif r.error == 0:
                    code = int(ErrorCode.FENCED_LEADER_EPOCH)  # an answer with no usable state
            changed = replica.state.on_alter_isr_response(code, new_state, sent=item)
            if replica.state.retry_alter_isr is not None:
                self._alter_isr_due.add(tp)
            # Any settled answer may free the HW, not only an accepted one: a refused
            # expansion (INVALID_REQUEST) falls back to the committed ISR, whose members may
            # all hold records the refused member held back. Nothing else would recompute
            # it until the next append or follower fetch, and an idle partition has neither.
            if changed and replica.leader_appended():
                moved.append(tp)
        return moved

    @property
    def alter_isr_pending(self) -> bool:
        return bool(self._alter_isr_due)
