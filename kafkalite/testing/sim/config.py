"""Configuration of one simulated run (all durations in virtual ms)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimConfig:
    brokers: int = 3
    partitions: int = 2
    replication_factor: int = 3
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False

    # Timers.
    tick_ms: int = 20  # broker housekeeping: ZK heartbeat, ISR shrink, purgatory, retries
    zk_session_timeout_ms: int = 200
    replica_lag_time_max_ms: int = 150
    fetch_backoff_ms: int = 10
    request_timeout_ms: int = 120
    produce_timeout_ms: int = 400
    controlled_shutdown_retries_max: int = 3

    # Network.
    net_delay_ms_max: int = 12
    net_drop_probability: float = 0.02
    net_duplicate_probability: float = 0.02  # idempotent RPCs only (LeaderAndIsr, AlterIsr)

    # Disk: "always" (every append fsync'd) or "random" (random flush points; a crash
    # loses the unflushed suffix, so the fault injector keeps within the failure budget).
    flush_mode: str = "always"
    flush_probability_per_tick: float = 0.3

    # Faults injected by the random schedule (probability per step).
    fault_probability: float = 0.02
    down_brokers_max: int = 1  # crashed, paused, shut down or isolated at once
    fault_duration_ms_max: int = 600

    # Admin actions interleaved with the faults (probability per step; see faults.py):
    # reassign, cancel a reassignment, remove the highest-numbered partition.
    admin_probability: float = 0.01
    # Also add a partition back after a removal. Off: a removed partition's number comes
    # back as a new partition while a stale copy of the old one may survive on a broker
    # that missed its StopReplica(delete), and the new partition adopts its data (epochs
    # restart at 0; nothing tells the two apart). Needs partition identity (Kafka's topic
    # IDs, KIP-516) or a removal that completes only once every replica confirmed; see
    # tests/sim/test_sim_admin.py::test_a_partition_added_back_can_adopt_a_stale_copy.
    admin_add_partition: bool = False

    # Clients.
    produce_interval_ms_max: int = 25
    produce_inflight_max: int = 4
    consume_interval_ms_max: int = 40
    fetch_records_max: int = 8

    # Consumer groups (issue 10). 0 leaves them out (and every seed's schedule as it was);
    # N > 0 creates `__consumer_offsets` with N partitions (replication factor and
    # min.insync.replicas as above), runs a group coordinator core in every broker and
    # the offset-committing clients of kafkalite.testing.sim.group_clients.
    offsets_partitions: int = 0
    groups: int = 4  # group ids g0, g1, ... each committing for `group_topic_partitions`
    group_topic_partitions: int = 2  # of topic t: one committer per (group, partition)
    group_commit_interval_ms_max: int = 40
    group_fetch_interval_ms_max: int = 80
    offsets_commit_timeout_ms: int = 400  # offsets.commit.timeout.ms
    offsets_load_chunk_records: int = 16  # records per RecordsLoaded (offsets.load.buffer.size)

    # Issue 13: the controller's process watch (kafkalite.broker.broker_watch). A broker
    # whose registration's process is gone (crashed, or restarted under a new epoch) is
    # reported to the controller within process_watch_delay_ms_max, if the network between
    # them is up (a cut link leaves no evidence); a paused one is not (no evidence either).
    # A registration reported gone whose process answers again is reported back.
    process_watch: bool = False
    process_watch_delay_ms_max: int = 10
    # Wrong evidence, to check safety against a zombie: per controller tick, a running
    # broker is reported gone with this probability (until every fault is healed).
    process_watch_false_evidence: float = 0.0

    # Issue 13: incremental replica fetch sessions (kafkalite.core.fetch_session), as the
    # brokers ship. A fetch of a partition that changed on neither side since the leader
    # last read it is answered "idle" without a read; the leader's ISR check refreshes
    # such followers from the session (PartitionReplicaState.follower_still_caught_up).
    fetch_sessions: bool = True

    # Controller failover elects away from ISR members that re-registered after the
    # partition state was written (kafkalite.core.controller, Controller._fence_bounced).
    failover_detects_bounced_brokers: bool = True

    # Deliberately broken variants, to show the checker can fail.
    bug_truncate_to_hw: bool = False  # seed section C's "truncate to HW" instead of KIP-101
    # The simulated group driver reports an offsets append completed as soon as the leader
    # wrote it (acks=1), so commits are acknowledged before they are replicated.
    bug_offsets_acks_leader: bool = False

    def __post_init__(self) -> None:
        assert self.brokers >= self.replication_factor >= 1
        assert 1 <= self.min_insync_replicas <= self.replication_factor
        assert self.flush_mode in ("always", "random")
        assert self.replica_lag_time_max_ms > self.tick_ms
        assert self.zk_session_timeout_ms > self.tick_ms
        assert self.offsets_partitions >= 0
        assert self.offsets_load_chunk_records > 0
