"""Value types and the ISR phase table of a partition replica (split out of
replica_state.py to keep modules small; import them from either module).

See `kafkalite.core.replica_state` for the rules; DESIGN section 5 and KIP-497.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

NO_LEADER = -1
UNKNOWN_OFFSET = -1


@dataclass(frozen=True)
class LeaderAndIsrState:
    """One partition's entry of a LeaderAndIsr request (or an AlterIsr response).
    `partition_epoch` is the state znode's version (KIP-497 CurrentZkVersion)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    controller_epoch: int = 0


@dataclass(frozen=True)
class AlterIsrItem:
    """Effect: ask the controller to change this partition's ISR (KIP-497). The shell
    batches the items of many partitions into one AlterIsr request."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int
    # Per member of `new_isr`, the broker epoch it fetched with as the leader last saw it
    # (-1: unknown, the leader itself). The controller refuses to add a member whose
    # registration is newer: the leader's view of it is its previous incarnation's
    # (KIP-903). Empty from a sender that does not say.
    new_isr_epochs: tuple[int, ...] = ()


@dataclass(frozen=True)
class PendingExpandIsr:
    """AlterIsr adding `new_replica` is in flight. Expanding is always safe to assume, so the
    maximal ISR counts the new member at once (the HW waits for it)."""

    isr: tuple[int, ...]
    new_replica: int
    sent: AlterIsrItem

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.isr + (self.new_replica,)


@dataclass(frozen=True)
class PendingShrinkIsr:
    """AlterIsr removing `removed` is in flight. Shrinking is not safe to assume until the
    controller confirms (an evicted replica could become leader), so the maximal ISR stays
    the old, larger committed set."""

    isr: tuple[int, ...]
    removed: tuple[int, ...]
    sent: AlterIsrItem

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.isr


@dataclass(frozen=True)
class FollowerFetchResult:
    """Effects of one follower fetch: whether the HW moved (complete delayed produces and
    fetches keyed by this partition) and an AlterIsr to send, if the follower joined."""

    hw_changed: bool
    alter_isr: AlterIsrItem | None
    # The follower's log start moved (it followed a DeleteRecords): the low watermark may
    # have, so waiting DeleteRecords are checked.
    log_start_changed: bool = False


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica.scala)."""

    replica_id: int
    leo: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    # The HW the leader last answered this follower with (Kafka's lastSentHighWatermark):
    # the status page's view of the follower's HW. It no longer answers a waiting fetch
    # early (KAFKA-9952; PartitionReplicaState.note_hw_sent).
    last_sent_hw: int = UNKNOWN_OFFSET
    # Its log start as its last fetch said (Kafka's Replica.logStartOffset): the low
    # watermark a DeleteRecords waits on is the least over the ISR.
    log_start_offset: int = UNKNOWN_OFFSET
    # The broker epoch its last fetch carried (KIP-903; -1: not said): which incarnation
    # of the follower the LEO above belongs to.
    broker_epoch: int = -1


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


class IsrPhase(enum.Enum):
    """Where this leader's ISR stands with respect to the controller."""

    COMMITTED = "committed"  # no change in flight
    PENDING_EXPAND = "pending_expand"
    PENDING_SHRINK = "pending_shrink"
    # The controller refused with an error that only a LeaderAndIsr (or StopReplica) can
    # resolve. No change is pending, but none may be proposed either: it would carry the
    # same stale epoch and be refused again (Kafka keeps its in-flight state for this).
    AWAITING_LEADER_AND_ISR = "awaiting_leader_and_isr"


class IsrEvent(enum.Enum):
    PROPOSE_EXPAND = "propose_expand"
    PROPOSE_SHRINK = "propose_shrink"
    ALTER_ISR_ACCEPTED = "alter_isr_accepted"
    ALTER_ISR_RETRY = "alter_isr_retry"
    ALTER_ISR_ABANDONED = "alter_isr_abandoned"
    ALTER_ISR_FENCED = "alter_isr_fenced"
    LEADER_AND_ISR = "leader_and_isr"


_P = IsrPhase
_E = IsrEvent

# The one table of legal ISR transitions (STYLE habit 5).
ISR_TRANSITIONS: dict[tuple[IsrPhase, IsrEvent], IsrPhase] = {
    (_P.COMMITTED, _E.PROPOSE_EXPAND): _P.PENDING_EXPAND,
    (_P.COMMITTED, _E.PROPOSE_SHRINK): _P.PENDING_SHRINK,
    (_P.PENDING_EXPAND, _E.ALTER_ISR_ACCEPTED): _P.COMMITTED,
    (_P.PENDING_SHRINK, _E.ALTER_ISR_ACCEPTED): _P.COMMITTED,
    (_P.PENDING_EXPAND, _E.ALTER_ISR_RETRY): _P.PENDING_EXPAND,
    (_P.PENDING_SHRINK, _E.ALTER_ISR_RETRY): _P.PENDING_SHRINK,
    (_P.PENDING_EXPAND, _E.ALTER_ISR_ABANDONED): _P.COMMITTED,
    (_P.PENDING_SHRINK, _E.ALTER_ISR_ABANDONED): _P.COMMITTED,
    (_P.PENDING_EXPAND, _E.ALTER_ISR_FENCED): _P.AWAITING_LEADER_AND_ISR,
    (_P.PENDING_SHRINK, _E.ALTER_ISR_FENCED): _P.AWAITING_LEADER_AND_ISR,
    (_P.COMMITTED, _E.LEADER_AND_ISR): _P.COMMITTED,
    (_P.PENDING_EXPAND, _E.LEADER_AND_ISR): _P.COMMITTED,
    (_P.PENDING_SHRINK, _E.LEADER_AND_ISR): _P.COMMITTED,
    (_P.AWAITING_LEADER_AND_ISR, _E.LEADER_AND_ISR): _P.COMMITTED,
}
