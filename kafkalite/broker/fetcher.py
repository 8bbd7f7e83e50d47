"""Follower side of replication: one fetcher task per source (leader) broker.

Each task fetches many partitions in one ReplicaFetch (seed section G). A partition added
after becoming follower first finds where its log diverges from the leader's by leader
epoch (OffsetsForLeaderEpoch, KIP-101) and truncates only there; a DIVERGING_EPOCH answer in
a fetch does the same. Followers append the leader's bytes unchanged and take
HW = min(leader HW, own LEO).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalite.aio import cancel_and_wait
from kafkalite.broker.errors import OPERATING_ERRORS
from kafkalite.broker.partition import Partition
from kafkalite.core.replica_manager import FetchErrorAction, after_fetch_error
from kafkalite.rpc.transport import RpcClient, RpcError

if TYPE_CHECKING:
    from kafkalite.broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

TP = tuple[str, int]
AWAIT_LEADER_AND_ISR_S = 1.0  # our view or the leader's is stale: retry slowly until LeaderAndIsr


@dataclasses.dataclass
class FetchState:
    part: Partition
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0


class FetcherTask:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(self, manager: FetcherManager, leader_id: int):
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[TP, FetchState] = {}
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{leader_id}")
        self._task.add_done_callback(lambda t: None if t.cancelled() or t.exception() is None else manager.on_fatal(t.exception()))

    def add(self, part: Partition, leader_epoch: int) -> None:
        self.partitions[part.tp] = FetchState(part, leader_epoch)
        self._wakeup.set()

    def remove(self, tp: TP) -> None:
        self.partitions.pop(tp, None)

    async def close(self) -> None:
        await cancel_and_wait([self._task])

    async def _run(self) -> None:
        settings = self.manager.settings
        backoff_s = settings["replica.fetch.backoff.ms"] / 1000
        while True:
            try:
                if not self.partitions:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                client = self.manager.client_for(self.leader_id)
                if client is None:
                    await asyncio.sleep(backoff_s)
                    continue
                if any(s.truncating for s in self.partitions.values()):
                    await self._truncate(client)
                ready = {tp: s for tp, s in self.partitions.items() if not s.truncating and s.delayed_until <= time.monotonic()}
                if not ready:
                    await asyncio.sleep(backoff_s)
                    continue
                await self._fetch_once(client, ready)
            except asyncio.CancelledError:
                raise
            except RpcError as e:
                log.debug("fetch from broker %d failed: %s", self.leader_id, e)
                await asyncio.sleep(backoff_s)
            except (*OPERATING_ERRORS, OSError) as e:  # e.g. a batch the log refused, a disk error
                log.warning("fetch from broker %d failed: %r; retrying", self.leader_id, e)
                await asyncio.sleep(backoff_s)

    async def _truncate(self, client: RpcClient) -> None:
        """KIP-101: ask the leader where our latest epoch ends, truncate to the divergence."""
        todo = {tp: s for tp, s in self.partitions.items() if s.truncating}
        req = []
        for tp, s in todo.items():
            req.append([tp[0], tp[1], s.leader_epoch, s.part.log.leader_epoch_cache.latest_epoch])
        header, _ = await client.call(
            "OffsetsForLeaderEpoch", {"broker_epoch": self.manager.broker_epoch(), "partitions": req},
            timeout_ms=self.manager.settings["request.timeout.ms"],
        )
        for topic, p, error, epoch, end_offset in header.get("partitions", []):
            tp = (topic, int(p))
            s = self.partitions.get(tp)
            if s is None or s is not todo.get(tp):
                continue
            if error != 0:
                self._on_partition_error(tp, s, error)
                continue
            self._apply_truncation(s, (epoch, end_offset))

    async def _fetch_once(self, client: RpcClient, ready: dict[TP, FetchState]) -> None:
        settings = self.manager.settings
        req = []
        for tp, s in ready.items():
            req.append([tp[0], tp[1], s.part.leo, s.leader_epoch, s.part.log.leader_epoch_cache.latest_epoch])
        header, payload = await client.call(
            "ReplicaFetch",
            {
                "broker_epoch": self.manager.broker_epoch(),
                "max_wait_ms": settings["replica.fetch.wait.max.ms"],
                "min_bytes": settings["replica.fetch.min.bytes"],
                "max_bytes": settings["replica.fetch.response.max.bytes"],
                "partition_max_bytes": settings["replica.fetch.max.bytes"],
                "partitions": req,
            },
            timeout_ms=settings["replica.fetch.wait.max.ms"] + settings["request.timeout.ms"],
        )
        if header.get("error", 0) != 0:
            raise RpcError(f"ReplicaFetch refused with error {header['error']}")
        for entry in header.get("partitions", []):
            topic, p, error, hw, log_start, leo, pos, size, div_epoch, div_end = entry
            tp = (topic, int(p))
            s = self.partitions.get(tp)
            if s is None or s is not ready.get(tp):
                continue  # removed or re-added while the fetch was in flight
            part = s.part
            if error != 0:
                self._on_partition_error(tp, s, error, leader_log_start=log_start, leader_leo=leo)
                continue
            if div_epoch is not None:
                self._apply_truncation(s, (div_epoch, div_end))
                continue
            records = bytes(payload[pos : pos + size]) if size else b""
            part.append_as_follower(records, hw)
            self.manager.on_fetched(tp, max(leo - part.leo, 0))

    def _apply_truncation(self, s: FetchState, leader_answer: tuple[int, int]) -> None:
        """KIP-101 (the core decides where); an incomplete answer (we lacked the leader's
        epoch) asks again about an older one."""
        s.truncating = not s.part.truncate_by_epoch(leader_answer)

    def _on_partition_error(self, tp: TP, s: FetchState, error: int, *, leader_log_start: int = -1, leader_leo: int = -1) -> None:
        part = s.part
        match after_fetch_error(part, error, leader_log_start, leader_leo):
            case FetchErrorAction.RESTART_AT_LEADER_LOG_START:
                log.warning("%s: our LEO %d is below the leader's log start %d; restarting there", tp, part.leo, leader_log_start)
                part.truncate_fully_and_start_at(leader_log_start)
            case FetchErrorAction.TRUNCATE_AGAIN:
                s.truncating = True
            case FetchErrorAction.AWAIT_LEADER_AND_ISR:
                s.delayed_until = time.monotonic() + AWAIT_LEADER_AND_ISR_S
            case FetchErrorAction.BACK_OFF:
                s.delayed_until = time.monotonic() + self.manager.settings["replica.fetch.backoff.ms"] / 1000


class FetcherManager:
    def __init__(self, settings: dict[str, Any], client_for: Callable[[int], RpcClient | None], broker_epoch: Callable[[], int],
                 metrics: BrokerMetrics, on_fatal: Callable[[BaseException], None]):
        self.settings = settings
        self.on_fatal = on_fatal  # a fetcher that failed on a bug ends the process, never replication silently
        self.client_for = client_for
        self.broker_epoch = broker_epoch
        self.metrics = metrics
        self.fetchers: dict[int, FetcherTask] = {}
        self._where: dict[TP, int] = {}

    def has_partition(self, tp: TP) -> bool:
        return tp in self._where

    def add_partitions(self, items: list[tuple[Partition, int, int]]) -> None:
        for part, leader_id, leader_epoch in items:
            self.remove_partitions([part.tp])
            fetcher = self.fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self.fetchers[leader_id] = FetcherTask(self, leader_id)
            fetcher.add(part, leader_epoch)
            self._where[part.tp] = leader_id

    def remove_partitions(self, tps: list[TP]) -> None:
        for tp in tps:
            leader_id = self._where.pop(tp, None)
            if leader_id is not None:
                self.fetchers[leader_id].remove(tp)

    def on_fetched(self, tp: TP, lag: int) -> None:
        self.metrics.replica_lag(tp, lag)

    async def close(self) -> None:
        for f in list(self.fetchers.values()):
            await f.close()
        self.fetchers.clear()
        self._where.clear()
