"""LogManager: every partition log of this broker across its log.dirs. DESIGN.md section 3.

Per log dir it owns recovery-point-offset-checkpoint, replication-offset-checkpoint (the
HW of each partition in that dir), log-start-offset-checkpoint (the log start of each log
whose start DeleteRecords moved inside its first segment, as Kafka writes it) and the
.kafkalite_cleanshutdown marker, which is
removed when the dir is opened and written back by a clean `close`. The marker of a
process that recovered after a crash and stopped cleanly before it could say so in a
registration says `unclean_start`: the next process says it instead.

Anything in a log dir that is not `<topic>-<partition>` (or our own checkpoint files) is
left untouched: the manager never deletes data it does not understand.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from kafkalite.log import checkpoint
from kafkalite.log.config import LogConfig
from kafkalite.log.errors import LogDirError, LogDirFailure
from kafkalite.log.log import Log, parse_partition_dir_name
from kafkalite.log.segment import LogSegment

log = logging.getLogger(__name__)

# The clean-shutdown marker's content when the crash it follows was never announced.
UNCLEAN_START_CARRIED = b"unclean_start\n"

CLEAN_SHUTDOWN_MARKER = ".kafkalite_cleanshutdown"
_DELETE_SUFFIX = "-delete"

TopicPartition = tuple[str, int]


class LogManager:
    def __init__(self, log_dirs: list[str], config: LogConfig,
                 topic_configs: Callable[[str], LogConfig | None] | Mapping[str, LogConfig] | None = None,
                 *, open_files_max: int | None = None) -> None:
        assert log_dirs, "at least one log dir"
        if open_files_max is not None:  # a bound for the whole process (kafkalite.log.open_files)
            LogSegment.files.set_max(open_files_max)
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        assert len(set(self.log_dirs)) == len(self.log_dirs), "log dirs must be distinct"
        self.config = config
        self._topic_configs = topic_configs
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, str] = {}
        # Partitions per log dir, kept as logs come and go: get_or_create picks the emptiest
        # dir without counting every log (a 10,000-partition topic was O(n^2)).
        self._count: dict[str, int] = {d: 0 for d in self.log_dirs}
        self._unsynced: set[TopicPartition] = set()  # created, directory entry not yet fsync'd
        # Log dirs that failed while serving (KIP-112): their logs are closed and forgotten,
        # nothing is created, checkpointed or marked clean there until the broker restarts.
        self.offline_dirs: set[str] = set()
        # Some dir held logs and lacked the clean-shutdown marker: this process recovered
        # them after a crash, and what was not flushed may be gone (each registration of
        # the broker says so: kafkalite.zk.codec.BrokerRegistration.unclean_start).
        self.recovered_unclean = False
        # A registration said so (set by the broker): a clean stop need not carry it on.
        self.unclean_start_announced = False
        # Checkpoints are written by the periodic checkpoint (in a thread, from a snapshot),
        # after a truncation and after deletions (on the loop): one at a time (each file's
        # temporary name is fixed). A recovery point is never written above the log's as it
        # is when written (a snapshot taken before a truncation would raise it again).
        self._checkpoint_write = threading.RLock()
        # Logs deleted whose entries the dir's checkpoint files may still hold: dir -> keys
        # (forget_deleted).
        self._deleted: dict[str, set[TopicPartition]] = {}

    @property
    def online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def mark_offline(self, log_dir: str) -> list[TopicPartition]:
        """The dir failed: close and forget its logs (their files stay as they are, for the
        recovery at the next start); returns their partitions."""
        log_dir = os.path.abspath(log_dir)
        assert log_dir in self.log_dirs, log_dir
        self.offline_dirs.add(log_dir)
        gone = sorted(tp for tp, d in self._dir_of.items() if d == log_dir)
        for tp in gone:
            lg = self._logs.pop(tp)
            del self._dir_of[tp]
            self._unsynced.discard(tp)
            try:
                lg.close()
            except OSError:
                pass  # the dir is failing; nothing more is asked of these files
        self._count[log_dir] = 0
        return gone

    def config_for(self, topic: str) -> LogConfig:
        found = None
        if callable(self._topic_configs):
            found = self._topic_configs(topic)
        elif self._topic_configs is not None:
            found = self._topic_configs.get(topic)
        return found if found is not None else self.config

    # ------------------------------------------------------------------ start-up

    def open_all(self, now_ms: int | None = None) -> None:
        """Open every log in every dir, recovering after an unclean stop. A dir that cannot
        be read or holds the same partition twice raises LogDirError naming it."""
        for log_dir in self.log_dirs:
            self._open_dir(log_dir, now_ms)

    def _open_dir(self, log_dir: str, now_ms: int | None) -> None:
        try:
            os.makedirs(log_dir, exist_ok=True)
            names = sorted(os.listdir(log_dir))
        except OSError as e:
            raise LogDirError(f"cannot read log dir {log_dir}: {e}") from e
        marker = os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)
        clean = os.path.exists(marker)
        # A clean stop of a process that recovered from a crash and never registered: the
        # records that crash lost are still missing, and this process says so instead.
        carried = False
        if clean:
            try:
                with open(marker, "rb") as f:
                    carried = f.read(64) == UNCLEAN_START_CARRIED
            except OSError as e:
                raise LogDirError(f"cannot read {marker}: {e}") from e
        try:
            recovery_points = checkpoint.read_offsets(os.path.join(log_dir, checkpoint.RECOVERY_POINT_CHECKPOINT))
        except checkpoint.CheckpointError as e:
            log.warning("%s; recovering every log in %s from offset 0", e, log_dir)
            recovery_points, clean = {}, False
        try:
            cleaner_points = checkpoint.read_offsets(os.path.join(log_dir, checkpoint.CLEANER_OFFSET_CHECKPOINT))
        except checkpoint.CheckpointError as e:
            log.warning("%s; the log cleaner treats every log in %s as dirty", e, log_dir)
            cleaner_points = {}
        try:
            log_starts = checkpoint.read_offsets(os.path.join(log_dir, checkpoint.LOG_START_OFFSET_CHECKPOINT))
        except checkpoint.CheckpointError as e:
            log.warning("%s; logs in %s start at their first segment", e, log_dir)
            log_starts = {}
        for name in names:
            path = os.path.join(log_dir, name)
            if name.endswith(_DELETE_SUFFIX) and os.path.isdir(path) and _is_our_deleted_dir(name):
                shutil.rmtree(path, ignore_errors=True)  # a delete_log interrupted by a crash
                continue
            parsed = parse_partition_dir_name(name)
            if parsed is None or not os.path.isdir(path):
                continue
            if parsed in self._logs:
                raise LogDirError(f"partition {parsed[0]}-{parsed[1]} is in both {self._dir_of[parsed]} and {log_dir}")
            self._logs[parsed] = Log.open(
                path, self.config_for(parsed[0]), recovery_point=recovery_points.get(parsed, 0),
                clean_shutdown=clean, now_ms=now_ms,
            )
            self._dir_of[parsed] = log_dir
            self._count[log_dir] += 1
            self.recovered_unclean = self.recovered_unclean or not clean or carried
            opened = self._logs[parsed]
            # A checkpointed log start past the end (a crash lost the tail) is clamped to
            # it; one below the first segment is already implied by it.
            opened.maybe_increment_log_start_offset(min(log_starts.get(parsed, 0), opened.log_end_offset))
            first_dirty = cleaner_points.get(parsed, opened.log_start_offset)
            if opened.log_start_offset <= first_dirty <= opened.log_end_offset:
                opened.first_dirty_offset = first_dirty
        if clean:
            # Removed only after every log opened: a crash from here on must recover.
            os.remove(marker)
            checkpoint.fsync_dir(log_dir)

    # ------------------------------------------------------------------ partitions

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None,
                      now_ms: int | None = None) -> Log:
        """The partition's log, creating it in the log dir holding the fewest partitions."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        assert topic and "/" not in topic and topic not in (".", "..")
        assert partition >= 0
        online = self.online_dirs
        if not online:
            raise LogDirError(f"every log dir is offline ({', '.join(self.log_dirs)})")
        log_dir = min(online, key=lambda d: (self._count[d], self.log_dirs.index(d)))
        path = os.path.join(log_dir, f"{topic}-{partition}")
        # Every partition directory in an online log dir was opened at start-up, so this one
        # does not exist (a delete renames its directory first).
        created = Log.new(path, config or self.config_for(topic), now_ms=now_ms)
        # The new log makes its directory at its first append (Log.new), and no fsync of
        # the log dir happens here (10,000 of them made creating a topic take seconds).
        # Until the new directory's entry is durable, a crash may lose it, which is safe: it
        # then holds nothing durable either, because the first flush of its data runs
        # sync_new_dirs (or the log's own flush job fsyncs the log dir first, see
        # Log.parent_dir_unsynced), and a lost empty replica is recreated by the next
        # LeaderAndIsr and caught up by replication like any replica that lost unflushed
        # data (acks=all durability comes from replication, DESIGN.md section 3). The HW
        # checkpoint may name it meanwhile: a HW above a log's end is clamped on load.
        created.parent_dir_unsynced = True
        created.on_dir_made = lambda: self._unsynced.add(key)
        self._logs[key] = created
        self._dir_of[key] = log_dir
        self._count[log_dir] += 1
        return created

    def sync_new_dirs(self) -> int:
        """fsync each log dir that gained partitions since the last call: one fsync per dir
        covers every partition created in it. Returns how many dirs were synced. In the
        event-loop thread; the periodic flush splits it around a thread with
        `dirs_to_sync` / `mark_dirs_synced`."""
        pending = self.dirs_to_sync()
        for log_dir in pending:
            checkpoint.fsync_dir(log_dir)
        self.mark_dirs_synced(pending)
        return len(pending)

    def dirs_to_sync(self) -> dict[str, list[TopicPartition]]:
        """Event-loop thread: the partitions whose directory entry is not yet durable, by
        log dir (a snapshot; partitions created after it wait for the next sync)."""
        pending: dict[str, list[TopicPartition]] = {}
        for key in self._unsynced:
            log_dir = self._dir_of.get(key)
            if log_dir is not None:
                pending.setdefault(log_dir, []).append(key)
        self._unsynced.clear()
        return pending

    def mark_dirs_synced(self, synced: Mapping[str, list[TopicPartition]]) -> None:
        """Event-loop thread, after the fsyncs of `dirs_to_sync`'s snapshot succeeded."""
        for keys in synced.values():
            for key in keys:
                lg = self._logs.get(key)
                if lg is not None:
                    lg.parent_dir_unsynced = False

    def unsync(self, pending: Mapping[str, list[TopicPartition]]) -> None:
        """The fsyncs of a `dirs_to_sync` snapshot failed: those entries are pending again."""
        for keys in pending.values():
            self._unsynced.update(keys)

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and remove a partition's log. The dir is first renamed to
        `<name>.<uuid>-delete` so a crash mid-delete never leaves a half log that loads."""
        key = (topic, partition)
        removed = self._logs.pop(key, None)
        if removed is None:
            return False
        log_dir = self._dir_of.pop(key)
        self._count[log_dir] -= 1
        self._unsynced.discard(key)
        removed.close()
        self._deleted.setdefault(log_dir, set()).add(key)
        if not removed.on_disk:
            return True  # never written: nothing on disk
        doomed = os.path.join(log_dir, f"{topic}-{partition}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
        os.rename(removed.dir, doomed)
        checkpoint.fsync_dir(log_dir)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def forget_deleted(self) -> None:
        """Rewrite the checkpoint files of the dirs where logs were deleted, without them.
        Called after deletions, before anything can create the partition again: a log
        created under the same name would otherwise, after a crash before the next
        periodic checkpoint, load with the deleted log's entries: its log start (its
        first records deleted from disk: acknowledged writes of the new topic lost), its
        recovery point (unflushed segments trusted unscanned), its HW and cleaner point.
        Kafka's LogManager.asyncDelete rewrites the dir's checkpoints too. LogDirFailure
        for a dir whose write fails, after the others."""
        with self._checkpoint_write:
            pending, self._deleted = self._deleted, {}
            failed: LogDirFailure | None = None
            for log_dir, keys in sorted(pending.items()):
                if log_dir in self.offline_dirs:
                    continue
                for name in _OFFSET_CHECKPOINTS:
                    path = os.path.join(log_dir, name)
                    try:
                        entries = checkpoint.read_offsets(path)
                    except checkpoint.CheckpointError:
                        continue  # unreadable: start-up would not use it; the next write replaces it
                    except OSError as e:
                        failed = failed or LogDirFailure(log_dir, e)
                        break
                    if keys.isdisjoint(entries):
                        continue
                    try:
                        checkpoint.write_offsets(path, {k: v for k, v in entries.items() if k not in keys})
                    except OSError as e:
                        failed = failed or LogDirFailure(log_dir, e)
                        break
            if failed is not None:
                raise failed

    # ------------------------------------------------------------------ checkpoints

    def _by_dir(self, offsets: Mapping[TopicPartition, int]) -> dict[str, dict[TopicPartition, int]]:
        grouped: dict[str, dict[TopicPartition, int]] = {d: {} for d in self.online_dirs}
        for key, offset in offsets.items():
            log_dir = self._dir_of.get(key)
            if log_dir is not None:
                grouped[log_dir][key] = offset
        return grouped

    def recovery_points(self) -> dict[TopicPartition, int]:
        """Snapshot on the event-loop thread; write it anywhere with write_recovery_points."""
        return {key: lg.recovery_point for key, lg in self._logs.items()}

    def checkpoint_recovery_points(self) -> None:
        self.write_recovery_points(self.recovery_points())

    def write_recovery_points(self, points: Mapping[TopicPartition, int]) -> None:
        with self._checkpoint_write:
            logs = self._logs
            clamped = {}
            for key, point in points.items():
                lg = logs.get(key)
                clamped[key] = point if lg is None else min(point, lg.recovery_point)
            self._write_offsets(checkpoint.RECOVERY_POINT_CHECKPOINT, clamped)

    def _write_offsets(self, name: str, offsets: Mapping[TopicPartition, int]) -> None:
        """One checkpoint file per online dir; a dir whose write fails does not stop the
        others, and the first such failure is raised after them (LogDirFailure: the
        broker takes that dir offline)."""
        failed: LogDirFailure | None = None
        with self._checkpoint_write:
            for log_dir, entries in self._by_dir(offsets).items():
                try:
                    checkpoint.write_offsets(os.path.join(log_dir, name), entries)
                except OSError as e:
                    failed = failed or LogDirFailure(log_dir, e)
        if failed is not None:
            raise failed

    def _clamped(self, offsets: Mapping[TopicPartition, int], current: Callable[[Log], int]) -> dict[TopicPartition, int]:
        """A snapshot's offsets, none above the log's own as it is now: a snapshot taken
        before a log was deleted and created again (or truncated) names the old one."""
        logs = self._logs
        return {key: offset if (lg := logs.get(key)) is None else min(offset, current(lg)) for key, offset in offsets.items()}

    def log_start_offsets(self) -> dict[TopicPartition, int]:
        """Snapshot on the event-loop thread of every log start that lies above its first
        segment's base (the others need no entry: the segment names say them)."""
        return {key: lg.log_start_offset for key, lg in self._logs.items()
                if lg.log_start_offset > lg.first_segment_base_offset}

    def write_log_start_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        with self._checkpoint_write:
            self._write_offsets(checkpoint.LOG_START_OFFSET_CHECKPOINT, self._clamped(offsets, lambda lg: lg.log_start_offset))

    def cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        """First dirty offset of every log (cleaner-offset-checkpoint), snapshotted here."""
        return {key: lg.first_dirty_offset for key, lg in self._logs.items()}

    def checkpoint_cleaner_offsets(self) -> None:
        self.write_cleaner_checkpoints(self.cleaner_checkpoints())

    def write_cleaner_checkpoints(self, points: Mapping[TopicPartition, int]) -> None:
        """Never above a log's first dirty offset as it is when written: a snapshot taken
        before a truncation lowered it (or before the log was deleted and created again)
        would otherwise raise it again, and after a crash the records appended where the
        truncated ones were would count as clean (never mapped, so a tombstone among them
        could be stamped and dropped while an older value of its key stays)."""
        with self._checkpoint_write:
            self._write_offsets(checkpoint.CLEANER_OFFSET_CHECKPOINT, self._clamped(points, lambda lg: lg.first_dirty_offset))

    def set_config(self, topic: str, config: LogConfig) -> None:
        """A topic's configuration as ZooKeeper holds it, for every local log of the topic
        (start-up opens logs before ZooKeeper is reachable, with the broker's defaults)."""
        for (t, _p), lg in self._logs.items():
            if t == topic:
                lg.config = config

    def write_hw_checkpoint(self, hws: Mapping[TopicPartition, int]) -> None:
        """replication-offset-checkpoint per dir; partitions without a log here are skipped."""
        with self._checkpoint_write:
            self._write_offsets(checkpoint.REPLICATION_OFFSET_CHECKPOINT, self._clamped(hws, lambda lg: lg.log_end_offset))

    def read_hw_checkpoint(self) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            result.update(checkpoint.read_offsets(os.path.join(log_dir, checkpoint.REPLICATION_OFFSET_CHECKPOINT)))
        return result

    # ------------------------------------------------------------------ shutdown

    FLUSH_THREADS = 8

    def flush_all(self) -> None:
        """Flush every log on a few threads (fsync releases the GIL), so a clean shutdown of
        10,000 partitions is not 10,000 serial fsync round trips. The caller (close, at
        shutdown) guarantees nothing else touches the logs meanwhile."""
        self.sync_new_dirs()  # once per dir, not once per new log (Log.parent_dir_unsynced)
        logs = list(self._logs.values())
        with ThreadPoolExecutor(max_workers=self.FLUSH_THREADS, thread_name_prefix="flush") as pool:
            errors = [e for e in pool.map(_flush_one, logs) if e is not None]
        if errors:
            raise LogDirError(f"flush failed for {len(errors)} logs, e.g. {errors[0]}")

    def close(self) -> None:
        """Clean shutdown: flush every log, checkpoint recovery points, close the logs and
        write the clean-shutdown marker in each dir (last, so a crash before it recovers)."""
        self.flush_all()
        self.checkpoint_recovery_points()
        self.write_cleaner_checkpoints(self.cleaner_checkpoints())
        self.write_log_start_offsets(self.log_start_offsets())
        for lg in self._logs.values():
            lg.close()
        content = UNCLEAN_START_CARRIED if self.recovered_unclean and not self.unclean_start_announced else b""
        for log_dir in self.online_dirs:  # an offline dir is recovered at the next start
            checkpoint.write_atomic(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER), content)
        self._logs.clear()
        self._dir_of.clear()
        self._count = {d: 0 for d in self.log_dirs}


# The per-partition offset checkpoints of a log dir (forget_deleted).
_OFFSET_CHECKPOINTS = (checkpoint.RECOVERY_POINT_CHECKPOINT, checkpoint.REPLICATION_OFFSET_CHECKPOINT,
                       checkpoint.LOG_START_OFFSET_CHECKPOINT, checkpoint.CLEANER_OFFSET_CHECKPOINT)


def _is_our_deleted_dir(name: str) -> bool:
    """`<topic>-<partition>.<32 hex>-delete`, as written by delete_log."""
    stem = name[: -len(_DELETE_SUFFIX)]
    head, dot, hex_id = stem.rpartition(".")
    return bool(dot) and len(hex_id) == 32 and all(c in "0123456789abcdef" for c in hex_id) \
        and parse_partition_dir_name(head) is not None



def _flush_one(lg: Log) -> str | None:
    try:
        lg.flush()
        return None
    except OSError as e:
        return f"{lg.dir}: {e}"
