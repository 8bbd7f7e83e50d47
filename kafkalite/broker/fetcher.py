"""Follower side of replication: one fetcher task per source (leader) broker.

Each task fetches many partitions in one ReplicaFetch (seed section G). A partition added
after becoming follower first finds where its log diverges from the leader's by leader
epoch (OffsetsForLeaderEpoch, KIP-101) and truncates only there; a DIVERGING_EPOCH answer in
a fetch does the same. Followers append the leader's bytes unchanged and take
HW = min(leader HW, own LEO).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalite.aio import cancel_and_wait
from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for
from kafkalite.broker.partition import Partition
from kafkalite.broker.peer_messages import OffsetsForLeaderEpochRequest, ReplicaFetchRequest
from kafkalite.clock import monotonic_ms
from kafkalite.core.codes import ErrorCode
from kafkalite.core.consumer_fetch import ClusterView, controller_isr
from kafkalite.core.fetch_session import SessionPartition
from kafkalite.core.quota import ReplicationQuotas
from kafkalite.core.replica_manager import FetchErrorAction, Follow
from kafkalite.log.errors import LogDirFailure
from kafkalite.rpc.transport import RpcClient, RpcError

if TYPE_CHECKING:
    from kafkalite.broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

TP = tuple[str, int]
AWAIT_LEADER_AND_ISR_MS = 1000  # our view or the leader's is stale: retry slowly until LeaderAndIsr


class FetcherTask:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(self, manager: FetcherManager, leader_id: int):
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[TP, Follow] = {}
        self._records_answered_at: float | None = None  # the last answer brought records (turnaround metric)
        # The incremental fetch session with this leader (kafkalite.core.fetch_session):
        # its id and the epoch our next request carries (0, 0: the next request is full and
        # opens one), and what the leader holds of each partition since our last request.
        self._session = (0, 0)
        self._sent: dict[TP, tuple[int, ...]] = {}
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{leader_id}")
        self._task.add_done_callback(lambda t: None if t.cancelled() or t.exception() is None else manager.on_fatal(t.exception()))

    def add(self, follow: Follow) -> None:
        self.partitions[follow.replica.tp] = follow
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
                now = monotonic_ms()
                quotas = self.manager.quotas
                ready = {tp: f for tp, f in self.partitions.items() if not f.truncating and f.ready(now)
                         and not (tp in quotas.adding and quotas.follower_throttled(tp, self._in_sync(f), now))}
                if not ready:
                    await asyncio.sleep(backoff_s)
                    continue
                await self._fetch_once(client, ready)
            except asyncio.CancelledError:
                raise
            except RpcError as e:
                log.debug("fetch from broker %d failed: %s", self.leader_id, e)
                await asyncio.sleep(backoff_s)
            except LogDirFailure as e:  # the dir of a followed partition failed: it goes offline
                self.manager.on_log_dir_failure(e)
            except (*OPERATING_ERRORS, OSError) as e:  # e.g. a batch the log refused
                log.warning("fetch from broker %d failed: %r; retrying", self.leader_id, e)
                await asyncio.sleep(backoff_s)

    def _in_sync(self, f: Follow) -> bool:
        """Whether this replica is in its partition's ISR, for the replication throttle (an
        in-sync replica is never throttled, as in Kafka). A follower hears of its own
        AlterIsr expansion only through UpdateMetadata: by its LeaderAndIsr alone, a replica
        added mid-move stayed throttled until the whole move ended, and acks=all produces
        waited on it for seconds (found by review)."""
        return self.manager.broker_id in controller_isr(f.replica.state, self.manager.cluster_view(f.replica.tp))

    async def _call(self, client: RpcClient, api: str, body: dict[str, Any], sent: dict[TP, Follow], timeout_ms: int):
        for f in sent.values():
            f.in_flight = True
        try:
            return await client.call(api, body, timeout_ms=timeout_ms)  # (a ReplicaFetch carries the broker epoch the leader fences on)
        except RpcError:
            for f in sent.values():
                self._on_partition_error(f, int(ErrorCode.REQUEST_TIMED_OUT))
            raise

    async def _truncate(self, client: RpcClient) -> None:
        """KIP-101: ask the leader where our latest epoch ends, truncate to the divergence."""
        todo = {tp: f for tp, f in self.partitions.items() if f.truncating and f.ready(monotonic_ms())}
        if not todo:
            return
        request = OffsetsForLeaderEpochRequest([(tp[0], tp[1], f.leader_epoch, f.latest_epoch()) for tp, f in todo.items()])
        header, _ = await self._call(client, "OffsetsForLeaderEpoch", request.to_wire(), todo, self.manager.settings["request.timeout.ms"])
        try:
            for topic, p, error, epoch, end_offset in header.get("partitions", []):
                f = todo.get((topic, int(p)))
                if f is None or self.partitions.get(f.replica.tp) is not f:
                    continue
                if error != 0:
                    self._on_partition_error(f, error)
                else:
                    f.on_leader_epoch_end((epoch, end_offset))
        finally:
            _answered(todo)

    def _reset_session(self) -> None:
        self._session = (0, 0)
        self._sent = {}

    async def _fetch_once(self, client: RpcClient, ready: dict[TP, Follow]) -> None:
        """One ReplicaFetch in our session with the leader: a full request opens it; later
        ones carry only the partitions whose fetch state changed, and those we no longer
        fetch (in backoff, truncating, throttled, moved or gone) as `forgotten`."""
        settings = self.manager.settings
        state = {tp: (f.replica.leo, f.leader_epoch, f.latest_epoch(), f.replica.log_start_offset) for tp, f in ready.items()}
        sent = self._sent
        if self._session[0] == 0:
            changed = {tp: SessionPartition(*st) for tp, st in state.items()}
            forgotten: list[TP] = []
        else:
            changed = {tp: SessionPartition(*st) for tp, st in state.items() if sent.get(tp) != st}
            forgotten = [tp for tp in sent if tp not in state]
        request = ReplicaFetchRequest(self.manager.broker_id, self.manager.broker_epoch(), settings["replica.fetch.wait.max.ms"],
                                      settings["replica.fetch.min.bytes"], settings["replica.fetch.response.max.bytes"],
                                      settings["replica.fetch.max.bytes"], *self._session, changed, forgotten)
        if self._records_answered_at is not None:
            self.manager.metrics.replica_fetch_turnaround.observe((), time.monotonic() - self._records_answered_at)
            self._records_answered_at = None
        try:
            header, payload = await self._call(client, "ReplicaFetch", request.to_wire(), ready,
                                               settings["replica.fetch.wait.max.ms"] + settings["request.timeout.ms"])
        except RpcError:
            self._reset_session()  # the leader may or may not have applied it
            raise
        if len(payload):
            self._records_answered_at = time.monotonic()
        error = header.get("error", 0)
        if error in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            log.info("fetch session with broker %d lost (error %d); opening a new one", self.leader_id, error)
            self._reset_session()
            _answered(ready)
            return
        session = header.get("session")
        if error != 0 or session is None:  # (None: a leader without sessions; every request is full)
            self._reset_session()
        else:
            self._session = (int(session[0]), int(session[1]))
            self._sent = state  # the leader's session now holds exactly these
        try:
            if error != 0:
                for f in ready.values():
                    self._on_partition_error(f, int(header["error"]))
                raise RpcError(f"ReplicaFetch refused with error {header['error']}")
            self._apply_fetched(header, payload, ready)
        except Exception:
            # Some partitions' answers were not applied, and the leader reads a session's
            # partition again only when it changes (or its request does): a full request
            # next makes it read them all.
            self._reset_session()
            raise
        finally:
            _answered(ready)

    def _apply_fetched(self, header: dict[str, Any], payload: memoryview, ready: dict[TP, Follow]) -> None:
        for entry in header.get("partitions", []):
            topic, p, error, hw, log_start, leo, pos, size, div_epoch, div_end = entry
            f = ready.get((topic, int(p)))
            if f is None or self.partitions.get(f.replica.tp) is not f:
                self._resend((topic, int(p)))
                continue  # removed or re-added while the fetch was in flight
            if error != 0:
                self._on_partition_error(f, error, leader_log_start=log_start, leader_leo=leo)
            elif div_epoch is not None:
                f.on_leader_epoch_end((div_epoch, div_end))
            else:
                part = f.replica
                assert isinstance(part, Partition)
                try:
                    part.append_as_follower(bytes(payload[pos : pos + size]) if size else b"", hw)
                except LogDirFailure:
                    raise  # the dir goes offline (_run), and every partition is asked again
                except OPERATING_ERRORS as e:
                    # This partition's records were refused (offsets that do not follow our
                    # log, say): it backs off alone. Raised, it ended the answer, and the
                    # partitions after it in every answer were never applied either.
                    log.warning("%s-%d: the fetched records could not be appended: %r", topic, p, e)
                    self._on_partition_error(f, error_code_for(e))
                    continue
                # Follow the leader's log start (DeleteRecords): never above our own HW.
                part.advance_log_start(min(log_start, part.hw))
                part.lag_behind_leader = max(leo - part.leo, 0)
                self.manager.quotas.record_follower(part.tp, size, monotonic_ms())
                f.on_fetched(hw)
                self.manager.on_fetched(part.tp, max(leo - part.leo, 0))

    def _resend(self, tp: TP) -> None:
        """What the leader answered for `tp` was not applied (an error, or the partition
        moved or was re-added meanwhile). The leader's session reads a partition again only
        when it changes or the request does, so the next request names it again (or, if we
        no longer fetch it from this leader, forgets it), whatever its state: without this a
        partition whose state did not move would wait for the leader's next append."""
        if tp in self._sent:
            self._sent[tp] = _UNAPPLIED

    def _on_partition_error(self, f: Follow, error: int, *, leader_log_start: int = -1, leader_leo: int = -1) -> None:
        self._resend(f.replica.tp)
        settings = self.manager.settings
        action = f.on_error(error, monotonic_ms(), backoff_ms=settings["replica.fetch.backoff.ms"],
                            await_leader_and_isr_ms=AWAIT_LEADER_AND_ISR_MS, leader_log_start=leader_log_start, leader_leo=leader_leo)
        if action is FetchErrorAction.RESTART_AT_LEADER_LOG_START:
            part = f.replica
            assert isinstance(part, Partition)
            log.warning("%s: our LEO %d is below the leader's log start %d; restarting there", part.tp, part.leo, leader_log_start)
            part.truncate_fully_and_start_at(leader_log_start)


_UNAPPLIED: tuple[Any, ...] = ()  # a sent state no fetch state equals (FetcherTask._resend)


def _answered(sent: dict[TP, Follow]) -> None:
    """The request is over: a partition the answer did not mention (or that failed on the
    way) may be fetched again."""
    for f in sent.values():
        f.in_flight = False


class FetcherManager:
    def __init__(self, settings: dict[str, Any], client_for: Callable[[int], RpcClient | None], broker_epoch: Callable[[], int],
                 metrics: BrokerMetrics, on_fatal: Callable[[BaseException], None]):
        self.settings = settings
        self.on_fatal = on_fatal  # a fetcher that failed on a bug ends the process, never replication silently
        self.on_log_dir_failure: Callable[[LogDirFailure], None] = lambda failure: None  # set by the broker
        self.client_for = client_for
        self.broker_epoch = broker_epoch
        self.metrics = metrics
        self.fetchers: dict[int, FetcherTask] = {}
        self._where: dict[TP, int] = {}
        self.broker_id = -1
        self.quotas = ReplicationQuotas(-1)  # the replica manager's, attached by the broker
        # The metadata cache's view of a partition (its ISR as the controller last said),
        # attached by the broker.
        self.cluster_view: Callable[[TP], ClusterView] = lambda tp: ClusterView()

    def has_partition(self, tp: TP) -> bool:
        return tp in self._where

    def add(self, follows: list[Follow]) -> None:
        for f in follows:
            tp = f.replica.tp
            self.remove_partitions([tp])
            fetcher = self.fetchers.get(f.leader)
            if fetcher is None:
                fetcher = self.fetchers[f.leader] = FetcherTask(self, f.leader)
            fetcher.add(f)
            self._where[tp] = f.leader

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
