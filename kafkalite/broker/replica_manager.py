"""Replica manager: every partition replica on this broker, and the requests that touch them.

Role changes come only from the controller (LeaderAndIsr, StopReplica). Produce appends on
the leader and, for acks=all, parks in the produce purgatory until the HW passes the batch.
Followers fetch through kafkalite.broker.fetcher; the leader side of that fetch updates the
follower's LEO in the core state machine, which moves the HW and proposes ISR expansions.
ISR changes leave this broker only as AlterIsr to the controller (KIP-497), batched.

Runs on the event loop thread. Methods that read state and act on it never await in
between (STYLE habit 3).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafkalite.broker.delayed import DelayedOperations
from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for, fail
from kafkalite.broker.partition import Partition
from kafkalite.clock import monotonic_ms, wall_ms
from kafkalite.core.purgatory import ProducePartitionStatus
from kafkalite.core.replica_state import AlterIsrItem, LeaderAndIsrState
from kafkalite.core.truncation import diverging_epoch_check
from kafkalite.log.config import LogConfig
from kafkalite.log.log_manager import LogManager
from kafkalite.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def log_config_for(base: LogConfig, topic_config: dict[str, str]) -> LogConfig:
    """The LogConfig of one topic: broker defaults with the topic's overrides."""
    import dataclasses

    overrides: dict[str, Any] = {}
    mapping = {"segment.bytes": "segment_bytes", "segment.ms": "roll_ms", "retention.ms": "retention_ms", "retention.bytes": "retention_bytes"}
    for key, attr in mapping.items():
        if key in topic_config:
            overrides[attr] = int(topic_config[key])
    return dataclasses.replace(base, **overrides) if overrides else base


class ReplicaManager:
    def __init__(self, broker_id: int, logs: LogManager, log_config: LogConfig, settings: dict[str, Any], metrics: Any):
        self.broker_id = broker_id
        self.logs = logs
        self.log_config = log_config
        self.settings = settings
        self.metrics = metrics
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.controller_epoch = 0
        self.broker_epoch = -1
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.delayed = DelayedOperations(settings["purgatory.max.size"], self.partitions.get)
        self.fetchers: Any = None  # set by the broker: kafkalite.broker.fetcher.FetcherManager
        self.alter_isr_sink: Callable[[AlterIsrItem], None] = lambda item: None
        self._hw_checkpoint: dict[tuple[str, int], int] = {}
        self.last_init_controller_epoch = -1  # visible in /state: seed D's init LeaderAndIsr arrived

    # -- start-up -----------------------------------------------------------------------
    def load_local_partitions(self) -> None:
        """Open every local log as a replica with no role yet; the controller assigns roles."""
        self._hw_checkpoint = self.logs.read_hw_checkpoint()
        for (topic, p), plog in self.logs.logs().items():
            self._add_partition(topic, p, plog)

    def _add_partition(self, topic: str, p: int, plog: Any) -> Partition:
        part = Partition(topic, p, self.broker_id, plog, self._hw_checkpoint.get((topic, p), 0))
        part.listeners.append(self._on_partition_changed)
        self.partitions[(topic, p)] = part
        return part

    def delete_unassigned(self, assigned: set[tuple[str, int]]) -> list[tuple[str, int]]:
        """Seed section E: local partitions no longer assigned to this broker are deleted."""
        gone = [tp for tp in self.partitions if tp not in assigned]
        for tp in gone:
            self._remove_partition(tp, delete=True)
        return gone

    def _on_partition_changed(self, part: Partition) -> None:
        self.delayed.wake(part.tp)

    def min_isr(self, topic: str) -> int:
        cfg = self.topic_configs.get(topic, {})
        return int(cfg.get("min.insync.replicas", self.settings["min.insync.replicas"]))

    # -- controller requests ------------------------------------------------------------
    def check_controller(self, controller_epoch: int, broker_epoch: int | None) -> None:
        if controller_epoch < self.controller_epoch:
            raise fail(ErrorCode.STALE_CONTROLLER_EPOCH, f"controller epoch {controller_epoch} < {self.controller_epoch}")
        # KIP-380: only an epoch older than ours is stale. A newer one is our own new
        # registration, which the controller can see before our register call returns.
        if broker_epoch is not None and broker_epoch != -1 and broker_epoch < self.broker_epoch:
            raise fail(ErrorCode.STALE_BROKER_EPOCH, f"broker epoch {broker_epoch} is older than ours ({self.broker_epoch})")
        self.controller_epoch = controller_epoch

    def handle_leader_and_isr(self, body: dict[str, Any]) -> dict[str, Any]:
        """Seed section C; ordered by leader epoch per partition, idempotent."""
        self.check_controller(int(body["controller_epoch"]), body.get("broker_epoch"))
        started = time.monotonic()
        for topic, cfg in (body.get("topic_configs") or {}).items():
            self.topic_configs[topic] = dict(cfg)
        t = monotonic_ms()
        results = []
        listed: set[tuple[str, int]] = set()
        become_follower: list[tuple[Partition, LeaderAndIsrState]] = []
        for wire in body["partitions"]:
            topic, p, leader, leader_epoch, isr, partition_epoch, replicas = wire[:7]
            tp = (topic, int(p))
            listed.add(tp)
            st = LeaderAndIsrState(
                leader=int(leader), leader_epoch=int(leader_epoch), isr=tuple(isr),
                partition_epoch=int(partition_epoch), replicas=tuple(replicas),
                controller_epoch=int(body["controller_epoch"]),
            )
            try:
                part = self.partitions.get(tp)
                if part is None:
                    cfg = log_config_for(self.log_config, self.topic_configs.get(topic, {}))
                    part = self._add_partition(topic, int(p), self.logs.get_or_create(topic, int(p), cfg))
                if st.leader_epoch < part.leader_epoch:
                    raise fail(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {st.leader_epoch} < {part.leader_epoch}")
                if st.leader == self.broker_id:
                    if self.fetchers is not None:
                        self.fetchers.remove_partitions([tp])
                    part.make_leader(st, t)
                else:
                    old_leader, old_epoch = part.state.leader_id, part.leader_epoch
                    part.make_follower(st, t)
                    if st.leader >= 0 and (old_leader != st.leader or old_epoch != st.leader_epoch or not self._fetching(tp)):
                        become_follower.append((part, st))
                    elif st.leader < 0 and self.fetchers is not None:
                        self.fetchers.remove_partitions([tp])
                results.append([topic, int(p), 0])
            except OPERATING_ERRORS as e:
                results.append([topic, int(p), error_code_for(e)])
        if become_follower and self.fetchers is not None:
            self.fetchers.add_partitions([(part, st.leader, st.leader_epoch) for part, st in become_follower])
        if body.get("init"):
            self.last_init_controller_epoch = int(body["controller_epoch"])
            for tp in [tp for tp in self.partitions if tp not in listed]:
                log.info("controller failover: %s not in the init LeaderAndIsr, deleting", tp)
                self._remove_partition(tp, delete=True)
        self.metrics.partitions_changed(self)
        took_ms = (time.monotonic() - started) * 1000
        if took_ms > 100:
            log.info("LeaderAndIsr for %d partitions applied in %.0f ms", len(results), took_ms)
        return {"error": 0, "partitions": results}

    def _fetching(self, tp: tuple[str, int]) -> bool:
        return self.fetchers is not None and self.fetchers.has_partition(tp)

    def handle_stop_replica(self, body: dict[str, Any]) -> dict[str, Any]:
        self.check_controller(int(body["controller_epoch"]), body.get("broker_epoch"))
        delete = bool(body.get("delete"))
        results = []
        for topic, p in body["partitions"]:
            self._remove_partition((topic, int(p)), delete=delete)
            if delete:
                self.topic_configs.pop(topic, None)
            results.append([topic, int(p), 0])
        self.metrics.partitions_changed(self)
        return {"error": 0, "partitions": results}

    def _remove_partition(self, tp: tuple[str, int], *, delete: bool) -> None:
        if self.fetchers is not None:
            self.fetchers.remove_partitions([tp])
        part = self.partitions.pop(tp, None)
        if part is not None:
            part.listeners.clear()
            self.delayed.wake(tp)  # waiting produces and fetches learn it is gone
        if delete:
            self._hw_checkpoint.pop(tp, None)
            if self.logs.get(*tp) is not None:
                self.logs.delete_log(*tp)

    # -- produce ------------------------------------------------------------------------
    async def append_records(self, acks: int, timeout_ms: int, entries: list[tuple[str, int, bytes]]) -> dict[tuple[str, int], dict[str, Any]]:
        """Append to local leaders; with acks=all wait until the HW passes every batch."""
        t = wall_ms()  # stamps the log (segment age, timestamps)
        results: dict[tuple[str, int], dict[str, Any]] = {}
        waiting: dict[tuple[str, int], ProducePartitionStatus] = {}
        for topic, p, records in entries:
            tp = (topic, p)
            part = self.partitions.get(tp)
            try:
                if part is None:
                    raise fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp not in self._known_partitions() else ErrorCode.NOT_LEADER_OR_FOLLOWER)
                max_bytes = int(self.topic_configs.get(topic, {}).get("max.message.bytes", self.settings["message.max.bytes"]))
                if records is None or len(records) > max_bytes:
                    raise fail(ErrorCode.MESSAGE_TOO_LARGE if records else ErrorCode.CORRUPT_MESSAGE)
                result, dup = part.append_as_leader(records, min_isr=self.min_isr(topic), acks=acks, now_ms=t)
                if dup is not None:
                    first, last = dup
                    results[tp] = {"error": 0, "base_offset": first, "log_start_offset": part.log_start_offset}
                    if acks == -1:  # answered once the HW passes the original batch
                        waiting[tp] = ProducePartitionStatus(last, part.epoch_at(last), self.min_isr(topic))
                    continue
                results[tp] = {"error": 0, "base_offset": result.first_offset, "log_start_offset": part.log_start_offset}
                self.metrics.messages_in(topic, result.record_count, len(records))
                if acks == -1:
                    waiting[tp] = ProducePartitionStatus(result.last_offset, part.leader_epoch, self.min_isr(topic))
            except OPERATING_ERRORS as e:
                results[tp] = {"error": error_code_for(e), "base_offset": -1, "log_start_offset": -1}
        if waiting:
            # The core's DelayedProduce fails a partition whose log no longer holds the
            # batch as appended, even if this broker leads again (guarantee 4).
            outcome = await self.delayed.wait_produce(waiting, timeout_ms)
            for tp, code in outcome.items():
                if code != 0:
                    results[tp]["error"] = code
        return results

    def _known_partitions(self) -> set[tuple[str, int]]:
        return set(self.partitions)

    # -- fetch (consumers and followers) ------------------------------------------------
    def read_partition(
        self, tp: tuple[str, int], fetch_offset: int, max_bytes: int, *, replica_id: int,
        current_leader_epoch: int = -1, last_fetched_epoch: int = -1, min_one: bool = True,
    ) -> dict[str, Any]:
        """One partition of a Fetch / ReplicaFetch; never raises operating errors."""
        part = self.partitions.get(tp)
        out: dict[str, Any] = {"error": 0, "hw": -1, "log_start": -1, "leo": -1, "records": b""}
        try:
            if part is None:
                raise fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if replica_id < 0 else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            fenced = part.state.validate_leader_epoch(current_leader_epoch)  # not leader, or KIP-320 fencing
            if fenced:
                raise fail(int(fenced), f"{tp}: leader epoch {current_leader_epoch} here at {part.leader_epoch}")
            if replica_id >= 0:
                diverging = diverging_epoch_check(part.log.leader_epoch_cache.epoch_entries(), part.leo, fetch_offset, last_fetched_epoch)
                if diverging is not None:
                    out.update(error=0, diverging_epoch=diverging.epoch, diverging_end_offset=diverging.end_offset, hw=part.hw,
                               log_start=part.log_start_offset, leo=part.leo)
                    return out
            upper = part.leo if replica_id >= 0 else part.hw
            records = part.read(fetch_offset, max_bytes, upper=upper, min_one=min_one)
            if replica_id >= 0:
                _, alter = part.on_follower_fetch(replica_id, fetch_offset, monotonic_ms())
                if alter is not None:
                    self.alter_isr_sink(alter)
            out.update(hw=part.hw, log_start=part.log_start_offset, leo=part.leo, records=records)
        except OPERATING_ERRORS as e:
            out["error"] = error_code_for(e)
            if part is not None:
                out.update(hw=part.hw, log_start=part.log_start_offset, leo=part.leo)
        return out

    async def fetch(
        self, requests: list[tuple[tuple[str, int], dict[str, Any]]], *, replica_id: int,
        max_wait_ms: int, min_bytes: int, max_bytes: int,
    ) -> list[tuple[tuple[str, int], dict[str, Any]]]:
        """Read every requested partition; park in the fetch purgatory until min_bytes."""

        def attempt() -> tuple[list[tuple[tuple[str, int], dict[str, Any]]], bool]:
            budget = max_bytes
            out = []
            total = 0
            errored = False
            for tp, req in requests:
                r = self.read_partition(
                    tp, req["fetch_offset"], min(req["max_bytes"], max(budget, 0)), replica_id=replica_id,
                    current_leader_epoch=req.get("current_leader_epoch", -1),
                    last_fetched_epoch=req.get("last_fetched_epoch", -1),
                    min_one=(total == 0),
                )
                n = len(r["records"])
                total += n
                budget -= n
                errored = errored or r["error"] != 0 or "diverging_epoch" in r
                out.append((tp, r))
            return out, (total >= min_bytes or errored)

        result, done = attempt()
        deadline = time.monotonic() + max_wait_ms / 1000
        keys = [tp for tp, _ in requests]
        while not done:
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0:
                break
            await self.delayed.wait_fetch(keys, left_ms)
            result, done = attempt()
        return result

    # -- periodic work ------------------------------------------------------------------
    def maybe_shrink_isr(self) -> list[AlterIsrItem]:
        t = monotonic_ms()
        lag_max = self.settings["replica.lag.time.max.ms"]
        items = []
        for part in self.partitions.values():
            item = part.maybe_shrink_isr(t, lag_max)
            if item is not None:
                items.append(item)
        return items

    def hw_checkpoint_snapshot(self) -> dict[tuple[str, int], int]:
        for tp, part in self.partitions.items():
            self._hw_checkpoint[tp] = part.hw
        return dict(self._hw_checkpoint)

    def on_alter_isr_response(self, item: AlterIsrItem, error_code: int, new_state: LeaderAndIsrState | None) -> bool:
        """Apply the controller's answer; returns True if the item should be retried."""
        part = self.partitions.get((item.topic, item.partition))
        if part is None:
            return False
        part.state.on_alter_isr_response(error_code, new_state, sent=item)
        if error_code == 0:
            part.maybe_increment_hw()
            self.delayed.wake(part.tp)
        return part.state.retry_alter_isr is not None

    def state_summary(self) -> dict[str, Any]:
        out = {}
        for (topic, p), part in sorted(self.partitions.items()):
            out[f"{topic}-{p}"] = {
                "leader": part.state.leader_id, "leader_epoch": part.leader_epoch,
                "is_leader": part.is_leader, "isr": list(part.state.isr),
                "maximal_isr": list(part.state.maximal_isr) if part.is_leader else None,
                "hw": part.hw, "leo": part.leo, "log_start": part.log_start_offset,
            }
        return out

