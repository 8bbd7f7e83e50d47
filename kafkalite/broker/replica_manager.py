"""Replica manager: every partition replica on this broker, and the requests that touch them.

The decisions are the core's (kafkalite.core.replica_manager, run by the simulator too):
role changes from the controller's LeaderAndIsr and StopReplica, the leader's side of
follower fetches, whether a produce may append, AlterIsr proposals (KIP-497, one in flight
per partition). This driver opens and deletes logs, starts and stops fetchers
(kafkalite.broker.fetcher), reads and appends bytes, and parks acks=all produces in the
purgatory until the HW passes the batch.

Runs on the event loop thread. Methods that read state and act on it never await in
between (STYLE habit 3).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Container, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kafkalite.aio import Wakeup
from kafkalite.broker.delayed import DelayedOperations
from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for, fail
from kafkalite.broker.partition import Partition
from kafkalite.clock import monotonic_ms, wall_ms
from kafkalite.core import replica_manager as core_rm
from kafkalite.core.consumer_fetch import ClusterView, ConsumerFetch, ReadSource
from kafkalite.core.delete_records import DeleteRecordsPartitionStatus
from kafkalite.core.fetch_session import FetchSession, FetchSessions
from kafkalite.core.messages import AlterIsrResponse, LeaderAndIsr, StopReplica
from kafkalite.core.purgatory import DelayedFetch, FetchPartitionStatus, FetchProbe, ProducePartitionStatus
from kafkalite.core.replica_selector import ClientMetadata
from kafkalite.core.replica_state import AlterIsrItem
from kafkalite.log.config import LogConfig, parse_cleanup_policy
from kafkalite.log.errors import CorruptBatchError, LogDirFailure
from kafkalite.log.log_manager import LogManager
from kafkalite.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kafkalite.broker.fetcher import FetcherManager
    from kafkalite.broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

# One partition to read (ReplicaManager._read_all): partition, fetch offset, its byte limit,
# current leader epoch, last fetched epoch, the follower's log start (-1: not said).
_ReadRow = tuple[tuple[str, int], int, int, int, int, int]


_TOPIC_LOG_CONFIGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "segment.bytes": ("segment_bytes", int),
    "segment.ms": ("roll_ms", int),
    "retention.ms": ("retention_ms", int),
    "retention.bytes": ("retention_bytes", int),
    "cleanup.policy": ("cleanup_policy", parse_cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", int),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", int),
}


def log_config_for(base: LogConfig, topic_config: Mapping[str, str]) -> LogConfig:
    """The LogConfig of one topic: broker defaults with the topic's overrides (validated
    when the topic was created, kafkalite.config.validate_topic_config)."""
    overrides: dict[str, Any] = {}
    for key, (attr, parse) in _TOPIC_LOG_CONFIGS.items():
        if key in topic_config:
            overrides[attr] = parse(topic_config[key])
    return dataclasses.replace(base, **overrides) if overrides else base


class ReplicaManager:
    """The asyncio driver of the core replica manager: opens and deletes logs, starts and
    stops fetchers, wakes waiters, and reads and appends the bytes the core allows."""

    def __init__(self, broker_id: int, logs: LogManager, log_config: LogConfig, settings: dict[str, Any], metrics: BrokerMetrics):
        self.broker_id = broker_id
        self.logs = logs
        self._recovery_checkpoint_due = False  # _checkpoint_after_truncation
        self.log_config = log_config
        self.settings = settings
        self.metrics = metrics
        self.core = core_rm.ReplicaManager(broker_id, self._open_replica)
        self.partitions: dict[tuple[str, int], Partition] = self.core.replicas  # type: ignore[assignment]
        self.topic_configs = self.core.topic_configs
        self.delayed = DelayedOperations(settings["purgatory.max.size"], self.partitions.get)
        self.fetch_sessions = FetchSessions()  # followers' incremental fetches of what we lead
        self._session_waiters: dict[int, Wakeup] = {}
        self.fetchers: FetcherManager | None = None  # set by the broker
        self.alter_isr_due: Callable[[], None] = lambda: None  # set by the broker: wakes its AlterIsr sender
        # Set by the broker: its metadata cache's view of a partition (live brokers and
        # racks, the controller's ISR) for the consumer-fetch decision (KIP-392).
        self.cluster_view: Callable[[tuple[str, int]], ClusterView] = lambda tp: ClusterView()
        self._hw_checkpoint: dict[tuple[str, int], int] = {}
        # Set by the broker: told of every role change carried out (the group coordinator
        # follows the leadership of the offsets topic's partitions).
        self.on_roles_changed: Callable[[core_rm.RoleChanges], None] = lambda changes: None
        # Set by the broker: a log dir failed under a request (KIP-112); it takes the dir
        # offline (mark_dir_offline) and tells the controller.
        self.on_log_dir_failure: Callable[[LogDirFailure], None] = lambda failure: None
        # Set by the broker: a stored batch failed its CRC when read to be served (issue 14);
        # the replica is quarantined, repaired by truncation and refilled from the leader.
        self.on_replica_corrupt: Callable[[tuple[str, int], int], None] = lambda tp, base_offset: None

    @property
    def broker_epoch(self) -> int:
        return self.core.broker_epoch

    @broker_epoch.setter
    def broker_epoch(self, epoch: int) -> None:
        self.core.broker_epoch = epoch

    @property
    def controller_epoch(self) -> int:
        return self.core.controller_epoch

    @property
    def last_init_controller_epoch(self) -> int:
        return self.core.last_init_controller_epoch

    # -- start-up -----------------------------------------------------------------------
    def load_local_partitions(self) -> None:
        """Open every local log as a replica with no role yet; the controller assigns roles."""
        self._hw_checkpoint = self.logs.read_hw_checkpoint()
        for (topic, p), plog in self.logs.logs().items():
            self.core.add(self._partition(topic, p, plog))

    def _partition(self, topic: str, p: int, plog: Any) -> Partition:
        part = Partition(topic, p, self.broker_id, plog, self._hw_checkpoint.get((topic, p), 0))
        part.listeners.append(self._on_partition_changed)
        part.on_truncated = self._checkpoint_after_truncation
        return part

    def _checkpoint_after_truncation(self, part: Partition) -> None:
        """A log was truncated (KIP-101, or restarted at the leader's log start): its recovery
        point fell, and the recovery checkpoint must say so before records land where the
        truncated ones were. Else a kill -9 before the periodic checkpoint reopened the log
        trusting the segments below the old recovery point, new records included, without
        scanning them: their leader epochs missing from the epoch cache, or misplaced (found
        by a review; Kafka's LogManager.truncateTo checkpoints at once as well). Its first
        dirty offset may have fallen too, and cleaner-offset-checkpoint is rewritten with it
        (Kafka's LogCleaner.maybeTruncateCheckpoint): else the new records below the old
        value would reopen as clean, never mapped by the cleaner. Written on the loop's next
        turn, once for all the truncations of this one (a LeaderAndIsr may truncate
        thousands), before any later answer is read and appended."""
        if self._recovery_checkpoint_due:
            return
        self._recovery_checkpoint_due = True
        try:
            asyncio.get_running_loop().call_soon(self._write_recovery_points_now)
        except RuntimeError:  # no loop (a tool working on the logs directly)
            self._write_recovery_points_now()

    def _write_recovery_points_now(self) -> None:
        self._recovery_checkpoint_due = False
        for write in (self.logs.checkpoint_recovery_points, self.logs.checkpoint_cleaner_offsets):
            try:
                write()
            except LogDirFailure as e:  # that dir goes offline; the others were written
                self.on_log_dir_failure(e)

    def apply_topic_configs(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Topic configs from ZooKeeper (at start-up) or the controller (LeaderAndIsr,
        UpdateMetadata): the core's limits and every local log of the topic follow them.
        Logs opened at start-up had the broker's defaults until now; the log cleaner and
        retention run only after start-up has applied them."""
        for topic, cfg in configs.items():
            self.topic_configs[topic] = dict(cfg)
            self.logs.set_config(topic, log_config_for(self.log_config, cfg))

    def reapply_log_configs(self) -> None:
        """The broker's log defaults changed (dynamic broker configs, issue 16): every local
        log takes its topic's overrides over the new defaults."""
        for topic in {t for t, _p in self.logs.logs()}:
            self.logs.set_config(topic, log_config_for(self.log_config, self.topic_configs.get(topic, {})))

    def _open_replica(self, tp: tuple[str, int], topic_config: Mapping[str, str], fresh: bool) -> Partition:
        """The core's open_replica. `fresh`: the local log is an earlier topic's (its topic
        id differs from the controller's, KIP-516): deleted as StopReplica(delete) deletes
        one, its checkpoint entries with it, before the new empty log is made."""
        if fresh:
            # Its checkpoint entries go once for the whole request (_carry_out, in this same
            # turn of the loop, before the new log can be checkpointed): one rewrite of the
            # dir's files per replaced partition made 1,000 of them take seconds.
            self._delete_local_log(tp)
        cfg = log_config_for(self.log_config, dict(topic_config))
        return self._partition(tp[0], tp[1], self.logs.get_or_create(tp[0], tp[1], cfg))

    def _delete_local_log(self, tp: tuple[str, int]) -> None:
        self._hw_checkpoint.pop(tp, None)
        if self.logs.get(*tp) is not None:
            self.logs.delete_log(*tp)

    def delete_unassigned(self, assigned: set[tuple[str, int]]) -> list[tuple[str, int]]:
        """Seed section E: local partitions no longer assigned to this broker are deleted."""
        gone = [tp for tp in self.partitions if tp not in assigned]
        self._carry_out(self.core.remove_replicas(gone, delete=True))
        return gone

    def mark_dir_offline(self, log_dir: str) -> list[tuple[str, int]]:
        """The dir failed: its replicas go offline here (answered KAFKA_STORAGE_ERROR, never
        reopened), their fetchers stop and their waiters fail. Returns them."""
        tps = self.logs.mark_offline(log_dir)
        self._carry_out(self.core.mark_offline(tps))
        for tp in tps:
            self._hw_checkpoint.pop(tp, None)
        return tps

    def quarantine(self, tp: tuple[str, int]) -> None:
        """A replica found corrupt stops here (like a failed dir's, but its log stays open
        for the repair): no role, no fetcher, waiters fail, KAFKA_STORAGE_ERROR."""
        self._carry_out(self.core.mark_offline([tp]))

    def release(self, tp: tuple[str, int]) -> None:
        """A repaired replica may be opened again (the controller's next LeaderAndIsr)."""
        self.core.offline.discard(tp)

    def _on_partition_changed(self, part: Partition, hw_may_have_moved: bool) -> None:
        self.delayed.wake(part.tp, produce=hw_may_have_moved)
        self._mark_changed(part.tp)

    def min_isr(self, topic: str) -> int:
        cfg = self.topic_configs.get(topic, {})
        return int(cfg.get("min.insync.replicas", self.settings["min.insync.replicas"]))

    # -- controller requests ------------------------------------------------------------
    def handle_leader_and_isr(self, request: LeaderAndIsr) -> dict[str, Any]:
        started = time.monotonic()
        changes = self.core.on_leader_and_isr(request, monotonic_ms())
        self.apply_topic_configs(request.topic_configs)
        self._carry_out(changes)
        took_ms = (time.monotonic() - started) * 1000
        if took_ms > 100:
            log.info("LeaderAndIsr for %d partitions applied in %.0f ms", len(changes.codes), took_ms)
        return {"error": 0, "partitions": [[t, p, code] for (t, p), code in changes.codes]}

    def handle_stop_replica(self, request: StopReplica) -> dict[str, Any]:
        changes = self.core.on_stop_replica(request)
        self._carry_out(changes)
        return {"error": 0, "partitions": [[t, p, code] for (t, p), code in changes.codes]}

    def _carry_out(self, changes: core_rm.RoleChanges) -> None:
        """Execute what the core decided: fetchers first stop, then start; replicas that
        went lose their waiters and, when deleted, their logs."""
        if self.fetchers is not None:
            self.fetchers.remove_partitions(changes.stop_fetching + changes.removed)
            if changes.fetch:
                self.fetchers.add(list(changes.fetch.values()))
        for tp in changes.removed:
            self.delayed.wake(tp)  # waiting produces and fetches learn it is gone
            self._mark_changed(tp)
            if changes.delete:
                log.info("deleting the local replica of %s-%d", *tp)
                self._delete_local_log(tp)
        if (changes.delete and changes.removed) or changes.replaced:
            try:
                self.logs.forget_deleted()  # before a LeaderAndIsr can create one again
            except LogDirFailure as e:
                self.on_log_dir_failure(e)
        for (topic, p), old_id, new_id in changes.replaced:
            log.warning("deleted the local log of %s-%d: it was of topic id %s, an earlier topic of that name; "
                        "the controller's is %s (KIP-516), replicated into a new empty log", topic, p, old_id, new_id)
        for tp in changes.touched:
            self.delayed.wake(tp)
            self._mark_changed(tp)
        if changes.codes or changes.removed:
            self.metrics.partitions_changed(self)
        self.on_roles_changed(changes)

    # -- produce ------------------------------------------------------------------------
    async def append_records(self, acks: int, timeout_ms: int, entries: list[tuple[str, int, bytes]]) -> dict[tuple[str, int], dict[str, Any]]:
        """Append to local leaders; with acks=all wait until the HW passes every batch."""
        results, waiting = self.append_now(acks, entries)
        return await self.wait_appended(results, waiting, timeout_ms)

    def append_now(
        self, acks: int, entries: list[tuple[str, int, bytes]], *, leader_epochs: Mapping[tuple[str, int], int] | None = None,
    ) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[tuple[str, int], ProducePartitionStatus]]:
        """The synchronous part of an append: each batch is in its leader's log (or has its
        error) when this returns, so appends made one after another land in that order.
        `leader_epochs`: append only as the leader in that epoch (NOT_LEADER_OR_FOLLOWER
        otherwise), as the group coordinator writes for the epoch it loaded its groups in.
        Returns the results and, with acks=all, what `wait_appended` waits for."""
        t = wall_ms()  # stamps the log (segment age, timestamps)
        results: dict[tuple[str, int], dict[str, Any]] = {}
        waiting: dict[tuple[str, int], ProducePartitionStatus] = {}
        for topic, p, records in entries:
            tp = (topic, p)
            try:
                min_isr = self.min_isr(topic)
                part = self.core.check_append(tp, acks, min_isr)
                if leader_epochs is not None and part.leader_epoch != leader_epochs[tp]:
                    raise fail(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{p} is led in epoch {part.leader_epoch}, not {leader_epochs[tp]}")
                max_bytes = int(self.topic_configs.get(topic, {}).get("max.message.bytes", self.settings["message.max.bytes"]))
                if records is None or len(records) > max_bytes:
                    raise fail(ErrorCode.MESSAGE_TOO_LARGE if records else ErrorCode.CORRUPT_MESSAGE)
                result, dup = part.append_as_leader(records, now_ms=t)
                if dup is not None:
                    first, last = dup
                    results[tp] = {"error": 0, "base_offset": first, "log_start_offset": part.log_start_offset}
                    if acks == -1:  # answered once the HW passes the original batch
                        waiting[tp] = ProducePartitionStatus(last, part.epoch_at(last), min_isr)
                    continue
                results[tp] = {"error": 0, "base_offset": result.first_offset, "log_start_offset": part.log_start_offset}
                self.metrics.messages_in(topic, result.record_count, len(records))
                if acks == -1:
                    waiting[tp] = ProducePartitionStatus(result.last_offset, part.leader_epoch, min_isr)
            except LogDirFailure as e:
                results[tp] = {"error": error_code_for(e), "base_offset": -1, "log_start_offset": -1}
                self.on_log_dir_failure(e)
            except OPERATING_ERRORS as e:
                results[tp] = {"error": error_code_for(e), "base_offset": -1, "log_start_offset": -1}
        return results, waiting

    async def wait_appended(
        self, results: dict[tuple[str, int], dict[str, Any]], waiting: dict[tuple[str, int], ProducePartitionStatus], timeout_ms: int,
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """acks=all: `results` with the error of each batch the HW did not pass in time."""
        if waiting:
            # The core's DelayedProduce fails a partition whose log no longer holds the
            # batch as appended, even if this broker leads again (guarantee 4).
            outcome = await self.delayed.wait_produce(waiting, timeout_ms)
            for tp, code in outcome.items():
                if code != 0:
                    results[tp]["error"] = code
        return results

    # -- DeleteRecords (KIP-107) ----------------------------------------------------------
    async def delete_records(self, offsets: Mapping[tuple[str, int], int], timeout_ms: int,
                             partition_known: Callable[[tuple[str, int]], bool]) -> dict[tuple[str, int], tuple[int, int]]:
        """Move each partition's log start on this leader (the segments wholly below it go
        at once), then wait until every ISR replica followed it (the low watermark) or
        `timeout_ms`. Per partition: (error code, low watermark)."""
        results: dict[tuple[str, int], tuple[int, int]] = {}
        waiting: dict[tuple[str, int], DeleteRecordsPartitionStatus] = {}
        for tp, offset in offsets.items():
            try:
                part, target = self.core.delete_records_target(tp, offset, partition_known=partition_known(tp),
                                                               deletion_allowed=_log_deletion_allowed)
                assert isinstance(part, Partition)
                if part.advance_log_start(target):
                    log.info("DeleteRecords: the log start of %s-%d is now %d", tp[0], tp[1], part.log_start_offset)
                waiting[tp] = DeleteRecordsPartitionStatus(target)
            except LogDirFailure as e:
                results[tp] = (error_code_for(e), -1)
                self.on_log_dir_failure(e)
            except OPERATING_ERRORS as e:
                results[tp] = (error_code_for(e), -1)
        if waiting:
            results.update(await self.delayed.wait_delete_records(waiting, timeout_ms))
        return results

    def apply_retention(self, now_ms: int) -> int:
        """Roll aged segments and delete those past retention (Log.delete_retained_segments),
        never one holding an offset at or above the HW, as Kafka bounds it; the replicas'
        state and producer state follow the log start. Returns how many segments went."""
        deleted = 0
        for tp, plog in self.logs.logs().items():
            plog.maybe_roll(now_ms)
            part = self.partitions.get(tp)
            n = plog.delete_retained_segments(now_ms, upper_offset=None if part is None else part.hw)
            if n and part is not None:
                part.after_log_start_moved()
            deleted += n
        return deleted

    # -- fetch (consumers and followers) ------------------------------------------------
    def read_partition(
        self, tp: tuple[str, int], fetch_offset: int, max_bytes: int, *, replica_id: int,
        current_leader_epoch: int = -1, last_fetched_epoch: int = -1, min_one: bool = True,
        client: ClientMetadata | None = None, follower_log_start: int = -1, follower_broker_epoch: int = -1,
        again: bool = False,
    ) -> dict[str, Any]:
        """One partition of a Fetch / ReplicaFetch; never raises operating errors. For a
        consumer, `client` is its metadata (Fetch v11+) and the core decides who serves
        (`served_as`: leader, follower, or a redirect to `preferred_read_replica`). `again`:
        a follower's fetch that read this partition before it waited, read once more (the
        core's follower_fetch with `read_again`: an in-sync follower's state is not updated
        twice)."""
        part = self.partitions.get(tp)
        out: dict[str, Any] = {"error": 0, "hw": -1, "log_start": -1, "leo": -1, "records": b"",
                               "preferred_read_replica": -1, "served_as": None}
        try:
            if replica_id >= 0:
                now = monotonic_ms()
                previous_leo = None if again else _follower_leo(part, replica_id)  # (a read again: timed at the first read)
                decision = self.core.follower_fetch(tp, replica_id, fetch_offset, current_leader_epoch, last_fetched_epoch, now,
                                                    follower_log_start, follower_broker_epoch, read_again=again)
                assert part is not None
                if decision.diverging is not None:
                    out.update(diverging_epoch=decision.diverging.epoch, diverging_end_offset=decision.diverging.end_offset,
                               hw=part.hw, log_start=part.log_start_offset, leo=part.leo)
                    return out
                quotas = self.core.quotas
                throttling = bool(quotas.adding)  # replicas being added, under a replication throttle
                if throttling and quotas.leader_throttled(tp, replica_id, replica_id in part.state.isr, now):
                    records = b""  # a replica being added, over leader.replication.throttled.rate
                else:
                    records = part.read(fetch_offset, max_bytes, upper=decision.upper, min_one=min_one)
                    if throttling:
                        quotas.record_leader(tp, replica_id, len(records), now)
                if previous_leo is not None and part.append_times is not None:
                    appended_at = part.append_times.oldest_covered(previous_leo, fetch_offset)
                    if appended_at is not None:
                        self.metrics.replication_catch_up(replica_id, time.monotonic() - appended_at)
                if decision.hw_changed:
                    # What waits on the HW (acks=all produces, consumers' fetches) is
                    # completed. Followers' sessions read the partition at their next
                    # read, but a waiting one is not woken for it: a moved HW alone
                    # answers no follower (KAFKA-9952); it rides on the next answer.
                    self.delayed.wake(tp)
                    self.fetch_sessions.mark(tp)
                elif decision.log_start_changed:
                    self.delayed.wake(tp, produce=False)  # the low watermark a DeleteRecords waits on may have moved
                if self.core.alter_isr_pending:
                    self.alter_isr_due()
            else:
                fetch = ConsumerFetch(fetch_offset, current_leader_epoch, client)
                part, read = self.core.consumer_fetch(tp, fetch, self.cluster_view(tp), monotonic_ms())
                out["served_as"] = read.source.value
                if read.source is ReadSource.REDIRECT:
                    out.update(hw=part.hw, log_start=part.log_start_offset, leo=part.leo,
                               preferred_read_replica=read.preferred_read_replica)
                    return out
                records = part.read(fetch_offset, max_bytes, upper=read.upper, min_one=min_one)
            out.update(hw=part.hw, log_start=part.log_start_offset, leo=part.leo, records=records)
        except LogDirFailure as e:
            out["error"] = error_code_for(e)
            self.on_log_dir_failure(e)
        except CorruptBatchError as e:
            log.error("%s-%d: %s; this replica stops serving it", tp[0], tp[1], e)
            out["error"] = int(ErrorCode.KAFKA_STORAGE_ERROR)  # clients and followers go to another replica
            self.on_replica_corrupt(tp, e.base_offset)
        except OPERATING_ERRORS as e:
            out["error"] = error_code_for(e)
            if part is not None:
                out.update(hw=part.hw, log_start=part.log_start_offset, leo=part.leo)
        return out

    async def fetch(
        self, requests: list[tuple[tuple[str, int], dict[str, Any]]], *, replica_id: int,
        max_wait_ms: int, min_bytes: int, max_bytes: int, client: ClientMetadata | None = None,
    ) -> list[tuple[tuple[str, int], dict[str, Any]]]:
        """Read every requested partition; park in the fetch purgatory until min_bytes.
        Answered at once, as Kafka does, when a partition errs, diverges or is redirected to
        a preferred read replica; a moved HW alone answers no follower (KAFKA-9952: it
        rides on the next answer with records, or the one at max wait). The bytes served
        are counted per topic and role."""
        result = await self._fetch(requests, replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                   max_bytes=max_bytes, client=client)
        self._count_served(result, replica_id, client)
        if replica_id >= 0:
            self._hw_answered(result, replica_id)
        return result

    def _hw_answered(self, result: list[tuple[tuple[str, int], dict[str, Any]]], replica_id: int) -> None:
        for tp, r in result:
            if r["error"] == 0 and "diverging_epoch" not in r:
                self.core.hw_answered(tp, replica_id, r["hw"])

    def _count_served(self, result: list[tuple[tuple[str, int], dict[str, Any]]], replica_id: int, client: ClientMetadata | None) -> None:
        own_rack = self.settings["broker.rack"]
        if client is None or not client.rack_id or not own_rack:
            locality = "unknown"
        else:
            locality = "same_rack" if client.rack_id == own_rack else "other_rack"
        for (topic, _p), r in result:
            if r["records"]:
                self.metrics.fetch_bytes_served(topic, "replication" if replica_id >= 0 else r["served_as"], len(r["records"]), locality)
            if r["preferred_read_replica"] >= 0:
                self.metrics.preferred_read_replica_redirect(topic)

    def _read_all(
        self, rows: Iterable[_ReadRow], replica_id: int, max_bytes: int, client: ClientMetadata | None,
        follower_broker_epoch: int = -1, read_before: Container[tuple[str, int]] = (),
    ) -> tuple[list[tuple[tuple[str, int], dict[str, Any]]], int, bool]:
        """Read each requested partition once: (results, bytes read, whether something must
        be answered at once: an error, a divergence, a redirect). A row is (partition, fetch
        offset, its byte limit, current leader epoch, last fetched epoch, the follower's log
        start), plain tuples: a follower's session builds them for every append it waits on.
        `read_before`: partitions a follower's waiting fetch read already, read again."""
        budget = max_bytes
        out = []
        total = 0
        answer_now = False
        for tp, fetch_offset, part_max_bytes, current_leader_epoch, last_fetched_epoch, log_start in rows:
            r = self.read_partition(
                tp, fetch_offset, min(part_max_bytes, max(budget, 0)), replica_id=replica_id,
                current_leader_epoch=current_leader_epoch, last_fetched_epoch=last_fetched_epoch,
                min_one=(total == 0), client=client, follower_log_start=log_start,
                follower_broker_epoch=follower_broker_epoch, again=tp in read_before,
            )
            n = len(r["records"])
            total += n
            budget -= n
            answer_now = answer_now or r["error"] != 0 or "diverging_epoch" in r or r["preferred_read_replica"] >= 0
            out.append((tp, r))
        return out, total, answer_now

    async def fetch_in_session(
        self, session: FetchSession, to_read: list[tuple[str, int]], *, max_wait_ms: int, min_bytes: int, max_bytes: int,
        partition_max_bytes: int, follower_broker_epoch: int = -1,
    ) -> list[tuple[tuple[str, int], dict[str, Any]]]:
        """A follower's incremental fetch (kafkalite.core.fetch_session): read what it
        changed and what changed here; if that is not worth answering yet, wait until a
        partition of the session changes (or max_wait passes) and read those, and so on.
        The answer lists only the partitions read. A HW moved by a follower's fetch
        meanwhile wakes no one (read_partition); at max wait what it marked is read once
        more, so the answer carries the HW as it is then."""
        deadline = monotonic_ms() + max_wait_ms
        results: dict[tuple[str, int], dict[str, Any]] = {}
        total = 0
        waiter = self._session_waiters.setdefault(session.session_id, Wakeup())
        replica_id = session.replica_id
        try:
            max_wait_passed = False
            while True:
                waiter.clear()
                rows = [(tp, sp.fetch_offset, partition_max_bytes, sp.current_leader_epoch, sp.last_fetched_epoch, sp.log_start_offset)
                        for tp in to_read if (sp := session.partitions.get(tp)) is not None]
                out, _n, answer_now = self._read_all(rows, replica_id, max(max_bytes - total, 0), None, follower_broker_epoch,
                                                     read_before=results)
                for tp, r in out:  # a partition read again replaces its earlier answer
                    previous = results.get(tp)
                    total += len(r["records"]) - (len(previous["records"]) if previous is not None else 0)
                    results[tp] = r
                remaining = deadline - monotonic_ms()
                if max_wait_passed or total >= min_bytes or answer_now or remaining <= 0:
                    break
                max_wait_passed = not await waiter.wait(remaining / 1000)
                to_read = session.take_dirty()
                if max_wait_passed and not to_read:
                    break
        finally:
            if self._session_waiters.get(session.session_id) is waiter:
                del self._session_waiters[session.session_id]
        # A partition read without records although it has some past the fetch offset (the
        # response's byte budget ran out, or a replication throttle held them back) is read
        # again at the next request: the follower's offset does not change, and no append
        # may come to mark it. Marked after the loop, so it never wakes this one.
        for tp, r in results.items():
            sp = session.partitions.get(tp)
            if sp is not None and not r["records"] and r["error"] == 0 and "diverging_epoch" not in r and r["leo"] > sp.fetch_offset:
                session.read_again(tp)
        result = list(results.items())
        self._count_served(result, replica_id, None)
        self._hw_answered(result, replica_id)
        return result

    def _mark_changed(self, tp: tuple[str, int]) -> None:
        """`tp` changed here: the fetch sessions that hold it read it next, now if waiting."""
        for session in self.fetch_sessions.mark(tp):
            waiter = self._session_waiters.get(session.session_id)
            if waiter is not None:
                waiter.set()

    async def _fetch(
        self, requests: list[tuple[tuple[str, int], dict[str, Any]]], *, replica_id: int,
        max_wait_ms: int, min_bytes: int, max_bytes: int, client: ClientMetadata | None,
    ) -> list[tuple[tuple[str, int], dict[str, Any]]]:

        rows = [(tp, req["fetch_offset"], req["max_bytes"], req.get("current_leader_epoch", -1), req.get("last_fetched_epoch", -1),
                 req.get("log_start_offset", -1)) for tp, req in requests]

        def attempt() -> tuple[list[tuple[tuple[str, int], dict[str, Any]]], bool]:
            out, total, answer_now = self._read_all(rows, replica_id, max_bytes, client)
            return out, (total >= min_bytes or answer_now)

        result, done = attempt()
        # Nothing asked (every topic refused by the authorizer, say): answered at once, as
        # Kafka's fetchMessages does, not after max_wait.
        if done or max_wait_ms <= 0 or not requests:
            return result
        from_follower = replica_id >= 0  # followers read to the LEO, from leaders; consumers to the HW

        def probe(tp: tuple[str, int], fetch_offset: int) -> FetchProbe | None:
            part = self.partitions.get(tp)
            if part is None:
                return None
            if from_follower:
                if self.core.quotas.leader_throttled(tp, replica_id, replica_id in part.state.isr, monotonic_ms()):
                    # a replica being added, over its rate: nothing it may have yet
                    return FetchProbe(part.leader_epoch if part.is_leader else None, part.leo, 0)
                return FetchProbe(part.leader_epoch if part.is_leader else None, part.leo, part.log.bytes_available(fetch_offset, part.leo),
                                  log_start_offset=part.log_start_offset)
            # A consumer may be served by a follower too (Fetch v11+, KIP-392); it waits
            # for the HW of whichever replica serves it, and up to the log end.
            serving = part.is_leader or (client is not None and part.state.is_follower)
            return FetchProbe(part.leader_epoch if serving else None, part.hw, part.log.bytes_available(fetch_offset, part.hw), part.leo,
                              log_start_offset=part.log_start_offset)

        statuses = {tp: FetchPartitionStatus(req["fetch_offset"], req.get("current_leader_epoch", -1)) for tp, req in requests}
        await self.delayed.wait_fetch(DelayedFetch(statuses, min_bytes), max_wait_ms, probe)
        return attempt()[0]

    # -- periodic work ------------------------------------------------------------------
    def maybe_shrink_isr(self) -> None:
        self._idle_followers_caught_up()
        self.core.maybe_shrink_isrs(monotonic_ms(), self.settings["replica.lag.time.max.ms"])
        if self.core.alter_isr_pending:
            self.alter_isr_due()

    def _idle_followers_caught_up(self) -> None:
        """What a fetch of an idle partition did for the ISR, done here for the partitions a
        follower's session holds without reading them each time (kafkalite.core.fetch_session)."""
        reread = []
        for replica_id, tp, fetch_offset, as_of_ms in self.fetch_sessions.idle_caught_up():
            part = self.partitions.get(tp)
            if part is not None and part.is_leader and part.state.follower_still_caught_up(replica_id, fetch_offset, part.leo, as_of_ms):
                reread.append(tp)
        for tp in reread:  # (after the walk: marking wakes the sessions' waiting fetches)
            self._mark_changed(tp)

    def hw_checkpoint_snapshot(self) -> dict[tuple[str, int], int]:
        for tp, part in self.partitions.items():
            self._hw_checkpoint[tp] = part.hw
        return dict(self._hw_checkpoint)

    def on_alter_isr_answer(self, items: list[AlterIsrItem], response: AlterIsrResponse | None) -> None:
        """Apply the controller's answer (None: it did not answer); retries become due."""
        before = {(i.topic, i.partition): len(p.state.isr) for i in items if (p := self.partitions.get((i.topic, i.partition)))}
        for tp in self.core.on_alter_isr_answer(items, response):
            self.delayed.wake(tp)
            self._mark_changed(tp)
        for tp, size in before.items():
            part = self.partitions.get(tp)
            if part is not None and len(part.state.isr) != size:
                self.metrics.isr_change(len(part.state.isr) - size)

    def state_summary(self) -> dict[str, Any]:
        out = {}
        for (topic, p), part in sorted(self.partitions.items()):
            out[f"{topic}-{p}"] = {
                "leader": part.state.leader_id, "leader_epoch": part.leader_epoch,
                "is_leader": part.is_leader, "isr": list(part.state.isr),
                "maximal_isr": list(part.state.maximal_isr) if part.is_leader else None,
                "hw": part.hw, "leo": part.leo, "log_start": part.log_start_offset,
                "low_watermark": part.low_watermark() if part.is_leader else None,
            }
        return out


def _log_deletion_allowed(replica: core_rm.Replica) -> bool:
    """DeleteRecords needs "delete" in the topic's cleanup.policy (Kafka's PolicyViolation)."""
    assert isinstance(replica, Partition)
    return replica.log.config.delete


def _follower_leo(part: Partition | None, replica_id: int) -> int | None:
    """What this leader knew of `replica_id`'s LEO before its fetch; None if it does not
    lead or `replica_id` is no follower (the fetch then fails in the core)."""
    if part is None or not part.is_leader:
        return None
    try:
        return part.state.follower_leo(replica_id)
    except KeyError:
        return None
