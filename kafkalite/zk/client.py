"""ZkAdapter: every ZooKeeper read and write kafkalite makes, over one kazoo client.

The contract is DESIGN.md section 2. Writes the controller makes are conditional on the
znode version (and, when given `controller_epoch_zk_version`, fenced on /controller_epoch
so a deposed controller cannot write). Bulk reads are pipelined: all requests are sent,
then all replies collected, which is what makes a controller failover over 10,000
partitions take one round trip's worth of latency rather than 10,000.

The adapter is synchronous and blocking (kazoo runs its own I/O thread); the asyncio shell
calls it from an executor. Watches only call back: the broker shell turns them into
events on its queue (STYLE.md habit 3).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionDropped, MarshallingError, NodeExistsError, NoNodeError, UnimplementedError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from kafkalite.gc_pause import gc_paused
from kafkalite.zk import codec, paths
from kafkalite.zk.codec import (
    BrokerRegistration,
    ControllerEpoch,
    ControllerInfo,
    ProducerIdBlock,
    Reassignment,
    TopicAssignment,
)
from kafkalite.zk.errors import (
    BrokerIdInUseError,
    ControllerMovedError,
    ReassignmentInProgressError,
    StaleZnodeVersionError,
    TopicAlreadyExistsError,
    UnknownTopicError,
    ZkContentionError,
    ZkError,
    ZnodeDecodeError,
    ZnodeExistsError,
    ZnodeNotEmptyError,
    ZnodeNotFoundError,
)
from kafkalite.zk.kazoo_errors import calls, translate
from kafkalite.zk.multi import (
    TRANSACTION_BYTES_MAX_DEFAULT,
    TRANSACTION_OPS_MAX_DEFAULT,
    BatchWriter,
    Op,
    OpResult,
    check_write_size,
)
from kafkalite.zk.multi_read import MultiRead
from kafkalite.zk.security import ZkSecurity

TopicPartition = tuple[str, int]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S_DEFAULT = 30.0
READS_IN_FLIGHT_MAX_DEFAULT = 5000
# Reads per multiRead: a partition state's reply is ~80 bytes of data plus ~80 of framing,
# so 1,000 keep a reply near 160 KiB, well under jute.maxbuffer (1 MiB).
MULTI_READ_PATHS_MAX_DEFAULT = 1000


class MultiReadUnsupportedError(ZkError):
    """The server does not know multiRead (ZooKeeper before 3.6)."""
# Read-modify-write loops (controller epoch, producer id blocks) retry only when someone
# else's write won, i.e. the system made progress; this bounds a pathological pile-up.
CONTENTION_RETRIES_MAX_DEFAULT = 100
PRODUCER_ID_MAX = 2**63 - 1


class ControllerElection(NamedTuple):
    """What winning the controller election yields: the new epoch and the zk version of
    /controller_epoch, which fences every later controller write."""

    epoch: int
    epoch_zk_version: int


class ZkAdapter:
    def __init__(
        self,
        client: KazooClient,
        *,
        transaction_bytes_max: int = TRANSACTION_BYTES_MAX_DEFAULT,
        transaction_ops_max: int = TRANSACTION_OPS_MAX_DEFAULT,
        reads_in_flight_max: int = READS_IN_FLIGHT_MAX_DEFAULT,
        multi_read: bool = True,
        multi_read_paths_max: int = MULTI_READ_PATHS_MAX_DEFAULT,
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        contention_retries_max: int = CONTENTION_RETRIES_MAX_DEFAULT,
        security: ZkSecurity | None = None,
    ) -> None:
        assert reads_in_flight_max > 0
        assert contention_retries_max > 0
        self.client = client
        # Issue 15: the znode ACLs (kafkalite.zk.security). The client's default ACL covers
        # every creation; `create` also gives sensitive paths their private ACL.
        self.security = security
        self.reads_in_flight_max = reads_in_flight_max
        self.multi_read_paths_max = multi_read_paths_max
        self._multi_read = multi_read  # until a server refuses it
        self._multi_read_answered = False  # a server that answered one is not refusing it
        self.request_timeout_s = request_timeout_s
        self.contention_retries_max = contention_retries_max
        self.writer = BatchWriter(
            client,
            transaction_bytes_max=transaction_bytes_max,
            transaction_ops_max=transaction_ops_max,
            request_timeout_s=request_timeout_s,
        )

    @property
    def session_id(self) -> int:
        return self.client.client_id[0]

    # ------------------------------------------------------------------ basic reads/writes

    def ensure_base_paths(self) -> None:
        """Create the persistent parents (/brokers/ids, /brokers/topics, /admin/...)."""
        for path in paths.PERSISTENT_PARENTS:
            self.ensure_path(path)

    def ensure_path(self, path: str) -> None:
        with calls(path):
            self.client.ensure_path(path)

    def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """Data and stat, or None when the znode does not exist."""
        try:
            with calls(path):
                return self.client.get(path)
        except ZnodeNotFoundError:
            return None

    def get_children(self, path: str) -> list[str] | None:
        try:
            with calls(path):
                return sorted(self.client.get_children(path))
        except ZnodeNotFoundError:
            return None

    def create(self, path: str, data: bytes, *, ephemeral: bool = False, makepath: bool = False, acl: list | None = None) -> ZnodeStat:
        """Create a znode; its stat (version 0, czxid). ZnodeExistsError if it exists.
        `acl`: the znode's ACL when it must differ from the client's default; by default
        the security's ACL for the path (sensitive paths: no world READ)."""
        check_write_size(path, data)
        if acl is None and self.security is not None:
            acl = self.security.acl_for(path)
        with calls(path):
            _, stat = self.client.create(path, data, acl=acl, ephemeral=ephemeral, makepath=makepath, include_data=True)
        return stat

    def conditional_set(
        self, path: str, data: bytes, expected_version: int, *, controller_epoch_zk_version: int | None = None
    ) -> int:
        """Set `path` if it is still at `expected_version`; the new version.
        StaleZnodeVersionError otherwise (re-read and re-decide)."""
        assert expected_version >= 0
        check_write_size(path, data)
        if controller_epoch_zk_version is not None:
            result = self.multi_conditional_set([(path, data, expected_version)], controller_epoch_zk_version)[path]
            if isinstance(result, ZkError):
                raise result
            assert isinstance(result, int)
            return result
        with calls(path, expected_version):
            return self.client.set(path, data, version=expected_version).version

    def get_many(self, znode_paths: Iterable[str]) -> dict[str, tuple[bytes, ZnodeStat] | None]:
        """Reads of many znodes: multiRead requests of up to `multi_read_paths_max` paths
        (ZooKeeper 3.6+, kafkalite.zk.multi_read), several in flight; or, from a server
        without multiRead, pipelined single reads. Either way at most
        `reads_in_flight_max` reads are outstanding. A missing znode maps to None; any
        other failure raises."""
        wanted = list(znode_paths)
        # 100,000 replies (a new controller reading every partition state) make a million
        # objects, in kazoo's thread and this one: with the collector paused (gc_pause).
        with gc_paused():
            if self._multi_read and len(wanted) > 1:
                try:
                    return self._get_many_multi(wanted)
                except MultiReadUnsupportedError as e:
                    self._multi_read = False
                    log.warning("ZooKeeper refused multiRead (%s): reading znodes one at a time", e)
            return self._get_many_pipelined(wanted)

    def _get_many_pipelined(self, znode_paths: Iterable[str]) -> dict[str, tuple[bytes, ZnodeStat] | None]:
        results: dict[str, tuple[bytes, ZnodeStat] | None] = {}
        window: list[tuple[str, object]] = []
        for path in znode_paths:
            window.append((path, self.client.get_async(path)))
            if len(window) >= self.reads_in_flight_max:
                self._collect(window, results)
                window = []
        self._collect(window, results)
        return results

    def _get_many_multi(self, znode_paths: list[str]) -> dict[str, tuple[bytes, ZnodeStat] | None]:
        results: dict[str, tuple[bytes, ZnodeStat] | None] = {}
        window: list[tuple[list[str], object]] = []
        in_flight = 0
        step = self.multi_read_paths_max
        chroot = self.client.chroot or ""
        for i in range(0, len(znode_paths), step):
            chunk = znode_paths[i: i + step]
            pending = self.client.handler.async_result()
            self.client._call(MultiRead([chroot + p for p in chunk]), pending)
            window.append((chunk, pending))
            in_flight += len(chunk)
            if in_flight >= self.reads_in_flight_max:
                self._collect_multi(window, results)
                window, in_flight = [], 0
        self._collect_multi(window, results)
        return results

    def _collect_multi(self, window: list[tuple[list[str], object]], results: dict) -> None:
        for chunk, pending in window:
            try:
                answers = pending.get(timeout=self.request_timeout_s)
            except (UnimplementedError, MarshallingError, ConnectionDropped) as e:
                if not self._multi_read_answered:
                    raise MultiReadUnsupportedError(repr(e)) from e
                raise translate(e, chunk[0]) from e
            except Exception as e:
                raise translate(e, chunk[0]) from e
            self._multi_read_answered = True
            if len(answers) != len(chunk):
                raise ZkError(f"multiRead of {len(chunk)} znodes answered {len(answers)} of them")
            for path, answer in zip(chunk, answers):
                if isinstance(answer, Exception):
                    raise translate(answer, path) from answer
                results[path] = answer

    def _collect(self, window: list[tuple[str, object]], results: dict) -> None:
        for path, pending in window:
            try:
                results[path] = pending.get(timeout=self.request_timeout_s)
            except NoNodeError:
                results[path] = None
            except Exception as e:
                raise translate(e, path) from e

    # ------------------------------------------------------------------ batched writes

    def multi_conditional_set(
        self,
        updates: Sequence[tuple[str, bytes, int]],
        controller_epoch_zk_version: int | None = None,
    ) -> dict[str, OpResult]:
        """Set each (path, data, expected_version) if still at that version, in as few
        `multi` transactions as the size bounds allow. Result per path: the new version, or
        the op's own error (StaleZnodeVersionError, ZnodeNotFoundError); one op failing
        does not stop the others. ControllerMovedError if the fence fails."""
        ops = [Op("set", path, data, version) for path, data, version in updates]
        return self.writer.run(ops, controller_epoch_zk_version)

    def multi_create(
        self,
        creates: Sequence[tuple[str, bytes]],
        controller_epoch_zk_version: int | None = None,
    ) -> dict[str, OpResult]:
        """Create persistent znodes (parents must exist). Result per path: 0 or the error
        (ZnodeExistsError, ZnodeNotFoundError for a missing parent)."""
        ops = [Op("create", path, data) for path, data in creates]
        return self.writer.run(ops, controller_epoch_zk_version)

    def multi_delete(
        self,
        deletes: Sequence[tuple[str, int]],
        controller_epoch_zk_version: int | None = None,
    ) -> dict[str, OpResult]:
        """Delete (path, expected_version or -1). Result per path: None or the error."""
        ops = [Op("delete", path, version=version) for path, version in deletes]
        return self.writer.run(ops, controller_epoch_zk_version)

    # ------------------------------------------------------------------ brokers

    def register_broker(self, registration: BrokerRegistration) -> int:
        """Create /brokers/ids/<id> (ephemeral); the broker epoch (its czxid).

        If the znode exists and belongs to this very session with the same value (a retry
        after a connection loss that had in fact succeeded), that is success, as in Kafka.
        Otherwise BrokerIdInUseError."""
        path = paths.broker_path(registration.id)
        data = codec.encode_broker_registration(registration)
        self.ensure_path(paths.brokers_ids_path())
        for _ in range(self.contention_retries_max):
            try:
                return self.create(path, data, ephemeral=True).czxid
            except ZnodeExistsError:
                existing = self.get(path)
            if existing is None:
                continue  # the previous owner's session just ended; try again
            existing_data, stat = existing
            if stat.ephemeralOwner == self.session_id and existing_data == data:
                return stat.czxid
            raise BrokerIdInUseError(
                path,
                f"broker id {registration.id} is already registered at {path} by ZooKeeper "
                f"session 0x{stat.ephemeralOwner:x}: another running broker has "
                f"broker.id={registration.id}, or a previous run's session has not expired yet "
                "(it will within its session timeout)",
            )
        raise ZkContentionError(f"could not register {path} after {self.contention_retries_max} attempts")

    def get_brokers(self) -> dict[int, tuple[BrokerRegistration, int]]:
        """Live brokers: id -> (registration, broker epoch)."""
        children = self.get_children(paths.brokers_ids_path()) or []
        ids = sorted(int(c) for c in children if c.isascii() and c.isdigit())  # not "²": isdigit() but not int()
        replies = self.get_many(paths.broker_path(i) for i in ids)
        brokers = {}
        for path, reply in replies.items():
            if reply is None:
                continue  # went away between the listing and the read
            data, stat = reply
            registration = codec.decode_broker_registration(data, path)
            brokers[registration.id] = (registration, stat.czxid)
        return brokers

    # ------------------------------------------------------------------ controller

    def try_become_controller(self, broker_id: int, now_ms: int | None = None) -> ControllerElection | None:
        """Create /controller and bump /controller_epoch in one `multi` (as Kafka does since
        KAFKA-6082), so no one holds /controller with a stale epoch. None if another broker
        is controller. The epoch is created as 1 if absent."""
        timestamp = now_ms if now_ms is not None else int(time.time() * 1000)
        info = codec.encode_controller_info(ControllerInfo(broker_id=broker_id, timestamp=timestamp))
        for _ in range(self.contention_retries_max):
            current = self.get_controller_epoch()
            transaction = self.client.transaction()
            transaction.create(paths.controller_path(), info, ephemeral=True)
            if current is None:
                new_epoch = 1
                transaction.create(paths.controller_epoch_path(), codec.encode_controller_epoch(ControllerEpoch(1)))
            else:
                new_epoch = current[0].epoch + 1
                transaction.set_data(
                    paths.controller_epoch_path(),
                    codec.encode_controller_epoch(ControllerEpoch(new_epoch)),
                    version=current[1],
                )
            with calls(paths.controller_path()):
                controller_result, epoch_result = transaction.commit_async().get(timeout=self.request_timeout_s)
            if not isinstance(controller_result, Exception):
                epoch_zk_version = 0 if current is None else epoch_result.version
                return ControllerElection(new_epoch, epoch_zk_version)
            if isinstance(controller_result, NodeExistsError):
                return self._own_controller_election(broker_id)
            if isinstance(epoch_result, (BadVersionError, NodeExistsError, NoNodeError)):
                continue  # the epoch moved under us; read it again
            raise translate(epoch_result, paths.controller_epoch_path())
        raise ZkContentionError(f"controller election retried {self.contention_retries_max} times")

    def _own_controller_election(self, broker_id: int) -> ControllerElection | None:
        """/controller exists: ours (a retried election that had succeeded) or someone else's."""
        existing = self.get(paths.controller_path())
        if existing is None:
            return None  # it just went away: the next election event will try again
        data, stat = existing
        info = codec.decode_controller_info(data, paths.controller_path())
        if stat.ephemeralOwner != self.session_id or info.broker_id != broker_id:
            return None
        epoch = self.get_controller_epoch()
        assert epoch is not None  # created in the same multi as /controller
        return ControllerElection(epoch[0].epoch, epoch[1])

    def resign_controller(self, broker_id: int) -> bool:
        """Delete /controller if this session holds it for `broker_id`; whether it did.
        Fenced (_delete_controller_if): between the read and the delete, the session may
        have expired and kazoo opened another, or someone else removed our /controller
        (remove_gone_controller), and another broker been elected."""
        return self._delete_controller_if(lambda info, stat: stat.ephemeralOwner == self.session_id and info.broker_id == broker_id)

    def _delete_controller_if(self, held: Callable[[ControllerInfo, ZnodeStat], bool]) -> bool:
        """Delete /controller if `held(info, stat)` says it is the one to delete; whether it
        was deleted. A version check of /controller proves nothing (an ephemeral znode is
        always at version 0), so the delete is fenced on /controller_epoch instead: every
        election bumps it in the multi that creates /controller (try_become_controller).
        The epoch is read before /controller, so the fence fails if any election came after
        the epoch read, and the /controller judged by `held` is then the one deleted."""
        epoch = self.get_controller_epoch()
        existing = self.get(paths.controller_path())
        if existing is None or epoch is None:
            return False
        data, stat = existing
        if not held(codec.decode_controller_info(data, paths.controller_path()), stat):
            return False
        try:
            result = self.multi_delete([(paths.controller_path(), -1)], epoch[1])[paths.controller_path()]
        except ControllerMovedError:
            return False  # another broker was elected meanwhile: its /controller stays
        return result is None

    def report_log_dir_failures(self, broker_id: int, broker_epoch: int, log_dirs: Sequence[str],
                                partitions: Iterable[TopicPartition]) -> None:
        """/log_dir_failures/<id> (ephemeral, this session's): the broker's offline log dirs
        and the partitions in them (KIP-112); created or replaced whole."""
        path = paths.log_dir_failure_path(broker_id)
        data = json.dumps({"version": 1, "broker_epoch": broker_epoch, "log_dirs": list(log_dirs),
                           "partitions": [[t, p] for t, p in sorted(partitions)]}).encode()
        self.ensure_path(paths.log_dir_failures_path())
        for _ in range(self.contention_retries_max):
            try:
                self.create(path, data, ephemeral=True)
                return
            except ZnodeExistsError:
                self.delete_if_exists(path)  # an older report (ours, or our previous session's)
        raise ZkContentionError(f"could not replace the log dir failure report {path}")

    def get_log_dir_failures(self) -> dict[int, tuple[int, tuple[TopicPartition, ...]]]:
        """broker -> (broker epoch, offline partitions) of every report; unreadable ones are skipped."""
        out: dict[int, tuple[int, tuple[TopicPartition, ...]]] = {}
        for name in self.get_children(paths.log_dir_failures_path()) or []:
            found = self.get(f"{paths.log_dir_failures_path()}/{name}")
            if found is None or not name.isascii() or not name.isdigit():
                continue
            try:
                d = json.loads(found[0])
                out[int(name)] = (int(d["broker_epoch"]), tuple((str(t), int(p)) for t, p in d["partitions"]))
            except (ValueError, KeyError, TypeError):
                log.warning("unreadable log dir failure report %s/%s", paths.log_dir_failures_path(), name)
        return out

    def remove_gone_controller(self, broker_id: int, broker_epoch: int) -> bool:
        """Delete /controller if it is held by the session of registration (broker_id,
        broker_epoch), whose process was found gone (issue 13): a new controller is then
        elected without waiting for that session to expire. Whether it was deleted. The
        delete is fenced on the controller epoch (_delete_controller_if), so a controller
        elected meanwhile is never removed; and were the process alive after all, it is
        fenced like any deposed controller (its writes check the controller epoch)."""
        registration = self.get(paths.broker_path(broker_id))
        if registration is None or registration[1].czxid != broker_epoch:
            return False  # that registration is gone already, and its /controller with it
        owner = registration[1].ephemeralOwner
        return self._delete_controller_if(lambda info, stat: info.broker_id == broker_id and stat.ephemeralOwner == owner)

    def get_controller(self) -> ControllerInfo | None:
        existing = self.get(paths.controller_path())
        return None if existing is None else codec.decode_controller_info(existing[0], paths.controller_path())

    def get_controller_epoch(self) -> tuple[ControllerEpoch, int] | None:
        """(epoch, zk version of /controller_epoch), or None before the first election."""
        existing = self.get(paths.controller_epoch_path())
        if existing is None:
            return None
        return codec.decode_controller_epoch(existing[0], paths.controller_epoch_path()), existing[1].version

    # ------------------------------------------------------------------ producer ids

    def allocate_producer_id_block(self, broker_id: int, block_size: int = 1000) -> tuple[int, int]:
        """Claim the next `block_size` producer ids; (first, last), both inclusive.
        A conditional update loop on /latest_producer_id_block, as in Kafka."""
        assert block_size > 0
        path = paths.producer_id_block_path()
        for _ in range(self.contention_retries_max):
            existing = self.get(path)
            start = 0 if existing is None else codec.decode_producer_id_block(existing[0], path).block_end + 1
            end = start + block_size - 1
            if end > PRODUCER_ID_MAX:
                raise ZkError(f"producer ids exhausted: cannot allocate [{start}, {end}]")
            data = codec.encode_producer_id_block(ProducerIdBlock(broker_id, start, end))
            try:
                if existing is None:
                    self.create(path, data)
                else:
                    self.conditional_set(path, data, existing[1].version)
            except (StaleZnodeVersionError, ZnodeExistsError, ZnodeNotFoundError):
                continue  # another broker claimed a block first
            return start, end
        raise ZkContentionError(f"producer id block allocation retried {self.contention_retries_max} times")

    # ------------------------------------------------------------------ topics

    def get_topics(self) -> list[str]:
        return self.get_children(paths.topics_path()) or []

    def get_topic_assignment(self, topic: str) -> tuple[TopicAssignment, int] | None:
        """(assignment, zk version), or None if the topic does not exist."""
        return self.get_topic_assignments([topic]).get(topic)

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, tuple[TopicAssignment, int]]:
        """Pipelined; topics that do not exist are left out. A topic's config is its
        /config/topics/<topic> when that exists (issue 16: where AlterConfigs writes), else
        what the assignment znode carries (topics of clusters from before issue 16)."""
        names = list(topics)
        by_path = {paths.topic_path(t): t for t in names}
        config_paths = {paths.config_topic_path(t): t for t in names}
        replies = self.get_many([*by_path, *config_paths])
        assignments = {}
        for path, topic in by_path.items():
            reply = replies.get(path)
            if reply is None:
                continue
            assignment = codec.decode_topic_assignment(reply[0], path)
            config_path = paths.config_topic_path(topic)
            stored = replies.get(config_path)
            if stored is not None:
                assignment = dataclasses.replace(assignment, config=codec.decode_entity_config(stored[0], config_path))
            assignments[topic] = (assignment, reply[1].version)
        return assignments

    def create_topic_znode(self, topic: str, assignment: TopicAssignment) -> int:
        """Create /brokers/topics/<topic>; its version (0). TopicAlreadyExistsError."""
        path = paths.topic_path(topic)
        self.ensure_path(paths.topics_path())
        try:
            self.create(path, codec.encode_topic_assignment(assignment))
        except ZnodeExistsError:
            raise TopicAlreadyExistsError(path, f"topic {topic!r} already exists") from None
        # Kafka's layout too: /config/topics/<topic> is where alterations go and what is read.
        self.set_entity_config(paths.config_topic_path(topic), dict(assignment.config), notify=None)
        return 0

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment, expected_version: int) -> int:
        return self.conditional_set(paths.topic_path(topic), codec.encode_topic_assignment(assignment), expected_version)

    def mark_topic_for_deletion(self, topic: str) -> None:
        """Create /admin/delete_topics/<topic>; idempotent. UnknownTopicError if no topic."""
        if self.get(paths.topic_path(topic)) is None:
            raise UnknownTopicError(topic)
        try:
            self.create(paths.admin_delete_topic_path(topic), codec.encode_empty(), makepath=True)
        except ZnodeExistsError:
            pass

    def delete_if_exists(self, path: str, controller_epoch_zk_version: int | None = None) -> None:
        """Delete a znode without children; a missing one is fine. With
        `controller_epoch_zk_version` (the controller's deletes), fenced like its writes:
        ControllerMovedError, and nothing deleted, once another controller was elected."""
        if controller_epoch_zk_version is not None:
            self._delete_levels([[path]], controller_epoch_zk_version)
            return
        try:
            with calls(path):
                self.client.delete(path)
        except ZnodeNotFoundError:
            pass

    def _delete_levels(self, levels: Sequence[Sequence[str]], controller_epoch_zk_version: int | None, *,
                       not_empty_ok: bool = False) -> None:
        """Delete the znodes of each level in turn (children before their parents: a level
        is sent once the one before is deleted, as multis commit in chunks), in multis
        fenced on the controller epoch when it is given. Missing znodes are fine; so are
        parents that gained a child meanwhile with `not_empty_ok`. ControllerMovedError when
        the fence fails: a deposed controller must not delete what its successor or an
        admin made since."""
        for level in levels:
            if not level:
                continue
            for result in self.multi_delete([(path, -1) for path in level], controller_epoch_zk_version).values():
                if isinstance(result, ZnodeNotFoundError) or (not_empty_ok and isinstance(result, ZnodeNotEmptyError)):
                    continue
                if isinstance(result, Exception):
                    raise result

    def _list_trees(self, roots: Sequence[str]) -> list[list[str]]:
        """The existing znodes under `roots` (roots included), by depth: roots first, then
        their children, and so on. Each depth is listed with pipelined reads."""
        levels: list[list[str]] = []
        level = list(roots)
        while level:
            pending = [(path, self.client.get_children_async(path)) for path in level]
            found, below = [], []
            for path, result in pending:
                try:
                    children = result.get(timeout=self.request_timeout_s)
                except NoNodeError:
                    continue  # gone meanwhile
                except Exception as e:
                    raise translate(e, path) from e
                found.append(path)
                below += [f"{path}/{child}" for child in sorted(children)]
            if found:
                levels.append(found)
            level = below
        return levels

    def get_topics_marked_for_deletion(self) -> list[str]:
        return self.get_children(paths.admin_delete_topics_path()) or []

    def delete_topic_znodes(self, topic: str, controller_epoch_zk_version: int | None) -> None:
        """Remove the topic, its partition states, its config and its deletion marker (the
        controller, once every replica is deleted). Missing znodes are fine. Fenced on the
        controller epoch (ControllerMovedError): a controller deposed while it waited for
        the replicas would otherwise delete a topic of the same name that its successor
        finished deleting and an admin created again."""
        roots = [paths.topic_path(topic), paths.config_topic_path(topic), paths.admin_delete_topic_path(topic)]
        self._delete_levels(list(reversed(self._list_trees(roots))), controller_epoch_zk_version)

    # ------------------------------------------------------------------ dynamic configs (issue 16)

    def get_entity_config(self, path: str) -> dict[str, str] | None:
        """/config/topics/<t> or /config/brokers/<id|<default>>; None when absent."""
        got = self.get(path)
        return None if got is None else codec.decode_entity_config(got[0], path)

    def set_entity_config(self, path: str, config: dict[str, str], *, notify: str | None) -> None:
        """Write an entity's whole config, then announce it under /config/changes (as
        Kafka 2.x does: config first, so whoever reads the notification sees it)."""
        data = codec.encode_entity_config(config)
        check_write_size(path, data)
        try:
            with calls(path):
                self.client.set(path, data)
        except ZnodeNotFoundError:
            try:
                self.create(path, data, makepath=True)
            except ZnodeExistsError:  # created in between: write over it
                with calls(path):
                    self.client.set(path, data)
        if notify is not None:
            self.ensure_path(paths.config_changes_path())
            prefix = paths.config_change_prefix()
            with calls(prefix):
                self.client.create(prefix, codec.encode_config_change(notify), sequence=True)

    def get_config_changes(self) -> list[tuple[str, str | None, float]]:
        """(name, entity path or None if unreadable/gone, ctime in s) of every notification."""
        names = [n for n in (self.get_children(paths.config_changes_path()) or []) if n.startswith(paths.CONFIG_CHANGE_PREFIX)]
        replies = self.get_many([paths.config_change_path(n) for n in names])
        out = []
        for name in names:
            path = paths.config_change_path(name)
            reply = replies.get(path)
            if reply is None:
                out.append((name, None, 0.0))
                continue
            try:
                entity: str | None = codec.decode_config_change(reply[0], path)
            except ZnodeDecodeError as e:
                log.warning("ignoring config change notification: %s", e)
                entity = None
            out.append((name, entity, reply[1].ctime / 1000))
        return out

    # ------------------------------------------------------------------ reassignment

    def get_reassignment(self) -> tuple[Reassignment, int] | None:
        """(/admin/reassign_partitions, its zk version), or None: no reassignment in progress."""
        path = paths.admin_reassign_partitions_path()
        existing = self.get(path)
        return None if existing is None else (codec.decode_reassignment(existing[0], path), existing[1].version)

    def create_reassignment(self, reassignment: Reassignment) -> None:
        """Start a reassignment (admin). ReassignmentInProgressError if one is in progress:
        the create is the check, so two admins racing cannot both start one."""
        path = paths.admin_reassign_partitions_path()
        try:
            self.create(path, codec.encode_reassignment(reassignment), makepath=True)
        except ZnodeExistsError:
            raise ReassignmentInProgressError(path, "a partition reassignment is already in progress") from None

    def delete_reassignment(self) -> bool:
        """Delete /admin/reassign_partitions (admin: cancel); whether it existed."""
        path = paths.admin_reassign_partitions_path()
        try:
            with calls(path):
                self.client.delete(path)
        except ZnodeNotFoundError:
            return False
        return True

    def remove_reassignment_entries(self, partitions: Iterable[TopicPartition], controller_epoch_zk_version: int | None) -> None:
        """Controller: take finished (or refused) partitions out of /admin/reassign_partitions,
        deleting it when none remain; conditional on the version read, re-read on a race
        with an admin; nothing to do when it is gone (cancelled)."""
        path = paths.admin_reassign_partitions_path()
        done = set(partitions)
        while True:
            current = self.get_reassignment()
            if current is None:
                return
            value, version = current
            left = {tp: r for tp, r in value.partitions.items() if tp not in done}
            if len(left) == len(value.partitions):
                return
            if left:
                result = self.multi_conditional_set(
                    [(path, codec.encode_reassignment(Reassignment(left, value.throttle)), version)], controller_epoch_zk_version)[path]
            else:
                result = self.multi_delete([(path, version)], controller_epoch_zk_version)[path]
            if isinstance(result, ZnodeNotFoundError):
                return
            if isinstance(result, StaleZnodeVersionError):
                continue
            if isinstance(result, Exception):
                raise result
            return

    def write_topic_assignment(self, topic: str, assignment: TopicAssignment, controller_epoch_zk_version: int | None) -> int:
        """Controller: set /brokers/topics/<t> (reassignment, partition add/remove), fenced on
        the controller epoch; its new version."""
        path = paths.topic_path(topic)
        result = self.multi_conditional_set([(path, codec.encode_topic_assignment(assignment), -1)], controller_epoch_zk_version)[path]
        if isinstance(result, Exception):
            raise result
        return int(result)

    def delete_partitions(self, partitions: Iterable[TopicPartition], controller_epoch_zk_version: int | None) -> None:
        """Controller: the znodes of removed partitions (state first, then the partition)."""
        deletes = []
        for t, p in partitions:
            deletes += [(paths.partition_state_path(t, p), -1), (paths.partition_path(t, p), -1)]
        for result in self.multi_delete(deletes, controller_epoch_zk_version).values():
            if isinstance(result, Exception) and not isinstance(result, ZnodeNotFoundError):
                raise result

    def get_partition_admin_requests(self, kind: str) -> dict[TopicPartition, list[int]]:
        """/admin/partitions_add/<t>/<p> ({"replicas": [...]}, kind "add") or
        /admin/partitions_remove/<t>/<p> ({}, kind "remove"; replicas empty)."""
        out: dict[TopicPartition, list[int]] = {}
        for topic in self.get_children(paths.admin_partition_requests_path(kind)) or []:
            for p in self.get_children(paths.admin_partition_requests_topic_path(kind, topic)) or []:
                if not p.isascii() or not p.isdigit():
                    continue
                path = paths.admin_partition_request_path(kind, topic, int(p))
                if kind == "add":
                    raw = self.get(path)
                    if raw is not None:
                        out[(topic, int(p))] = list(codec.decode_replica_list(raw[0], path).replicas)
                else:
                    out[(topic, int(p))] = []
        return out

    def request_partition_changes(self, kind: str, partitions: dict[TopicPartition, list[int]]) -> None:
        """Admin: write /admin/partitions_add/<t>/<p> with its replicas, or
        /admin/partitions_remove/<t>/<p>, for the controller to carry out. One znode at a
        time, so the controller may see any prefix of them: adds go lowest first and
        removals highest first, so that every prefix is a request it can carry out (it
        removes only a topic's highest partitions; seeing p=2 of 2..3 alone, it refused it
        and removed 3 only)."""
        for (t, p), replicas in sorted(partitions.items(), key=lambda kv: (kv[0][0], -kv[0][1] if kind == "remove" else kv[0][1])):
            data = codec.encode_replica_list(codec.ReplicaList(list(replicas))) if kind == "add" else codec.encode_empty()
            try:
                self.create(paths.admin_partition_request_path(kind, t, p), data, makepath=True)
            except ZnodeExistsError:
                pass

    def delete_partition_admin_requests(self, kind: str, partitions: Iterable[TopicPartition],
                                        controller_epoch_zk_version: int | None) -> None:
        """Controller: the handled /admin/partitions_add|remove/<t>/<p>, then their topic
        parents unless an admin added another request meanwhile; fenced on the controller
        epoch like its writes (ControllerMovedError)."""
        tps = sorted(set(partitions))
        requests = [paths.admin_partition_request_path(kind, t, p) for t, p in tps]
        parents = [paths.admin_partition_requests_topic_path(kind, t) for t in sorted({t for t, _ in tps})]
        self._delete_levels([requests, parents], controller_epoch_zk_version, not_empty_ok=True)

    # ------------------------------------------------------------------ partition states

    def get_partition_states(self, topic_partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[codec.PartitionState, int]]:
        """Pipelined: (state, zk version = partition epoch); missing ones left out."""
        with gc_paused():
            return {tp: (codec.decode_partition_state(data, path), stat.version)
                    for tp, (path, data, stat) in self._read_partition_states(topic_partitions).items()}

    def get_partition_state_tuples(
        self, topic_partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, tuple[codec.PartitionStateTuple, int, int]]:
        """What a new controller reads of every partition: (leader, leader_epoch, isr,
        controller_epoch) as a plain tuple (it builds its own objects from them), the zk
        version (= partition epoch) and the mzxid of the last write, which tells it which
        replicas registered (restarted) after the state was written."""
        with gc_paused():
            return {tp: (codec.decode_partition_state_tuple(data, path), stat.version, stat.mzxid)
                    for tp, (path, data, stat) in self._read_partition_states(topic_partitions).items()}

    def _read_partition_states(self, topic_partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[str, bytes, ZnodeStat]]:
        by_path: dict[str, TopicPartition] = {}
        prefixes: dict[str, str] = {}  # each topic's name checked once, not once per partition
        for t, p in topic_partitions:
            prefix = prefixes.get(t)
            if prefix is None:
                prefix = prefixes[t] = paths.partitions_path(t) + "/"
            assert type(p) is int and p >= 0
            by_path[f"{prefix}{p}/state"] = (t, p)
        return {by_path[path]: (path, reply[0], reply[1]) for path, reply in self.get_many(by_path).items() if reply is not None}

    def create_partition_states(
        self,
        states: Mapping[TopicPartition, codec.PartitionStateFields],
        controller_epoch_zk_version: int | None = None,
    ) -> dict[TopicPartition, OpResult]:
        """Create the state znodes of new partitions (controller's init_leaders). The
        topics' `partitions` znodes are created first (pipelined, existing ones kept); each
        missing `partitions/<p>` znode is created in the same fenced multis as the states,
        just before its state (a session's requests apply in order), so 10,000 new
        partitions cost ~20 multis rather than 10,000 single creates."""
        topics = sorted({t for t, _ in states})
        self._create_parents([paths.partitions_path(t) for t in topics])
        listed = {t: self.client.get_children_async(paths.partitions_path(t)) for t in topics}
        existing: dict[str, set[str]] = {}
        for t, pending in listed.items():
            try:
                existing[t] = set(pending.get(timeout=self.request_timeout_s))
            except Exception as e:
                raise translate(e, paths.partitions_path(t)) from e
        creates: list[tuple[str, bytes]] = []
        by_path: dict[str, TopicPartition] = {}
        for (t, p), state in states.items():
            if str(p) not in existing[t]:
                creates.append((paths.partition_path(t, p), b""))
            path = paths.partition_state_path(t, p)
            by_path[path] = (t, p)
            creates.append((path, codec.encode_partition_state(state)))
        results = self.multi_create(creates, controller_epoch_zk_version)
        return {by_path[path]: result for path, result in results.items() if path in by_path}

    def update_partition_states(
        self,
        updates: Mapping[TopicPartition, tuple[codec.PartitionStateFields, int]],
        controller_epoch_zk_version: int | None = None,
    ) -> dict[TopicPartition, OpResult]:
        """Conditional writes of (new state, expected partition epoch); per partition the
        new partition epoch or StaleZnodeVersionError / ZnodeNotFoundError."""
        by_path = {paths.partition_state_path(t, p): (t, p) for t, p in updates}
        results = self.multi_conditional_set(
            [(path, codec.encode_partition_state(updates[tp][0]), updates[tp][1]) for path, tp in by_path.items()],
            controller_epoch_zk_version,
        )
        return {by_path[path]: result for path, result in results.items()}

    def _create_parents(self, parent_paths: Sequence[str]) -> None:
        """Create persistent empty znodes shortest first, pipelined per depth; existing ok."""
        by_depth: dict[int, list[str]] = {}
        for path in parent_paths:
            by_depth.setdefault(path.count("/"), []).append(path)
        for depth in sorted(by_depth):
            pending = [(p, self.client.create_async(p, b"", makepath=True)) for p in by_depth[depth]]
            for path, result in pending:
                try:
                    result.get(timeout=self.request_timeout_s)
                except NodeExistsError:
                    pass
                except Exception as e:
                    raise translate(e, path) from e

    # ------------------------------------------------------------------ watches

    def watch_children(self, path: str, callback: Callable[[list[str]], None], *, create: bool = True) -> ChildrenWatch:
        """Call `callback(children)` now and on every change, from kazoo's thread: it
        should only enqueue an event. The path is created if missing (unless `create` is
        false: the watch then ends when the node is missing or deleted)."""
        if create:
            self.ensure_path(path)

        def on_children(children: list[str]) -> None:
            callback(sorted(children))  # return None: kazoo keeps the watch

        return ChildrenWatch(self.client, path, on_children)

    def watch_data(self, path: str, callback: Callable[[bytes | None, ZnodeStat | None], None]) -> DataWatch:
        """Call `callback(data, stat)` now and on every change ((None, None) while absent),
        from kazoo's thread: it should only enqueue an event."""

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            callback(data, stat)  # return None: kazoo keeps the watch

        return DataWatch(self.client, path, on_data)
