"""Where one partition of a consumer's Fetch is served, and how far it may read
(KIP-392 fetch from the closest replica, with KIP-320 epoch fencing; seed 003; DESIGN 5).

The decision, as Kafka's ReplicaManager.readFromLocalLog / findPreferredReadReplica and
Partition.fetchRecords make it:

- Every replica checks the request's `current_leader_epoch` against the leader epoch it
  knows: older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (the client refreshes its
  metadata). A replica with no role yet answers NOT_LEADER_OR_FOLLOWER.
- The leader of a Fetch v11+ (which carries the client's rack) asks the selector to choose
  among the replicas that could serve the fetch offset now: itself, and the followers that
  are alive, in the ISR, and hold the fetch offset (Kafka 3.x leaves lagging replicas out,
  or a consumer could follow a lagging follower for ever). If it chooses another broker, the
  leader reads nothing and names it (`REDIRECT`, `preferred_read_replica`).
- A follower serves a Fetch v11+ (older versions only reach leaders, as Kafka's
  `fetchOnlyFromLeader`) while it is in the controller's ISR, below its own HW:
  - at or below its HW: the records below the HW (none at the HW; the fetch waits);
  - above its HW but within its log: no records yet. Kafka does the same (its log read
    stops at the HW and the delayed fetch waits for it). This is the common case just
    after a redirect: the follower learns each HW with the leader's next answer (the next
    records, or at most replica.fetch.wait.max.ms later), so a consumer at the tail sent
    here by the leader is briefly ahead of this follower's HW;
    an error would send it back to the leader, which would send it here again;
  - above its log end: OFFSET_NOT_AVAILABLE. The offset may well exist on the leader (this
    follower lags), so an out-of-range answer would be wrong here; librdkafka and the Java
    consumer go back to the leader on it and back off;
  - out of the ISR (it lags, or the controller removed it): NOT_LEADER_OR_FOLLOWER, and the
    client goes back to the leader, which will not choose it again until it is back in.
- Below the log start, or (leader) above the log end: OFFSET_OUT_OF_RANGE.

Pure and synchronous: the replica manager passes the replica's state, offsets, the
metadata cache's view and `now_ms`; typed errors (kafkalite.core.codes) are raised.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkalite.core.codes import (
    FENCING_ERRORS,
    ErrorCode,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
)
from kafkalite.core.replica_selector import ClientMetadata, PartitionView, ReplicaSelector, ReplicaView
from kafkalite.core.replica_state import PartitionReplicaState

TP = tuple[str, int]

class ReadSource(enum.Enum):
    LEADER = "leader"  # read here, as the leader, below the HW
    FOLLOWER = "follower"  # read here, as a follower, below this follower's HW
    REDIRECT = "redirect"  # read nothing: the client should fetch from the preferred read replica


@dataclass(frozen=True)
class ConsumerFetch:
    """One partition of a consumer's Fetch, as the decision needs it."""

    fetch_offset: int
    current_leader_epoch: int = -1  # -1: the client sent none (Fetch < v9)
    client: ClientMetadata | None = None  # None: Fetch < v11, served by leaders only


@dataclass(frozen=True)
class ClusterView:
    """What this broker's metadata cache (the controller's UpdateMetadata) says."""

    racks: Mapping[int, str | None] = field(default_factory=dict)  # live brokers -> rack
    partition_known: bool = False  # the partition exists in the cluster
    isr: tuple[int, ...] | None = None  # the controller's ISR of the partition, if known
    isr_leader_epoch: int = -1  # the leader epoch that ISR came with


@dataclass(frozen=True)
class ConsumerRead:
    """The decision: where the read happens and the offset it stops below (this replica's
    HW); for REDIRECT, the broker the client should fetch from instead."""

    source: ReadSource
    upper: int
    preferred_read_replica: int = -1

    def __post_init__(self) -> None:
        assert self.upper >= 0
        assert (self.source is ReadSource.REDIRECT) == (self.preferred_read_replica >= 0)


def decide_consumer_read(
    tp: TP,
    state: PartitionReplicaState,
    *,
    log_start_offset: int,
    hw: int,
    leo: int,
    fetch: ConsumerFetch,
    cluster: ClusterView,
    selector: ReplicaSelector | None,
    now_ms: int,
) -> ConsumerRead:
    """Decide one partition of a consumer's Fetch on the replica `state` (see the module
    docstring). Raises NotLeaderOrFollowerError, FencedLeaderEpochError,
    UnknownLeaderEpochError, OffsetOutOfRangeError or OffsetNotAvailableError."""
    assert 0 <= log_start_offset <= leo
    assert 0 <= hw <= leo
    code = state.check_current_leader_epoch(fetch.current_leader_epoch)
    if code != ErrorCode.NONE:
        raise FENCING_ERRORS[code](f"{tp[0]}-{tp[1]}: leader epoch {fetch.current_leader_epoch} here at {state.leader_epoch}")
    if fetch.fetch_offset < log_start_offset:
        raise OffsetOutOfRangeError(f"offset {fetch.fetch_offset} is below the log start {log_start_offset} of {tp[0]}-{tp[1]}")
    if state.is_leader:
        return _leader_read(tp, state, hw=hw, leo=leo, fetch=fetch, cluster=cluster, selector=selector, now_ms=now_ms)
    return _follower_read(tp, state, hw=hw, leo=leo, fetch=fetch, cluster=cluster)


def _leader_read(tp: TP, state: PartitionReplicaState, *, hw: int, leo: int, fetch: ConsumerFetch,
                 cluster: ClusterView, selector: ReplicaSelector | None, now_ms: int) -> ConsumerRead:
    if fetch.fetch_offset > leo:
        raise OffsetOutOfRangeError(f"offset {fetch.fetch_offset} is above the log end {leo} of {tp[0]}-{tp[1]}")
    if fetch.client is not None and selector is not None:
        view = partition_view(state, leader_leo=leo, fetch_offset=fetch.fetch_offset, racks=cluster.racks, now_ms=now_ms)
        chosen = selector.select(tp, fetch.client, view)
        preferred = preferred_read_replica(view, chosen)
        if preferred >= 0:
            return ConsumerRead(ReadSource.REDIRECT, hw, preferred)
    return ConsumerRead(ReadSource.LEADER, hw)


def _follower_read(tp: TP, state: PartitionReplicaState, *, hw: int, leo: int, fetch: ConsumerFetch,
                   cluster: ClusterView) -> ConsumerRead:
    assert state.is_follower
    if fetch.client is None:
        raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]}: a Fetch before v11 is served by the leader only")
    if state.local_broker_id not in controller_isr(state, cluster):
        raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]}: broker {state.local_broker_id} is out of the ISR")
    if fetch.fetch_offset > leo:
        raise OffsetNotAvailableError(f"{tp[0]}-{tp[1]}: offset {fetch.fetch_offset} is not yet on follower "
                                      f"{state.local_broker_id} (log end {leo})")
    return ConsumerRead(ReadSource.FOLLOWER, hw)


def controller_isr(state: PartitionReplicaState, cluster: ClusterView) -> tuple[int, ...]:
    """The ISR a follower believes in: the metadata cache's, unless the LeaderAndIsr this
    replica applied is newer (the controller tells a follower about AlterIsr changes only
    through UpdateMetadata; a new leader epoch comes by LeaderAndIsr first)."""
    if cluster.isr is not None and cluster.isr_leader_epoch >= state.leader_epoch:
        return cluster.isr
    return state.isr


def partition_view(state: PartitionReplicaState, *, leader_leo: int, fetch_offset: int,
                   racks: Mapping[int, str | None], now_ms: int) -> PartitionView:
    """The leader's view for the selector (Kafka's findPreferredReadReplica): the leader,
    and every follower that is alive (in `racks`), in the committed ISR, and whose log as
    last fetched (its log start to its log end) holds `fetch_offset`."""
    assert state.is_leader
    me = state.local_broker_id
    leader = ReplicaView(me, racks.get(me), leader_leo, 0)
    views = [leader]
    for replica_id in state.isr:
        if replica_id == me or replica_id not in racks:
            continue
        follower = state.follower_state(replica_id)
        # It holds `fetch_offset`: below its log end, and not below its log start (its own
        # retention may have deleted more than ours: redirected there, a consumer from the
        # earliest offset got OFFSET_OUT_OF_RANGE, reset, and was redirected again).
        if follower.leo < fetch_offset or not 0 <= follower.log_start_offset <= fetch_offset:
            continue
        since_ms = max(0, now_ms - follower.last_caught_up_ms)
        views.append(ReplicaView(replica_id, racks[replica_id], follower.leo, since_ms))
    return PartitionView(tuple(sorted(views, key=lambda v: v.broker_id)), leader)


def preferred_read_replica(view: PartitionView, chosen: ReplicaView | None) -> int:
    """The broker to name in the response, or -1: the leader serves when the selector has no
    preference, chose the leader, or chose a replica outside the view (a plug-in's mistake;
    only replicas that can serve the fetch may be named)."""
    if chosen is None or view.leader is None or chosen.broker_id == view.leader.broker_id:
        return -1
    if chosen.broker_id not in {r.broker_id for r in view.replicas}:
        return -1
    return chosen.broker_id
