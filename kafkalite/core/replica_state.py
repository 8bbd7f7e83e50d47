"""Per-partition replica state on one broker: leader side and follower side.

DESIGN section 5, seed 000 sections C and G, KIP-497 (AlterIsr), Kafka's Partition.scala.

What it keeps, on the leader: AR (`replicas`), the committed ISR (as last confirmed by the
controller), at most one in-flight ISR change (`PendingExpandIsr` / `PendingShrinkIsr`),
each follower's LEO and last caught-up time, the HW, and the start offset of the current
leader epoch. On a follower: the leader id and epoch and the HW the leader last sent.

Rules kept here (each is asserted in `check_invariants`):
- HW never decreases on a leader; `log_start <= hw`; leader's HW <= leader's LEO.
- The leader is in the committed ISR and in the maximal ISR; ISR ⊆ replicas.
- The maximal ISR (KIP-497) is the committed ISR plus a pending expansion's new member, or
  the old (larger) committed set during a pending shrink. HW is min LEO over it.
- At most one AlterIsr in flight per partition; the phases and their legal transitions are
  in `ISR_TRANSITIONS` (STYLE habit 5); anything else raises `IllegalTransitionError`.
- Leader epochs never go backwards: a LeaderAndIsr with an older epoch (or the same epoch
  and an older partition epoch) raises `StaleLeaderEpochError`.

Pure: no I/O, no clock. The shell passes `now_ms` and the local log's LEO/HW, performs the
returned effects (send `AlterIsrItem`s to the controller, complete purgatory operations when
`hw_changed`), and feeds responses back in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkalite.core.codes import (
    ErrorCode,
    IllegalTransitionError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    StaleLeaderEpochError,
)
from kafkalite.core.replica_types import (
    ISR_TRANSITIONS,
    NO_LEADER,
    UNKNOWN_OFFSET,
    AlterIsrItem,
    FollowerFetchResult,
    FollowerState,
    IsrEvent,
    IsrPhase,
    LeaderAndIsrState,
    PendingExpandIsr,
    PendingShrinkIsr,
    Role,
)

__all__ = [
    "ISR_TRANSITIONS",
    "NO_LEADER",
    "UNKNOWN_OFFSET",
    "AlterIsrItem",
    "FollowerFetchResult",
    "FollowerState",
    "IsrEvent",
    "IsrPhase",
    "LeaderAndIsrState",
    "PartitionReplicaState",
    "PendingExpandIsr",
    "PendingShrinkIsr",
    "Role",
]

# KIP-497 partition-level errors after which the leader gives up and waits for the
# controller's LeaderAndIsr (no retry): see `on_alter_isr_response`.
_GIVE_UP_AND_AWAIT = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


@dataclass
class _Ledger:
    """Bookkeeping the leader resets on every new leader epoch."""

    followers: dict[int, FollowerState] = field(default_factory=dict)
    leader_epoch_start_offset: int = UNKNOWN_OFFSET


class PartitionReplicaState:
    """One partition replica on `local_broker_id`; see the module docstring."""

    def __init__(self, topic: str, partition: int, local_broker_id: int) -> None:
        assert partition >= 0
        assert local_broker_id >= 0
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self._role = Role.NONE
        self._leader_id = NO_LEADER
        self._leader_epoch = -1
        self._partition_epoch = -1
        self._controller_epoch = -1
        self._isr: tuple[int, ...] = ()
        self._replicas: tuple[int, ...] = ()
        self._phase = IsrPhase.COMMITTED
        self._pending: PendingExpandIsr | PendingShrinkIsr | None = None
        # AWAITING_LEADER_AND_ISR: the maximal ISR of the change the controller refused,
        # still used for the HW until a LeaderAndIsr says what the ISR is.
        self._held_maximal: tuple[int, ...] = ()
        self._hw = 0
        self._log_start_offset = 0
        self._ledger = _Ledger()
        # Set when an AlterIsr failed with an error worth retrying (NOT_CONTROLLER,
        # STALE_BROKER_EPOCH, transport); the shell re-sends it and clears nothing itself.
        self.retry_alter_isr: AlterIsrItem | None = None

    # ------------------------------------------------------------------ read side

    @property
    def role(self) -> Role:
        return self._role

    @property
    def is_leader(self) -> bool:
        return self._role is Role.LEADER

    @property
    def is_follower(self) -> bool:
        return self._role is Role.FOLLOWER

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._partition_epoch

    @property
    def controller_epoch(self) -> int:
        return self._controller_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR, as last confirmed by the controller."""
        return self._isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR used for HW and acks (KIP-497): committed ∪ pending expansion, or the old
        set during a pending shrink; after a refusal, still that set until a LeaderAndIsr
        comes (`_give_up_and_await`)."""
        if self._phase is IsrPhase.AWAITING_LEADER_AND_ISR:
            return self._held_maximal
        if self._pending is None:
            return self._isr
        return self._pending.maximal_isr

    @property
    def pending(self) -> PendingExpandIsr | PendingShrinkIsr | None:
        return self._pending

    @property
    def isr_phase(self) -> IsrPhase:
        return self._phase

    @property
    def hw(self) -> int:
        return self._hw

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def leader_epoch_start_offset(self) -> int:
        """The leader's LEO when it began this leader epoch (UNKNOWN_OFFSET if follower)."""
        return self._ledger.leader_epoch_start_offset

    def follower_state(self, replica_id: int) -> FollowerState:
        """A copy of what the leader knows of `replica_id`."""
        state = self._ledger.followers[replica_id]
        return FollowerState(**vars(state))

    def follower_leo(self, replica_id: int) -> int:
        return self._ledger.followers[replica_id].leo

    # ------------------------------------------------------------ LeaderAndIsr

    def become_leader(
        self,
        state: LeaderAndIsrState,
        local_leo: int,
        local_hw: int,
        now_ms: int,
        log_start_offset: int | None = None,
    ) -> bool:
        """Apply a LeaderAndIsr naming this broker leader (seed section C, becomeLeader).

        A new leader epoch (or a first leadership) resets every follower: LEO unknown, last
        caught-up time `now_ms` for ISR members (so they get a full lag window), 0 for the
        rest; the epoch's start offset is the local LEO. The same leader epoch with a newer
        partition epoch only adopts the new ISR and replicas (e.g. after a controller-side
        shrink). Either way a pending ISR change is dropped: the partition epoch it was
        based on is gone. Returns whether anything changed; raises StaleLeaderEpochError.
        """
        self._validate_leader_and_isr(state)
        if state.leader != self.local_broker_id:
            raise InvalidRequestError(f"become_leader for leader {state.leader}")
        self._refuse_stale(state)
        assert local_hw <= local_leo
        same_epoch = state.leader_epoch == self._leader_epoch
        if same_epoch and self._role is Role.LEADER:
            if state.partition_epoch == self._partition_epoch:
                return False  # idempotent re-delivery
            self._adopt(state)
            self._sync_followers_with_replicas(now_ms)
            self.maybe_increment_hw(local_leo)
            self.check_invariants()
            return True
        if same_epoch and self._role is Role.FOLLOWER:
            raise InvalidRequestError(f"two leaders in leader epoch {state.leader_epoch}")
        was_leader = self._role is Role.LEADER
        self._role = Role.LEADER
        self._leader_id = self.local_broker_id
        self._adopt(state)
        old_followers = self._ledger.followers
        self._ledger = _Ledger(leader_epoch_start_offset=local_leo)
        for replica_id in state.replicas:
            if replica_id == self.local_broker_id:
                continue
            previous = old_followers.get(replica_id)
            # A new leader knows no follower's LEO; a re-elected leader keeps them (Kafka).
            kept = was_leader and previous is not None
            self._ledger.followers[replica_id] = FollowerState(
                replica_id=replica_id,
                leo=previous.leo if kept else UNKNOWN_OFFSET,
                broker_epoch=previous.broker_epoch if kept else -1,
                last_caught_up_ms=now_ms if replica_id in state.isr else 0,
                last_fetch_leader_leo=local_leo,
                last_fetch_ms=now_ms,
            )
        if log_start_offset is not None:
            assert log_start_offset >= 0
            self._log_start_offset = log_start_offset
        # HW never decreases on a leader; a re-elected leader keeps what it had.
        self._hw = max(self._hw, local_hw) if was_leader else local_hw
        assert self._hw <= local_leo
        self.maybe_increment_hw(local_leo)
        self.check_invariants()
        return True

    def become_follower(self, state: LeaderAndIsrState, now_ms: int) -> bool:
        """Apply a LeaderAndIsr naming another broker (or nobody, -1) leader. The shell then
        stops serving produce, stops the fetcher, truncates by leader epoch
        (`kafkalite.core.truncation`) and fetches from the new leader. `now_ms` is taken for
        symmetry with become_leader; a follower keeps no timers."""
        del now_ms
        self._validate_leader_and_isr(state)
        if state.leader == self.local_broker_id:
            raise InvalidRequestError("become_follower naming this broker leader")
        self._refuse_stale(state)
        same_epoch = state.leader_epoch == self._leader_epoch
        if same_epoch and self._role is Role.LEADER:
            raise InvalidRequestError(f"two leaders in leader epoch {state.leader_epoch}")
        if (
            same_epoch
            and self._role is Role.FOLLOWER
            and state.partition_epoch == self._partition_epoch
            and state.leader == self._leader_id
        ):
            return False
        self._role = Role.FOLLOWER
        self._leader_id = state.leader
        self._adopt(state)
        self._ledger = _Ledger()
        self.check_invariants()
        return True

    def _validate_leader_and_isr(self, state: LeaderAndIsrState) -> None:
        """Reject a self-contradicting LeaderAndIsr before touching anything."""
        if len(set(state.replicas)) != len(state.replicas):
            raise InvalidRequestError(f"duplicate replicas {state.replicas}")
        if len(set(state.isr)) != len(state.isr):
            raise InvalidRequestError(f"duplicate ISR members {state.isr}")
        if not set(state.isr) <= set(state.replicas):
            raise InvalidRequestError(f"ISR {state.isr} not within replicas {state.replicas}")
        if self.local_broker_id not in state.replicas:
            raise InvalidRequestError(f"broker {self.local_broker_id} not a replica")
        if state.leader != NO_LEADER and state.leader not in state.isr:
            raise InvalidRequestError(f"leader {state.leader} not in ISR {state.isr}")
        if state.leader_epoch < 0:
            raise InvalidRequestError(f"negative leader epoch {state.leader_epoch}")

    def _refuse_stale(self, state: LeaderAndIsrState) -> None:
        if state.leader_epoch < self._leader_epoch:
            raise StaleLeaderEpochError(
                f"{self.topic}-{self.partition}: leader epoch {state.leader_epoch}"
                f" < current {self._leader_epoch}"
            )
        same_epoch = state.leader_epoch == self._leader_epoch
        if same_epoch and state.partition_epoch < self._partition_epoch:
            raise StaleLeaderEpochError(
                f"{self.topic}-{self.partition}: partition epoch {state.partition_epoch}"
                f" < current {self._partition_epoch} in leader epoch {state.leader_epoch}"
            )

    def _adopt(self, state: LeaderAndIsrState) -> None:
        """Take the controller's view; any in-flight ISR change is void."""
        assert state.leader_epoch >= self._leader_epoch
        self._leader_epoch = state.leader_epoch
        self._partition_epoch = state.partition_epoch
        self._controller_epoch = max(self._controller_epoch, state.controller_epoch)
        self._isr = tuple(state.isr)
        self._replicas = tuple(state.replicas)
        self._transition(IsrEvent.LEADER_AND_ISR)
        self._pending = None
        self._held_maximal = ()
        self.retry_alter_isr = None

    def _sync_followers_with_replicas(self, now_ms: int) -> None:
        """Same leader epoch, new assignment: add new replicas, drop removed ones."""
        followers = self._ledger.followers
        for replica_id in list(followers):
            if replica_id not in self._replicas:
                del followers[replica_id]
        for replica_id in self._replicas:
            if replica_id == self.local_broker_id or replica_id in followers:
                continue
            followers[replica_id] = FollowerState(
                replica_id=replica_id,
                last_caught_up_ms=now_ms if replica_id in self._isr else 0,
                last_fetch_ms=now_ms,
            )

    # --------------------------------------------------------------- leader side

    def validate_leader_epoch(self, request_leader_epoch: int) -> ErrorCode:
        """Fencing for requests only a leader answers (KIP-320): -1 means the client sent
        no epoch."""
        if self._role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return self.check_current_leader_epoch(request_leader_epoch)

    def check_current_leader_epoch(self, request_leader_epoch: int) -> ErrorCode:
        """Kafka's Partition.checkCurrentLeaderEpoch, whatever the role (a follower serving
        a consumer checks it too, KIP-392): the request's epoch against the one this
        replica knows. -1 means the client sent none. A replica with no role yet answers
        NOT_LEADER_OR_FOLLOWER."""
        if self._role is Role.NONE:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if request_leader_epoch < 0:
            return ErrorCode.NONE
        if request_leader_epoch < self._leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if request_leader_epoch > self._leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE

    def update_follower_fetch(
        self, replica_id: int, fetch_offset: int, leader_leo: int, now_ms: int,
        follower_log_start: int = UNKNOWN_OFFSET, follower_broker_epoch: int = -1,
    ) -> FollowerFetchResult:
        """A follower fetched at `fetch_offset`, so its LEO is `fetch_offset` (seed G).

        Last caught-up time follows Kafka's Replica.updateFetchState: if the follower
        reached the leader's current LEO it is caught up now; else if it reached the LEO
        the leader had at its previous fetch, it was caught up as of that previous fetch.
        Then maybe expand the ISR, then maybe advance the HW (Partition.updateFollowerFetchState).
        """
        self._require_leader()
        follower = self._ledger.followers.get(replica_id)
        if follower is None:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.partition}: {replica_id} is not a follower replica"
            )
        if fetch_offset > leader_leo or fetch_offset < self._log_start_offset:
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition}: fetch offset {fetch_offset} outside"
                f" [{self._log_start_offset}, {leader_leo}]"
            )
        assert leader_leo >= self._hw
        if 0 <= follower_broker_epoch < follower.broker_epoch:
            # A fetch of an earlier incarnation than one already heard from (a request
            # parked before the follower restarted, read again now): its offset says nothing
            # about the follower's log today, which may have lost an unflushed suffix, so it
            # neither moves the follower's LEO nor proposes it for the ISR (KIP-903).
            return FollowerFetchResult(hw_changed=False, alter_isr=None)
        if fetch_offset >= leader_leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.leo = fetch_offset
        follower.broker_epoch = follower_broker_epoch
        follower.last_fetch_leader_leo = leader_leo
        follower.last_fetch_ms = now_ms
        log_start_changed = follower_log_start != follower.log_start_offset and follower_log_start >= 0
        if log_start_changed:
            assert follower_log_start <= fetch_offset
            follower.log_start_offset = follower_log_start
        alter_isr = self._maybe_expand_isr(replica_id)
        hw_changed = self.maybe_increment_hw(leader_leo)
        self.check_invariants()
        return FollowerFetchResult(hw_changed=hw_changed, alter_isr=alter_isr, log_start_changed=log_start_changed)

    def low_watermark(self) -> int:
        """The least log start over the ISR, the leader's own included (Kafka's
        lowWatermarkIfLeader, over the ISR as DeleteRecords' acks wait on it). A follower
        that has not fetched since this leadership began counts as UNKNOWN_OFFSET (-1):
        a DeleteRecords waits for its first fetch."""
        self._require_leader()
        low = self._log_start_offset
        for replica_id in self._isr:
            if replica_id != self.local_broker_id:
                low = min(low, self._ledger.followers[replica_id].log_start_offset)
        return low

    def follower_still_caught_up(self, replica_id: int, fetch_offset: int, leader_leo: int, as_of_ms: int) -> bool:
        """A fetch session holds this partition without reading it on every fetch
        (kafkalite.core.fetch_session): the follower's last request, at `as_of_ms`, still
        fetched at `fetch_offset`. If that is both its LEO as we know it and our LEO, it was
        caught up then, as a fetch at that time would have recorded; otherwise nothing is
        known and nothing changes (the next real read of the partition decides).

        Returns whether the partition should be read for this follower at its next request
        all the same: it is not in the ISR, and only a read proposes adding it back (a
        proposal the controller refused or never answered is retried that way)."""
        self._require_leader()
        follower = self._ledger.followers.get(replica_id)
        if follower is None:
            return False
        if follower.leo == fetch_offset == leader_leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, as_of_ms)
            follower.last_fetch_ms = max(follower.last_fetch_ms, as_of_ms)
            follower.last_fetch_leader_leo = leader_leo
        return replica_id not in self._isr

    def note_hw_sent(self, replica_id: int, hw: int) -> None:
        """The leader's answer to `replica_id`'s fetch went out carrying `hw` (what the
        status page shows as that follower's HW). Nothing is noted when this broker no
        longer leads or `replica_id` is no follower (a role changed while it waited).
        A moved HW alone does not answer a follower's waiting fetch: the HW rides on the
        next answer with records, or on the one at max wait, as in Kafka since KAFKA-9952
        (answering at once for the HW alone, KIP-392's first version, raised followers'
        fetch rate by half, KAFKA-9731)."""
        if self._role is not Role.LEADER:
            return
        follower = self._ledger.followers.get(replica_id)
        if follower is not None and hw > follower.last_sent_hw:
            follower.last_sent_hw = min(hw, self._hw)

    def _maybe_expand_isr(self, replica_id: int) -> AlterIsrItem | None:
        """Kafka's needsExpandIsr: not in the ISR, no change in flight, LEO >= HW and >= the
        start offset of this leader epoch (so it holds everything this leader wrote under
        an older epoch that it might have truncated)."""
        if self._phase is not IsrPhase.COMMITTED:
            return None
        if replica_id in self._isr:
            return None
        follower = self._ledger.followers[replica_id]
        if follower.leo < self._hw:
            return None
        if follower.leo < self._ledger.leader_epoch_start_offset:
            return None
        item = self._alter_isr_item(self._isr + (replica_id,))
        self._transition(IsrEvent.PROPOSE_EXPAND)
        self._pending = PendingExpandIsr(isr=self._isr, new_replica=replica_id, sent=item)
        return item

    def maybe_increment_hw(self, leader_leo: int) -> bool:
        """HW = min LEO over the maximal ISR, leader included; never decreases.
        Triggered by a follower fetch, a local append (ISR = {leader}), an ISR change."""
        if self._role is not Role.LEADER:
            return False
        assert leader_leo >= self._hw
        candidate = leader_leo
        for replica_id in self.maximal_isr:
            if replica_id == self.local_broker_id:
                continue
            candidate = min(candidate, self._ledger.followers[replica_id].leo)
        if candidate <= self._hw:
            return False
        self._hw = candidate
        assert self._log_start_offset <= self._hw
        assert self._hw <= leader_leo
        return True

    def maybe_shrink_isr(
        self, now_ms: int, lag_time_max_ms: int, leader_leo: int
    ) -> AlterIsrItem | None:
        """Called periodically (Kafka: every lag_time_max_ms / 2). A follower is out of sync
        if its LEO differs from the leader's and it has not caught up for longer than
        `lag_time_max_ms` (Partition.isFollowerOutOfSync). The leader is never a candidate,
        so the ISR never shrinks below {leader}. Only when no change is in flight; the
        maximal ISR stays the old set until the controller confirms (KIP-497)."""
        assert lag_time_max_ms > 0
        if not self.is_leader or self._phase is not IsrPhase.COMMITTED:
            return None
        out_of_sync = tuple(
            replica_id
            for replica_id in self._isr
            if replica_id != self.local_broker_id
            and self._is_out_of_sync(replica_id, now_ms, lag_time_max_ms, leader_leo)
        )
        if not out_of_sync:
            return None
        new_isr = tuple(r for r in self._isr if r not in out_of_sync)
        assert self.local_broker_id in new_isr
        item = self._alter_isr_item(new_isr)
        self._transition(IsrEvent.PROPOSE_SHRINK)
        self._pending = PendingShrinkIsr(isr=self._isr, removed=out_of_sync, sent=item)
        self.check_invariants()
        return item

    def _is_out_of_sync(
        self, replica_id: int, now_ms: int, lag_time_max_ms: int, leader_leo: int
    ) -> bool:
        follower = self._ledger.followers[replica_id]
        if follower.leo == leader_leo:
            return False
        return now_ms - follower.last_caught_up_ms > lag_time_max_ms

    def on_alter_isr_response(
        self,
        error_code: int,
        new_state: LeaderAndIsrState | None,
        sent: AlterIsrItem | None = None,
    ) -> bool:
        """The controller answered the in-flight AlterIsr. Returns whether the ISR state
        changed; `retry_alter_isr` is set when the shell should send the same item again.
        After a success, call `maybe_increment_hw` (a confirmed shrink may free the HW).

        A response that does not match the in-flight change (`sent` given and different,
        or nothing in flight because a LeaderAndIsr replaced it) is ignored.

        KIP-497 / Kafka Partition.handleAlterIsrResponse, case by case:
        - NONE: adopt `new_state`'s ISR and partition epoch. If it names another leader
          epoch or an older partition epoch than ours, it is stale: treat as fenced.
        - FENCED_LEADER_EPOCH: a new leader exists; do not retry. The pending change is
          cleared, and no new change is proposed until a LeaderAndIsr arrives.
        - INVALID_UPDATE_VERSION (KIP's INVALID_ISR_VERSION): our partition epoch is old, a
          LeaderAndIsr is probably on its way; same as fenced.
        - UNKNOWN_TOPIC_OR_PARTITION: the topic is being deleted; same as fenced (a
          StopReplica will follow).
        - INVALID_REQUEST: the controller refused the ISR (e.g. it adds a broker the
          controller sees as dead). Cleared back to the committed ISR; a later fetch may
          propose again (as Kafka 3.x does with INELIGIBLE_REPLICA).
        - NOT_CONTROLLER, STALE_BROKER_EPOCH (top-level), REQUEST_TIMED_OUT, transport and
          any other error: nothing was decided; keep the change in flight and retry.
        Clearing a pending change falls back to the committed ISR, which is always safe
        for the HW: the controller only ever shrinks an ISR behind the leader's back, so
        the committed set is a superset of the controller's.
        """
        if not self.is_leader or self._pending is None:
            return False
        if sent is not None and sent != self._pending.sent:
            return False
        self.retry_alter_isr = None
        code = _as_error_code(error_code)
        if code is ErrorCode.NONE:
            return self._accept_alter_isr(new_state)
        if code in _GIVE_UP_AND_AWAIT:
            self._give_up_and_await()
            return True
        if code is ErrorCode.INVALID_REQUEST:
            self._transition(IsrEvent.ALTER_ISR_ABANDONED)
            self._pending = None
            self.check_invariants()
            return True
        self._transition(IsrEvent.ALTER_ISR_RETRY)
        self.retry_alter_isr = self._pending.sent
        return False

    def _accept_alter_isr(self, new_state: LeaderAndIsrState | None) -> bool:
        assert new_state is not None
        stale = (
            new_state.leader_epoch != self._leader_epoch
            or new_state.partition_epoch < self._partition_epoch
            or new_state.leader != self.local_broker_id
        )
        if stale:
            self._give_up_and_await()
            return True
        self._validate_leader_and_isr(new_state)
        self._transition(IsrEvent.ALTER_ISR_ACCEPTED)
        self._pending = None
        self._isr = tuple(new_state.isr)
        self._partition_epoch = new_state.partition_epoch
        self.check_invariants()
        return True

    def _give_up_and_await(self) -> None:
        """The controller refused the change in a way only a LeaderAndIsr resolves. The
        HW keeps counting the maximal ISR of the refused change: the controller may have
        written it (an expansion whose answer was lost, then a later controller decision
        kept the new member), so acknowledging with the smaller committed set could
        acknowledge a record that an ISR member in ZooKeeper lacks. Found by the simulator
        (seed 734): the expansion's answer was lost, the controller shrank another broker
        away on its failure and kept the new member, which then became leader without the
        records the old leader acknowledged with the committed set. Kafka keeps its
        in-flight state in this case too (Partition.handleAlterPartitionError)."""
        assert self._pending is not None
        self._held_maximal = self._pending.maximal_isr
        self._transition(IsrEvent.ALTER_ISR_FENCED)
        self._pending = None
        self.check_invariants()

    def pending_alter_isr_item(self) -> AlterIsrItem | None:
        """The in-flight AlterIsr (e.g. to re-send after a controller failover)."""
        return None if self._pending is None else self._pending.sent

    def _alter_isr_item(self, new_isr: tuple[int, ...]) -> AlterIsrItem:
        assert self.local_broker_id in new_isr
        assert set(new_isr) <= set(self._replicas)
        return AlterIsrItem(
            topic=self.topic,
            partition=self.partition,
            leader_id=self.local_broker_id,
            leader_epoch=self._leader_epoch,
            new_isr=new_isr,
            partition_epoch=self._partition_epoch,
            new_isr_epochs=tuple(-1 if r == self.local_broker_id else self._ledger.followers[r].broker_epoch for r in new_isr),
        )

    # --------------------------------------------------------------- acks=all

    def under_min_isr(self, min_insync_replicas: int) -> bool:
        """Checked before an acks=all append (NOT_ENOUGH_REPLICAS). Like Kafka
        (Partition.appendRecordsToLeader) this uses the committed ISR, not the maximal:
        a pending expansion is not yet a replica the controller could elect."""
        assert min_insync_replicas >= 1
        return len(self._isr) < min_insync_replicas

    def check_enough_replicas_reach_offset(
        self, required_offset: int, min_insync_replicas: int
    ) -> tuple[bool, ErrorCode]:
        """Kafka's checkEnoughReplicasReachOffset for the produce purgatory;
        `required_offset` is the batch's last offset + 1. Done when HW >= it; then
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR fell below min.insync."""
        if self._role is not Role.LEADER:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._hw < required_offset:
            return False, ErrorCode.NONE
        if len(self.maximal_isr) < min_insync_replicas:
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    # ------------------------------------------------------------ follower side

    def follower_update_hw(self, leader_hw: int, local_leo: int) -> bool:
        """From each fetch response: HW = min(leader's HW, own LEO). Never backwards here;
        only `on_truncate` lowers it."""
        if self._role is Role.LEADER:
            raise NotLeaderOrFollowerError("follower_update_hw on the leader")
        candidate = min(leader_hw, local_leo)
        if candidate <= self._hw:
            return False
        self._hw = candidate
        assert self._log_start_offset <= self._hw
        return True

    def on_truncate(self, truncate_to: int, log_start_offset: int | None = None) -> bool:
        """The follower truncated its log to `truncate_to`; the HW cannot exceed it. With
        `log_start_offset`, the log's start as it now is: a truncation below the log start
        (after an unclean election) or a restart at an offset inside a batch restarts the
        log lower, and the state's start follows it down; left above, the HW stayed above
        the log end, which failed every consumer fetch and, woken, ended the broker."""
        assert not self.is_leader
        assert truncate_to >= 0
        moved = False
        if log_start_offset is not None and log_start_offset < self._log_start_offset:
            assert log_start_offset <= truncate_to
            self._log_start_offset = log_start_offset
            moved = True
        if self._hw <= truncate_to:
            return moved
        self._hw = max(truncate_to, self._log_start_offset)
        assert self._hw <= truncate_to
        return True

    def maybe_update_log_start_offset(self, log_start_offset: int) -> bool:
        """Retention or DeleteRecords moved the log start. On a leader it is bounded by the
        HW; a follower restarting from the leader's log start takes HW up with it."""
        if log_start_offset <= self._log_start_offset:
            return False
        if self.is_leader:
            assert log_start_offset <= self._hw
        self._log_start_offset = log_start_offset
        self._hw = max(self._hw, log_start_offset)
        return True

    # -------------------------------------------------------------- internals

    def _require_leader(self) -> None:
        if self._role is not Role.LEADER:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.partition}: broker {self.local_broker_id} is not leader"
            )

    def _transition(self, event: IsrEvent) -> None:
        target = ISR_TRANSITIONS.get((self._phase, event))
        if target is None:
            raise IllegalTransitionError("isr", self._phase, event)
        self._phase = target

    def check_invariants(self) -> None:
        """Dense invariants, one condition per assert (STYLE habit 6)."""
        assert self._log_start_offset >= 0
        assert self._log_start_offset <= self._hw
        replicas = set(self._replicas)
        maximal = self.maximal_isr
        assert replicas.issuperset(self._isr)
        assert replicas.issuperset(maximal)
        assert set(maximal).issuperset(self._isr)
        if self._pending is None:
            assert self._phase in (IsrPhase.COMMITTED, IsrPhase.AWAITING_LEADER_AND_ISR)
        if self._phase is IsrPhase.AWAITING_LEADER_AND_ISR:
            assert self._held_maximal
        if isinstance(self._pending, PendingExpandIsr):
            assert self._phase is IsrPhase.PENDING_EXPAND
            assert self._pending.isr == self._isr
            assert self._pending.new_replica not in self._isr
        if isinstance(self._pending, PendingShrinkIsr):
            assert self._phase is IsrPhase.PENDING_SHRINK
            assert self._pending.isr == self._isr
            assert self._pending.removed
        if self._role is Role.LEADER:
            assert self._leader_id == self.local_broker_id
            assert self.local_broker_id in self._isr
            assert self.local_broker_id in maximal
            assert len(self._ledger.followers) == len(replicas) - 1
            assert replicas.issuperset(self._ledger.followers)
            assert self.local_broker_id not in self._ledger.followers
        if self._role is not Role.LEADER:
            assert self._pending is None
            assert not self._ledger.followers


def _as_error_code(error_code: int) -> ErrorCode | int:
    try:
        return ErrorCode(error_code)
    except ValueError:
        return error_code
