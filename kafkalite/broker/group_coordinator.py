"""The asyncio driver of the group coordinator core (kafkalite.core.group_coordinator).

It feeds the core events and carries out its Ready, nothing else (DESIGN.md section 10):
- requests: the group APIs' bodies become typed requests (kafkalite.broker.group_wire) whose
  reply token is a future; the core answers it, maybe much later (a JoinGroup waits for
  the rebalance);
- appends: each AppendRecords becomes one record batch appended to its `__consumer_offsets`
  partition as the leader in the epoch the core names, in the order emitted, then waited for
  with acks=all semantics (`offsets.commit.timeout.ms`); its outcome goes back to the core
  exactly once, as AppendCompleted or AppendFailed;
- loads: a partition is read from its log start to its log end offset in chunks
  (`offsets.load.buffer.size`), control batches left out, as RecordsLoaded events (the
  last one `done`); a leadership change stops a load, a read error retries it;
- leadership: after every LeaderAndIsr or StopReplica carried out, each offsets partition
  named becomes a BecameLeader or BecameFollower for the core;
- time: one task sleeps until the core's next deadline, then polls it. The clock is the
  wall clock in ms (commit and expiry timestamps are stored in records, read by other
  brokers), never going backwards.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalite.aio import spawn
from kafkalite.broker import group_wire as wire
from kafkalite.broker.errors import OPERATING_ERRORS
from kafkalite.clock import monotonic_ms, wall_ms
from kafkalite.core import replica_manager as core_rm
from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_coordinator import GroupCoordinator, GroupCoordinatorConfig, leadership_events
from kafkalite.core.group_messages import (
    OFFSETS_TOPIC,
    AppendCompleted,
    AppendFailed,
    AppendRecords,
    GroupEvent,
    GroupResponse,
    ListGroupsRequest,
    LoadedRecord,
    LoadPartition,
    PartitionsDeleted,
    Ready,
    RecordsLoaded,
)
from kafkalite.core.offsets_records import encode_record
from kafkalite.log.errors import CorruptBatchError, LogDirFailure
from kafkalite.log.records import decode_records, encode_batch, iter_headers
from kafkalite.protocol.codec import RequestHeader
from kafkalite.protocol.schema import ApiKey

if TYPE_CHECKING:
    from kafkalite.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

LOAD_RETRY_BACKOFF_S = 1.0


def coordinator_config(settings: dict[str, Any], offsets_topic_partitions: int) -> GroupCoordinatorConfig:
    """The core's settings from the broker's (Kafka's names); the partition count is the
    offsets topic's own once it exists, so every broker maps a group to the same partition."""
    return GroupCoordinatorConfig(
        offsets_topic_partitions=offsets_topic_partitions,
        group_min_session_timeout_ms=settings["group.min.session.timeout.ms"],
        group_max_session_timeout_ms=settings["group.max.session.timeout.ms"],
        group_max_size=settings["group.max.size"],
        group_initial_rebalance_delay_ms=settings["group.initial.rebalance.delay.ms"],
        offsets_retention_ms=settings["offsets.retention.minutes"] * 60_000,
        offsets_retention_check_interval_ms=settings["offsets.retention.check.interval.ms"],
        offset_metadata_max_bytes=settings["offset.metadata.max.bytes"],
    )


class GroupCoordinatorDriver:
    def __init__(self, config: GroupCoordinatorConfig, replica_manager: ReplicaManager, settings: dict[str, Any],
                 on_fatal: Callable[[BaseException], None]) -> None:
        self.core = GroupCoordinator(config, new_member_uuid=lambda: str(uuid.uuid4()))
        self.rm = replica_manager
        self.commit_timeout_ms = settings["offsets.commit.timeout.ms"]
        self.load_chunk_bytes = settings["offsets.load.buffer.size"]
        self._on_fatal = on_fatal
        # The core takes one clock, for its deadlines (sessions, rebalances, the initial
        # join delay) and for the times it stores (commit timestamps, for retention): the
        # wall clock as it was at start-up, advanced by the monotonic one. A wall-clock step
        # (NTP, a VM resumed) then neither expires every member at once nor freezes the
        # groups' timers until the wall clock catches up.
        self._wall_at_start_ms = wall_ms() - monotonic_ms()
        self._deadline_ms: int | None = None
        self._wakeup: asyncio.Event | None = None
        self._owned: set[asyncio.Task] = set()  # appends waiting for the ISR, loads
        self._loads: dict[int, asyncio.Task] = {}
        # The high watermark of each partition a group here has committed an offset for,
        # refreshed by the broker from the partitions' leaders (per-group lag on /metrics).
        self.end_offsets: dict[tuple[str, int], int] = {}

    @property
    def offsets_topic_partitions(self) -> int:
        return self.core.offsets_topic_partitions

    # -------------------------------------------------------------- the core

    def _clock(self) -> int:
        return self._wall_at_start_ms + monotonic_ms()

    def submit(self, event: GroupEvent) -> None:
        """Hand the core one event and carry out what it decided. A programmer error in the
        core ends the process (its state can no longer be trusted)."""
        try:
            ready = self.core.handle(event, self._clock())
        except Exception as e:  # an assertion or illegal transition in the core: fatal
            self._on_fatal(e)
            raise
        self._carry_out(ready)

    def _carry_out(self, ready: Ready) -> None:
        for note in ready.notes:
            log.log(logging.WARNING if note.level == "warning" else logging.INFO, "group coordinator: %s", note.text)
        for answer in ready.answers:
            future: asyncio.Future = answer.reply_to
            if not future.done():  # the client may have gone (its handler was cancelled)
                future.set_result(answer.response)
        for append in ready.appends:
            self._append(append)
        for load in ready.loads:
            self._start_load(load)
        self._deadline_ms = ready.deadline_ms
        if self._wakeup is not None:
            self._wakeup.set()

    async def run(self) -> None:
        """Polls the core at its deadlines (an essential task of the broker)."""
        self._wakeup = asyncio.Event()
        try:
            while True:
                self._wakeup.clear()
                if self._deadline_ms is None:
                    await self._wakeup.wait()
                    continue
                delay_s = (self._deadline_ms - self._clock()) / 1000
                if delay_s > 0:
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), delay_s)
                        continue  # a new deadline may be earlier
                    except TimeoutError:
                        pass
                self._carry_out(self.core.poll(self._clock()))
        finally:
            for task in list(self._owned):
                task.cancel()

    async def request(self, make: Callable[[asyncio.Future], Any]) -> GroupResponse:
        """One group request (made with its reply future) answered by the core."""
        future = asyncio.get_running_loop().create_future()
        self.submit(make(future))
        return await future

    # -------------------------------------------------------------- leadership

    def on_roles_changed(self, changes: core_rm.RoleChanges) -> None:
        """After the replica manager carried out a LeaderAndIsr or StopReplica."""
        for event in leadership_events(changes, self.rm.partitions.get, self.offsets_topic_partitions):
            self.submit(event)

    def on_partitions_deleted(self, partitions: list[tuple[str, int]]) -> None:
        gone = tuple(tp for tp in partitions if tp[0] != OFFSETS_TOPIC)
        if gone:
            self.submit(PartitionsDeleted(gone))

    # -------------------------------------------------------------- appends

    def _append(self, append: AppendRecords) -> None:
        tp = (OFFSETS_TOPIC, append.partition)
        loop = asyncio.get_running_loop()
        try:
            rows = [(*encode_record(record), ()) for record in append.records]
            batch = encode_batch(rows, base_timestamp=append.timestamp_ms)
        except (struct.error, ValueError, OverflowError):
            # A record the core let through but Kafka's schemas cannot hold (found by the
            # bad-input tests: an int64 overflow, an over-long string). It is a bug, logged
            # with its traceback; the append fails so that the group and this client's
            # request are answered, rather than one client's input ending the broker.
            log.exception("group coordinator: cannot encode the records of append %d", append.append_id)
            loop.call_soon(self.submit, AppendFailed(append.append_id, ErrorCode.UNKNOWN_SERVER_ERROR))
            return
        results, waiting = self.rm.append_now(-1, [(tp[0], tp[1], batch)], leader_epochs={tp: append.leader_epoch})
        if results[tp]["error"] != 0:
            # Reported on the next turn of the loop: the core is not re-entered from its own Ready.
            loop.call_soon(self.submit, AppendFailed(append.append_id, ErrorCode(results[tp]["error"])))
            return
        spawn(self._await_append(append.append_id, tp, results, waiting), name=f"group-append-{append.append_id}", owner=self._owned)

    async def _await_append(self, append_id: int, tp: tuple[str, int], results: dict, waiting: dict) -> None:
        results = await self.rm.wait_appended(results, waiting, self.commit_timeout_ms)
        error = results[tp]["error"]
        self.submit(AppendCompleted(append_id, results[tp]["base_offset"]) if error == 0 else AppendFailed(append_id, ErrorCode(error)))

    # -------------------------------------------------------------- loads

    def _start_load(self, load: LoadPartition) -> None:
        previous = self._loads.pop(load.partition, None)
        if previous is not None:
            previous.cancel()  # overtaken by a newer leadership
        self._loads[load.partition] = spawn(self._load(load), name=f"group-load-{load.partition}", owner=self._owned)

    def _leads(self, load: LoadPartition) -> Any:
        part = self.rm.partitions.get((OFFSETS_TOPIC, load.partition))
        return part if part is not None and part.is_leader and part.leader_epoch == load.leader_epoch else None

    async def _load(self, load: LoadPartition) -> None:
        """Read the partition and hand its records to the core. Stops when the leadership
        moves on (the core ignores this epoch's records then); a read error is retried
        while this broker still leads in the epoch."""
        try:
            while self._leads(load) is not None:
                try:
                    await self._read_partition(load)
                    return
                except LogDirFailure as e:  # the dir goes offline and its leaderships move: this load ends
                    self.rm.on_log_dir_failure(e)
                    return
                except CorruptBatchError as e:  # this replica stops leading; a clean one loads the groups
                    log.error("loading %s-%d: %s; this replica stops serving it", OFFSETS_TOPIC, load.partition, e)
                    self.rm.on_replica_corrupt((OFFSETS_TOPIC, load.partition), e.base_offset)
                    return
                except (*OPERATING_ERRORS, OSError) as e:  # e.g. out of descriptors, a truncation
                    log.warning("loading %s-%d failed (%s); retrying", OFFSETS_TOPIC, load.partition, e)
                    await asyncio.sleep(LOAD_RETRY_BACKOFF_S)
        finally:
            if self._loads.get(load.partition) is asyncio.current_task():
                del self._loads[load.partition]

    async def _read_partition(self, load: LoadPartition) -> None:
        part = self._leads(load)
        assert part is not None
        offset, end = part.log_start_offset, part.leo
        count = 0
        while offset < end:
            part = self._leads(load)
            if part is None:
                return
            # As every read of a replica: a disk error is its dir failing, a flipped bit is
            # found by the batches' CRCs (both were retried here for ever, the groups of the
            # partition left loading).
            data = part.read(offset, self.load_chunk_bytes, upper=end, min_one=True)
            if not data:
                break  # nothing but a gap up to the end
            records: list[LoadedRecord] = []
            for pos, header in iter_headers(data):
                offset = max(offset, header.next_offset)
                if header.is_control:
                    continue
                records.extend(LoadedRecord(r.offset, r.key, r.value) for r in decode_records(data, pos) if r.offset < end)
            count += len(records)
            self.submit(RecordsLoaded(load.partition, load.leader_epoch, tuple(records), done=False))
            await asyncio.sleep(0)  # other requests go on while a big partition loads
        if self._leads(load) is not None:
            log.info("loaded %s-%d: %d records up to offset %d", OFFSETS_TOPIC, load.partition, count, end)
            self.submit(RecordsLoaded(load.partition, load.leader_epoch, (), done=True))

    # -------------------------------------------------------------- lag

    def committed(self) -> dict[str, dict[tuple[str, int], int]]:
        """The committed offsets of the loaded groups coordinated here (a read-only view)."""
        return {g.group_id: {tp: c.offset for tp, c in g.offsets.items()} for g in self.core.groups.values() if g.offsets}

    def lags(self) -> list[tuple[str, tuple[str, int], int]]:
        """(group, partition, lag) for each committed offset whose partition's end is known:
        the high watermark minus the committed offset, never below 0."""
        out = []
        for group, offsets in sorted(self.committed().items()):
            for tp, offset in sorted(offsets.items()):
                end = self.end_offsets.get(tp)
                if end is not None:
                    out.append((group, tp, max(0, end - offset)))
        return out

    # -------------------------------------------------------------- the group APIs

    async def serve(self, header: RequestHeader, body: dict[str, Any], client_host: str,
                    known: Callable[[tuple[str, int]], bool]) -> dict[str, Any]:
        """One group API request (FindCoordinator aside): decoded per version, answered by
        the core, encoded per version. `known`: is a topic partition in the metadata?"""
        v = header.api_version
        match ApiKey(header.api_key):
            case ApiKey.JOIN_GROUP:
                resp = await self.request(lambda f: wire.join_group_request(v, body, reply_to=f, client_id=header.client_id,
                                                                            client_host=client_host))
                return wire.join_group_response(resp)
            case ApiKey.SYNC_GROUP:
                return wire.sync_group_response(await self.request(lambda f: wire.sync_group_request(body, reply_to=f)))
            case ApiKey.HEARTBEAT:
                return wire.heartbeat_response(await self.request(lambda f: wire.heartbeat_request(body, reply_to=f)))
            case ApiKey.LEAVE_GROUP:
                return wire.leave_group_response(v, await self.request(lambda f: wire.leave_group_request(v, body, reply_to=f)))
            case ApiKey.OFFSET_COMMIT:
                future = asyncio.get_running_loop().create_future()
                request, unknown = wire.offset_commit_request(v, body, reply_to=future, known=known)
                if request is None:
                    return wire.offset_commit_response(None, unknown)
                self.submit(request)
                return wire.offset_commit_response(await future, unknown)
            case ApiKey.OFFSET_FETCH:
                future = asyncio.get_running_loop().create_future()
                fetch = wire.offset_fetch_request(body, reply_to=future)
                self.submit(fetch)
                return wire.offset_fetch_response(v, await future, fetch)
            case ApiKey.LIST_GROUPS:
                return wire.list_groups_response(await self.request(lambda f: ListGroupsRequest(f)))
            case ApiKey.DESCRIBE_GROUPS:
                return wire.describe_groups_response(await self.request(lambda f: wire.describe_groups_request(body, reply_to=f)))
            case ApiKey.DELETE_GROUPS:
                return wire.delete_groups_response(await self.request(lambda f: wire.delete_groups_request(body, reply_to=f)))
            case ApiKey.OFFSET_DELETE:
                return wire.offset_delete_response(await self.request(lambda f: wire.offset_delete_request(body, reply_to=f)))
        raise AssertionError(f"not a group API: {header.api_key}")
