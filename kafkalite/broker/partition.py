"""One partition replica on this broker: its log plus the core's ISR/HW state machine.

The replication rules themselves live in kafkalite.core.replica_state (pure); this class
ties them to the on-disk Log and to the asyncio waiters (delayed produce / fetch) that the
replica manager parks on it. Everything here runs on the event loop thread; nothing awaits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafkalite.broker.errors import fail
from kafkalite.core.producer_state import BatchHeader as ProducerBatch
from kafkalite.core.producer_state import ProducerStateTable, VerdictKind, last_sequence
from kafkalite.core.replica_state import AlterIsrItem, LeaderAndIsrState, PartitionReplicaState
from kafkalite.log.log import Log
from kafkalite.log.records import BatchHeader, iter_headers, validate_batches
from kafkalite.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, plog: Log, initial_hw: int):
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = plog
        self.state = PartitionReplicaState(topic, partition, broker_id)
        # Until the controller tells us our role the checkpointed HW is all we know.
        self._initial_hw = min(max(initial_hw, plog.log_start_offset), plog.log_end_offset)
        self.producers = ProducerStateTable()
        self._producers_loaded = False
        self.listeners: list[Callable[[Partition], None]] = []

    # -- identity and offsets ------------------------------------------------------------
    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def is_leader(self) -> bool:
        return self.state.is_leader

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def leo(self) -> int:
        return self.log.log_end_offset

    def epoch_at(self, offset: int) -> int:
        """The leader epoch the log records for `offset`; -1 outside the log."""
        if not self.log.log_start_offset <= offset < self.leo:
            return -1
        return self.log.leader_epoch_cache.epoch_for_offset(offset)

    def check_enough_replicas_reach_offset(self, required_offset: int, min_insync_replicas: int):
        return self.state.check_enough_replicas_reach_offset(required_offset, min_insync_replicas)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def hw(self) -> int:
        # The checkpointed HW until the role's own HW passes it; capped at LEO by truncation.
        return max(self.state.hw, self._initial_hw)

    def _notify(self) -> None:
        for cb in list(self.listeners):
            cb(self)

    # -- role changes (LeaderAndIsr) ----------------------------------------------------
    def make_leader(self, st: LeaderAndIsrState, now_ms: int) -> bool:
        """Become (or stay) leader; the new epoch starts at our LEO (KIP-101)."""
        new_epoch = st.leader_epoch > self.state.leader_epoch or not self.state.is_leader
        changed = self.state.become_leader(st, self.leo, min(self.hw, self.leo), now_ms, self.log.log_start_offset)
        if new_epoch:
            self.log.leader_epoch_cache.assign(st.leader_epoch, self.leo)
            if not self._producers_loaded:
                self._load_producers()
        self._notify()
        return changed

    def make_follower(self, st: LeaderAndIsrState, now_ms: int) -> bool:
        changed = self.state.become_follower(st, now_ms)
        self._notify()
        return changed

    def _load_producers(self) -> None:
        """Rebuild idempotent-producer state from the log's batch headers. Done once per
        replica (first leadership, or after a truncation); afterwards followers keep it
        current as they append, so a failover does not rescan thousands of logs."""
        self.producers = ProducerStateTable.rebuild(
            _producer_batch(h) for h in self.log.iter_batch_headers() if h.producer_id >= 0 and h.base_sequence >= 0
        )
        self._producers_loaded = True

    # -- leader: produce ----------------------------------------------------------------
    def append_as_leader(self, records: bytes, *, min_isr: int, acks: int, now_ms: int):
        """Validate and append a client's batches; returns (AppendResult, duplicate_of).

        Raises NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (before appending, acks=all),
        and the storage engine's typed errors for bad batches.
        """
        if not self.state.is_leader:
            raise fail(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} does not lead {self.topic}-{self.partition}")
        if acks == -1 and self.state.under_min_isr(min_isr):
            raise fail(ErrorCode.NOT_ENOUGH_REPLICAS, f"ISR {list(self.state.isr)} is smaller than min.insync.replicas={min_isr}")
        headers = validate_batches(records)
        idem = headers[0][1] if len(headers) == 1 and headers[0][1].producer_id >= 0 else None
        if idem is not None:
            last_seq = last_sequence(idem.base_sequence, idem.record_count)
            verdict = self.producers.check(idem.producer_id, idem.producer_epoch, idem.base_sequence, last_seq)
            if verdict.kind is VerdictKind.DUPLICATE:
                return None, (verdict.first_offset, verdict.last_offset)
            if verdict.kind is VerdictKind.ERROR:
                raise fail(int(verdict.error), f"producer {idem.producer_id}: {verdict.error.name}")
        result = self.log.append_as_leader(records, self.state.leader_epoch, now_ms)
        if idem is not None:
            self.producers.record(idem.producer_id, idem.producer_epoch, idem.base_sequence, last_seq, result.first_offset, result.last_offset)
        self.maybe_increment_hw()
        self._notify()
        return result, None

    def maybe_increment_hw(self) -> bool:
        if not self.state.is_leader:
            return False
        return self.state.maybe_increment_hw(self.leo)

    # -- leader: follower fetch ---------------------------------------------------------
    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> tuple[bool, AlterIsrItem | None]:
        res = self.state.update_follower_fetch(replica_id, fetch_offset, self.leo, now_ms)
        if res.hw_changed:
            self._notify()
        return res.hw_changed, res.alter_isr

    def maybe_shrink_isr(self, now_ms: int, lag_time_max_ms: int) -> AlterIsrItem | None:
        if not self.state.is_leader:
            return None
        return self.state.maybe_shrink_isr(now_ms, lag_time_max_ms, self.leo)

    # -- follower -----------------------------------------------------------------------
    def append_as_follower(self, records: bytes, leader_hw: int) -> None:
        if records:
            self.log.append_as_follower(records)
            if self._producers_loaded:
                for _, h in iter_headers(records):
                    if h.producer_id >= 0 and h.base_sequence >= 0:
                        b = _producer_batch(h)
                        self.producers.record(b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, b.first_offset, b.last_offset)
        self.follower_update_hw(leader_hw)
        self._notify()

    def follower_update_hw(self, leader_hw: int) -> None:
        if self.state.is_leader:
            return
        self.state.follower_update_hw(leader_hw, self.leo)

    def truncate_to(self, offset: int) -> None:
        if offset < self.leo:
            log.info("truncating %s-%d from %d to %d", self.topic, self.partition, self.leo, offset)
            self._producers_loaded = False  # rebuilt from what is left at the next leadership
        self.log.truncate_to(offset)  # also at the LEO: drops an epoch that starts there
        if not self.state.is_leader:
            self.state.on_truncate(self.leo)
        self._initial_hw = min(self._initial_hw, self.leo)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self._producers_loaded = False
        self.state.on_truncate(self.leo)
        self.state.maybe_update_log_start_offset(offset)
        self._initial_hw = offset

    # -- reads --------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, upper: int, min_one: bool = True) -> bytes:
        """Whole batches from `offset` below `upper` (the HW for consumers, LEO for followers).

        Offsets between HW and LEO give an empty set; above LEO or below the log start
        OFFSET_OUT_OF_RANGE (DESIGN.md section 5).
        """
        if offset < self.log.log_start_offset or offset > self.leo:
            raise fail(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} outside [{self.log.log_start_offset}, {self.leo}] of {self.topic}-{self.partition}")
        if offset >= upper:
            return b""
        return self.log.read(offset, max_bytes, max_offset=upper, min_one=min_one)


def _producer_batch(h: BatchHeader) -> ProducerBatch:
    return ProducerBatch(h.producer_id, h.producer_epoch, h.base_sequence,
                         last_sequence(h.base_sequence, h.record_count), h.base_offset, h.last_offset)
