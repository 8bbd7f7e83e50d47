"""One broker process: wires the log, ZooKeeper, replica manager, controller and listeners.

Start-up follows seed section E: open local logs, read the assignments, delete local
partitions no longer assigned here, start the listeners, register in ZooKeeper (the broker
epoch is the registration's czxid), then take part in the controller election. Roles come
only from the controller's LeaderAndIsr.

kazoo runs its own thread: its watch callbacks and state changes only hop onto the event
loop (call_soon_threadsafe) and enqueue; blocking ZooKeeper calls run in the executor.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import secrets
import signal
import time
import uuid
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.protocol.states import KazooState

from kafkalite import gc_pause
from kafkalite.aio import cancel_and_wait, spawn
from kafkalite.broker.admin_http import AdminHttp
from kafkalite.broker.authorization import AclAuthorizer, RequestAuthorizer
from kafkalite.broker.broker_watch import ControllerWatch, ProcessWatches
from kafkalite.broker.client_listener import ClientListener
from kafkalite.broker.controller import Controller
from kafkalite.broker.controller_events import (
    BrokerChange,
    ConfigChange,
    Elect,
    LogDirFailuresChange,
    PartitionsAddChange,
    PartitionsRemoveChange,
    PreferredElectionZnode,
    ReassignmentChange,
    Resign,
    TopicChange,
    TopicDeletion,
)
from kafkalite.broker.dynamic_configs import DynamicBrokerConfigs
from kafkalite.broker.errors import OPERATING_ERRORS
from kafkalite.broker.fetcher import FetcherManager
from kafkalite.broker.group_coordinator import GroupCoordinatorDriver, coordinator_config
from kafkalite.broker.inter_broker import InterBrokerHandlers
from kafkalite.broker.kafka_apis import KafkaApis
from kafkalite.broker.log_cleaner import LogCleanerDriver
from kafkalite.broker.metadata_cache import MetadataCache, MetadataUpdates
from kafkalite.broker.metrics import EVENT_LOOP_PROBE_S, BrokerMetrics
from kafkalite.broker.partition import NOT_THE_DISK
from kafkalite.broker.peer_messages import EndOffsetsRequest
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.broker.tls import HANDSHAKE_TIMEOUT_S as TLS_HANDSHAKE_TIMEOUT_S
from kafkalite.broker.tls import server_context
from kafkalite.clock import wall_ms
from kafkalite.config import BrokerConfig, make_replica_selector
from kafkalite.core.consumer_fetch import ClusterView
from kafkalite.core.group_messages import OFFSETS_TOPIC
from kafkalite.core.messages import AlterIsrResponse, ControlledShutdownRequest, ControlledShutdownResponse
from kafkalite.core.replica_state import AlterIsrItem
from kafkalite.log import checkpoint
from kafkalite.log.cleaner_manager import CleanerConfig, LogCleanerManager
from kafkalite.log.config import LogConfig, parse_cleanup_policy
from kafkalite.log.errors import LogDirFailure
from kafkalite.log.log_manager import LogManager
from kafkalite.protocol.errors import ErrorCode
from kafkalite.rpc.auth import load_secret, unauthenticated_rpc_warning
from kafkalite.rpc.transport import RpcClient, RpcError, RpcServer
from kafkalite.zk import paths
from kafkalite.zk.client import ZkAdapter
from kafkalite.zk.codec import BrokerRegistration
from kafkalite.zk.errors import BrokerIdInUseError, ZkError, ZnodeDecodeError
from kafkalite.zk.security import make_client, secure_root, security_from
from kafkalite.zk.users import scram_mock_salt_key

log = logging.getLogger(__name__)

ALTER_ISR_LINGER_S = 0.02
ALTER_ISR_RETRY_BACKOFF_S = 0.2
CLIENT_LISTENER_WARN_S = 10.0
GROUP_LAG_REFRESH_S = 5.0
GC_PAUSE_LOGGED_S = 0.1  # collections this long are logged (a take-over of 100,000 partitions met some of 0.5 s)
REREGISTER_BACKOFF_S = 0.5  # after a failed re-registration, doubling up to
REREGISTER_BACKOFF_MAX_S = 5.0


def log_config_from(cfg: BrokerConfig | Mapping[str, Any]) -> LogConfig:
    flush_msgs = cfg["log.flush.interval.messages"]
    flush_ms = cfg["log.flush.interval.ms"]
    policy = parse_cleanup_policy(cfg["log.cleanup.policy"])
    assert policy is not None  # checked by BrokerConfig
    return LogConfig(
        segment_bytes=cfg["log.segment.bytes"], roll_ms=cfg["log.roll.ms"],
        index_interval_bytes=cfg["log.index.interval.bytes"], retention_ms=cfg["log.retention.ms"],
        retention_bytes=cfg["log.retention.bytes"],
        flush_interval_messages=None if flush_msgs == -1 else flush_msgs,
        flush_interval_ms=None if flush_ms == -1 else flush_ms,
        cleanup_policy=policy, delete_retention_ms=cfg["log.cleaner.delete.retention.ms"],
        min_cleanable_dirty_ratio=cfg["log.cleaner.min.cleanable.ratio"],
        min_compaction_lag_ms=cfg["log.cleaner.min.compaction.lag.ms"],
    )


def cleaner_config_from(cfg: BrokerConfig) -> CleanerConfig:
    return CleanerConfig(
        enable=cfg["log.cleaner.enable"], threads=cfg["log.cleaner.threads"],
        dedupe_buffer_bytes=cfg["log.cleaner.dedupe.buffer.size"],
        io_max_bytes_per_second=cfg["log.cleaner.io.max.bytes.per.second"], backoff_ms=cfg["log.cleaner.backoff.ms"],
    )


class Broker:
    def __init__(self, cfg: BrokerConfig):
        self.cfg = cfg
        self.settings: dict[str, Any] = cfg.as_dict()
        self.broker_id = cfg.broker_id
        self.metrics = BrokerMetrics()
        self.metadata_cache = MetadataCache()
        self.metadata_updates = MetadataUpdates()
        self.logs = LogManager(list(self.settings["log.dirs"]), log_config_from(cfg),
                               open_files_max=self.settings["log.open.files.max"])
        self.replica_manager = ReplicaManager(self.broker_id, self.logs, log_config_from(cfg), self.settings, self.metrics)
        # Issue 16: /config/brokers/<id> and <default>, applied live over the static settings.
        self.dynamic_configs = DynamicBrokerConfigs(self, cfg.as_dict(), cfg.explicit, log_config_from)
        # KIP-392: the selector the core asks who serves a consumer (ConfigError if a
        # plug-in cannot be set up), and the metadata cache's view it decides from.
        self.replica_selector = make_replica_selector(self.settings["replica.selector.class"], self.settings)
        self.replica_manager.core.replica_selector = self.replica_selector
        self.replica_manager.cluster_view = self._cluster_view
        self.kazoo: KazooClient | None = None
        self.zk: ZkAdapter = None  # type: ignore[assignment]
        self.broker_epoch = -1
        # Names this process among the incarnations of this broker id: a Ping answers it, so
        # the controller can tell the process it knew from one restarted on its address.
        self.incarnation = uuid.uuid4().hex
        self.cluster_id: str | None = None
        # The cluster's key of the mock SCRAM salts (kafkalite.zk.users.scram_mock_salt_key),
        # read before the client listeners are made; None without a SASL listener.
        self.scram_mock_salt_key: bytes | None = None
        # Issue 15: inter-broker RPC connections authenticate with the cluster secret, if any.
        try:
            self.rpc_secret = load_secret(self.settings["inter.broker.secret"], self.settings["inter.broker.secret.file"])
        except ValueError as e:
            raise SystemExit(f"kafkalite broker: {e}") from None
        if (open_rpc := unauthenticated_rpc_warning(self.cfg, self.rpc_secret)) is not None:
            log.warning("%s", open_rpc)
        self.controller = Controller(self.broker_id, self.settings, self.metrics, self._on_fatal)
        self.controller.rpc_secret = self.rpc_secret
        self.controller.gone_evidence = lambda: dict(self.metadata_cache.gone)
        # Issue 13: the controller's process, watched from here (None when disabled).
        self.controller_watch: ControllerWatch | None = None
        self.peer_watches: ProcessWatches | None = None  # issue 13: Metadata hints (MetadataCache.gone)
        if self.settings["controller.process.watch.enable"]:
            self.controller_watch = ControllerWatch(self.broker_id, self._controller_registration,
                                                    self._remove_gone_controller, secret=self.rpc_secret)
            self.peer_watches = ProcessWatches(self.broker_id, self._peer_gone, self._peer_back, secret=self.rpc_secret)
        self.groups: GroupCoordinatorDriver = None  # type: ignore[assignment]  # set at start, once the offsets topic's size is known
        # Issue 15: ACL authorization of client requests, when authorizer.class.name is set.
        self.authorizer: AclAuthorizer | None = AclAuthorizer(self.settings) if self.settings["authorizer.class.name"] else None
        self.request_authorizer = RequestAuthorizer(
            self.authorizer, topic_exists=lambda name: name in self.metadata_cache.topics,
            auto_create_enabled=lambda: self.settings["auto.create.topics.enable"]) if self.authorizer is not None else None
        self.kafka_apis = KafkaApis(self)
        self.client_listener: ClientListener | None = None  # the first of client_listeners
        self.client_listeners: list[ClientListener] = []
        self.rpc_server: RpcServer | None = None
        self.admin: AdminHttp | None = None
        self.peers: dict[int, RpcClient] = {}
        self.peer_addresses: dict[int, tuple[str, int]] = {}
        self.fetchers = FetcherManager(self.settings, self.peer_client, lambda: self.broker_epoch, self.metrics, self._on_fatal)
        self.replica_manager.fetchers = self.fetchers
        # KIP-112 (issue 14): a log dir failing under a request, a fetch or a checkpoint.
        self.replica_manager.on_log_dir_failure = self.on_log_dir_failure
        self.fetchers.on_log_dir_failure = self.on_log_dir_failure
        self.replica_manager.on_replica_corrupt = self.on_replica_corrupt
        self._offline_report: asyncio.Task | None = None
        self._offline_dirty = False
        self.offline_partitions: set[tuple[str, int]] = set()
        self.fetchers.broker_id, self.fetchers.quotas = self.broker_id, self.replica_manager.core.quotas
        self.fetchers.cluster_view = self._cluster_view
        self.replica_manager.alter_isr_due = self._alter_isr_due
        cleaner_config = cleaner_config_from(cfg)
        self.log_cleaner: LogCleanerDriver | None = None
        if cleaner_config.enable:
            self.log_cleaner = LogCleanerDriver(LogCleanerManager(self.logs, cleaner_config), self._high_watermarks, self.metrics,
                                                self._on_fatal, self._write_cleaner_checkpoints)
        self._alter_isr_wakeup: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._owned: set[asyncio.Task] = set()  # one-off background work (re-registration)
        self._reregistering: asyncio.Task | None = None
        self._sessions_lost = 0  # session expiries seen (_reregister)
        self._flush_job: asyncio.Future | None = None
        self._gc_callback: Any = None
        self._pid_block: tuple[int, int] | None = None
        self._pid_next = 0
        self._pid_lock: asyncio.Lock | None = None
        self.stopping = False
        self.stopped = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.metrics.attach(self)

    # -- start-up -----------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._alter_isr_wakeup = asyncio.Event()
        # Set once registered: controller requests wait for it (InterBrokerHandlers).
        self.registered = asyncio.Event()
        self._pid_lock = asyncio.Lock()
        self._cleaner_checkpoint_lock = asyncio.Lock()
        t0 = time.monotonic()
        await self.loop.run_in_executor(None, self.logs.open_all)
        self.replica_manager.load_local_partitions()
        await self._connect_zookeeper()
        if self.authorizer is not None:
            await self.loop.run_in_executor(None, self.authorizer.start, self.zk, self.loop)
        await self._delete_unassigned_partitions()
        self.dynamic_configs.watch()
        await self._start_group_coordinator()
        host, port = self.cfg.listener()
        ib_host, ib_port = self.cfg.inter_broker_listener()
        self.rpc_server = RpcServer(InterBrokerHandlers(self).handle, secret=self.rpc_secret)
        await self.rpc_server.start(ib_host, ib_port)
        # Bound now, serving once the controller's metadata has arrived (_serve_clients).
        tls_contexts = {spec.security_protocol: server_context(self.settings, spec.security_protocol)
                        for spec in self.cfg.client_listeners() if spec.tls}
        for spec in self.cfg.client_listeners():
            listener = ClientListener(self, spec.name, spec.security_protocol)
            self.client_listeners.append(listener)
            await listener.start(spec.host, spec.port, serving=False, ssl=tls_contexts.get(spec.security_protocol),
                                 ssl_handshake_timeout_s=TLS_HANDSHAKE_TIMEOUT_S)
        self.client_listener = self.client_listeners[0]
        ad_host, ad_port = self.cfg.admin_listener()
        self.admin = AdminHttp(self)
        await self.admin.start(ad_host, ad_port)
        # Every log is loaded: settle the heap now, while nobody waits on this broker, not
        # under traffic later (kafkalite.gc_pause.settle_now).
        took = gc_pause.settle_now()
        log.info("heap settled at start-up: %d objects frozen in %.0f ms", gc.get_freeze_count(), took * 1000)
        await self._register()
        self.controller.start(self.zk)
        self._install_watches()
        self._tasks += [
            self._essential(self._serve_clients(), "client-listener-open"),
            self._essential(self._alter_isr_loop(), "alter-isr"),
            self._essential(self._periodic(self._shrink_isr, self.settings["replica.lag.time.max.ms"] / 2000), "isr-shrink"),
            self._essential(self._periodic(self._checkpoint_hw, self.settings["replica.high.watermark.checkpoint.interval.ms"] / 1000), "hw-checkpoint"),
            self._essential(self._periodic(self._retention, self.settings["log.retention.check.interval.ms"] / 1000), "retention"),
            self._essential(self._periodic(self._flush, 1.0), "flush"),
            self._essential(self._probe_event_loop(), "event-loop-probe"),
            self._essential(self._periodic(self._settle_heap, 1.0), "heap-settle"),
        ]
        if self.log_cleaner is not None:
            self._tasks.append(self._essential(self.log_cleaner.run(), "log-cleaner"))
        self._tasks.append(self._essential(self.groups.run(), "group-coordinator"))
        self._tasks.append(self._essential(self._periodic(self._refresh_group_lag, GROUP_LAG_REFRESH_S), "group-lag"))
        self._watch_gc()
        log.info("broker %d started in %.0f ms: client %s:%d, inter-broker %s:%d, admin %s:%d, epoch %d",
                 self.broker_id, (time.monotonic() - t0) * 1000, host, port, ib_host, ib_port, ad_host, ad_port, self.broker_epoch)

    def _watch_gc(self) -> None:
        """kafkalite_gc_pause_seconds{generation}: how long each collection held the loop
        (and the interpreter: any thread's allocation can start one). Long ones are logged."""
        started = [0.0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                took = time.perf_counter() - started[0]
                self.metrics.gc_pause.labels(str(info["generation"])).observe(took)
                if took >= GC_PAUSE_LOGGED_S:
                    log.info("a generation %d collection took %.0f ms (%d collected)", info["generation"], took * 1000,
                             info["collected"])

        gc.callbacks.append(on_gc)
        self._gc_callback = on_gc

    async def _probe_event_loop(self) -> None:
        """kafkalite_event_loop_lag_seconds: every EVENT_LOOP_PROBE_S, how much later than
        asked the loop woke this task, i.e. how long something else held the loop."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + EVENT_LOOP_PROBE_S
            await asyncio.sleep(EVENT_LOOP_PROBE_S)
            self.metrics.event_loop_lag.observe(max(0.0, loop.time() - asked))

    async def _serve_clients(self) -> None:
        """Accept Kafka clients only once the controller's UpdateMetadata lists this broker.

        Before that the metadata cache is empty, and a Metadata answer with no brokers
        makes librdkafka decommission every broker it knows, after which it has nobody
        left to ask and stays silent (issue 7: a broker restarted moments ago answered its
        clients while still waiting for its old registration to expire). Refused
        connections only make clients use the other brokers meanwhile."""
        assert self.client_listener is not None
        started = time.monotonic()
        while not await self.metadata_updates.wait_until(lambda: self.metadata_cache.alive(self.broker_id), CLIENT_LISTENER_WARN_S):
            log.warning("client listener still closed after %.0f s: no metadata yet from a controller that lists broker %d",
                        time.monotonic() - started, self.broker_id)
        for listener, spec in zip(self.client_listeners, self.cfg.client_listeners()):
            await listener.start_serving()
            log.info("serving Kafka clients on %s %s:%d (advertised as %s:%d)", spec.name, spec.host, spec.port,
                     spec.advertised_host, spec.advertised_port)

    def _essential(self, coro, name: str) -> asyncio.Task:
        """A task the broker cannot work without, held in `_tasks` and cancelled at stop; if
        it ends with an error (a bug), the process ends (`_on_fatal`)."""
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(lambda t: None if t.cancelled() or t.exception() is None else self._on_fatal(t.exception()))
        return task

    # -- log dir failures (KIP-112, issue 14) ---------------------------------------------
    def on_log_dir_failure(self, failure: LogDirFailure) -> None:
        """A log dir failed (a full disk, EIO): its partitions go offline here (answered
        KAFKA_STORAGE_ERROR; their waiting produces fail, so nothing is acknowledged from
        it), and the controller learns of them from /log_dir_failures/<id> and moves their
        leaderships and ISR memberships elsewhere. With every dir offline the broker
        cannot serve anything and exits, as Kafka does. The dir comes back at the next
        start, recovered like after a crash (no clean-shutdown marker is written to it)."""
        d = os.path.abspath(failure.log_dir)
        if d in self.logs.offline_dirs or d not in self.logs.log_dirs:
            return
        tps = self.replica_manager.mark_dir_offline(d)
        self.offline_partitions.update(tps)
        self.metrics.offline_log_dirs.set(len(self.logs.offline_dirs))
        log.error("log dir %s failed (%s): %d partitions in it are offline on this broker until it restarts",
                  d, failure.cause, len(tps))
        if not self.logs.online_dirs:
            log.critical("every log dir of broker %d has failed; exiting", self.broker_id)
            logging.shutdown()
            os._exit(1)
        self._report_offline_soon()

    def on_replica_corrupt(self, tp: tuple[str, int], base_offset: int) -> None:
        """A stored batch of `tp` failed its CRC when read to be served (issue 14): the
        replica is quarantined (reported offline, so the controller moves its leadership
        and drops it from the ISR), then truncated to the bad batch and released, and the
        controller's next LeaderAndIsr makes it a follower that refills from the leader."""
        if tp in self.offline_partitions or self.logs.get(*tp) is None:
            return
        log.error("%s-%d: the batch at offset %d on disk is corrupt: quarantining this replica", tp[0], tp[1], base_offset)
        self.replica_manager.quarantine(tp)
        self.offline_partitions.add(tp)
        self._report_offline_soon()
        spawn(self._repair(tp, base_offset), name=f"repair-{tp[0]}-{tp[1]}", owner=self._owned)

    async def _repair(self, tp: tuple[str, int], base_offset: int) -> None:
        """Once the controller no longer counts this replica (not the leader, not in the ISR
        unless it is the only member), drop the log from the bad batch on, and release it."""
        while not self.stopping:
            meta = self.metadata_cache.partition(*tp)
            if meta is not None and meta.leader != self.broker_id and (self.broker_id not in meta.isr or list(meta.isr) == [self.broker_id]):
                break
            await asyncio.sleep(0.2)
        plog = self.logs.get(*tp)
        if self.stopping or plog is None:
            return
        try:
            plog.truncate_to(base_offset)
        except OSError as e:
            self.on_log_dir_failure(LogDirFailure(os.path.dirname(plog.dir), e))
            return
        log.warning("%s-%d: truncated to %d below the corrupt batch; refetching from the leader", tp[0], tp[1], plog.log_end_offset)
        self.replica_manager.release(tp)
        self.offline_partitions.discard(tp)
        self._report_offline_soon()

    def _report_offline_soon(self) -> None:
        self._offline_dirty = True
        if self._offline_report is None or self._offline_report.done():
            self._offline_report = spawn(self._report_offline(), name="report-offline-replicas", owner=self._owned)

    async def _report_offline(self) -> None:
        """Write /log_dir_failures/<id> until what it says is current, for the current
        registration (one writer at a time: a newer report never races an older one)."""
        while not self.stopping and self._offline_dirty:
            self._offline_dirty = False
            epoch = self.broker_epoch
            try:
                await self.loop.run_in_executor(None, self.zk.report_log_dir_failures, self.broker_id, epoch,
                                                sorted(self.logs.offline_dirs), sorted(self.offline_partitions))
            except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: retried
                log.info("reporting offline replicas failed (%s); retrying", e)
                self._offline_dirty = True
                await asyncio.sleep(0.5)
                continue
            if epoch != self.broker_epoch:
                self._offline_dirty = True

    def _on_fatal(self, error: BaseException) -> None:
        """A programmer error in a role this process must not go on without (the
        controller): end the process so ZooKeeper hands the role to another broker."""
        log.critical("broker %d: fatal error, exiting: %r", self.broker_id, error, exc_info=error)
        logging.shutdown()
        os._exit(70)

    async def _connect_zookeeper(self) -> None:
        timeout_s = self.settings["zookeeper.session.timeout.ms"] / 1000
        s = self.settings
        try:
            security = security_from(s["zookeeper.set.acl"], s["zookeeper.digest.user"], s["zookeeper.digest.password"],
                                     s["zookeeper.digest.file"])
        except ValueError as e:
            raise SystemExit(f"kafkalite broker: {e}") from None
        self.kazoo = make_client(s["zookeeper.connect"], timeout_s, security)
        try:
            await self.loop.run_in_executor(None, lambda: self.kazoo.start(timeout=15))
        except Exception as e:  # noqa: BLE001 - kazoo raises its own timeout type
            raise SystemExit(f"cannot connect to ZooKeeper at {self.settings['zookeeper.connect']}: {e}") from None
        self.kazoo.add_listener(self._on_zk_state)
        self.zk = ZkAdapter(self.kazoo, security=security)
        if security.set_acl and self.kazoo.chroot:
            # the chroot itself must not stay world-writable (secure_root); "/" of a shared
            # ZooKeeper is not ours to change
            if await self.loop.run_in_executor(None, secure_root, self.kazoo, security):
                log.info("set the cluster's ACL on the ZooKeeper chroot %s", self.kazoo.chroot)
        await self.loop.run_in_executor(None, self.zk.ensure_base_paths)
        self.cluster_id = await self.loop.run_in_executor(None, self._cluster_id)
        if any(spec.security_protocol.startswith("SASL_") for spec in self.cfg.client_listeners()):
            self.scram_mock_salt_key = await self.loop.run_in_executor(None, self._scram_mock_salt_key)

    def _scram_mock_salt_key(self) -> bytes:
        try:
            return scram_mock_salt_key(self.zk, secrets.token_bytes(32))
        except ZnodeDecodeError as e:
            raise SystemExit(f"kafkalite broker: {e}; delete it and a broker makes a new key at start-up") from None

    def _cluster_id(self) -> str:
        path = "/cluster/id"
        got = self.zk.get(path)
        if got is None:
            try:
                self.kazoo.create(path, uuid.uuid4().hex[:22].encode(), makepath=True)
            except NodeExistsError:  # another broker created it first
                pass
            got = self.zk.get(path)
        return got[0].decode() if got else "kafkalite"

    async def _delete_unassigned_partitions(self) -> None:
        topics = await self.loop.run_in_executor(None, self.zk.get_topics)
        assignments = await self.loop.run_in_executor(None, self.zk.get_topic_assignments, topics)
        mine = {(t, p) for t, (a, _v) in assignments.items() for p, r in a.partitions.items() if self.broker_id in r}
        # The topics' configs, before retention or the log cleaner look at a log: logs were
        # opened with the broker's defaults (a compacted topic's log must never be treated
        # as cleanup.policy=delete, nor the other way round).
        self.replica_manager.apply_topic_configs({t: a.config for t, (a, _v) in assignments.items()})
        gone = self.replica_manager.delete_unassigned(mine)
        if gone:
            log.info("deleted %d local partitions no longer assigned here: %s", len(gone), gone[:10])

    async def _start_group_coordinator(self) -> None:
        """The group coordinator maps groups to the offsets topic's partitions: their number
        is the topic's own if it exists (it may predate a change of
        offsets.topic.num.partitions), as in Kafka."""
        found = await self.loop.run_in_executor(None, self.zk.get_topic_assignment, OFFSETS_TOPIC)
        partitions = len(found[0].partitions) if found is not None else self.settings["offsets.topic.num.partitions"]
        if found is not None and partitions != self.settings["offsets.topic.num.partitions"]:
            log.warning("%s has %d partitions, not offsets.topic.num.partitions=%d: using %d", OFFSETS_TOPIC, partitions,
                        self.settings["offsets.topic.num.partitions"], partitions)
        self.groups = GroupCoordinatorDriver(coordinator_config(self.settings, partitions), self.replica_manager, self.settings,
                                             self._on_fatal)
        self.replica_manager.on_roles_changed = self.groups.on_roles_changed

    async def _register(self) -> None:
        host, port = self.cfg.advertised_listener()
        _, ib_port = self.cfg.inter_broker_listener()
        ib_host = self.cfg.inter_broker_listener()[0] or host
        _, ad_port = self.cfg.admin_listener()
        specs = self.cfg.client_listeners()
        endpoints = tuple((s.name, s.advertised_host, s.advertised_port) for s in specs) if len(specs) > 1 else ()
        reg = BrokerRegistration(id=self.broker_id, host=host, port=port, inter_broker_port=ib_port, admin_port=ad_port, rack=self.cfg.rack,
                                 endpoints=endpoints, unclean_start=self.logs.recovered_unclean)
        if ib_host != host:
            log.warning("inter-broker host %s differs from advertised host %s; peers use %s", ib_host, host, host)
        # A previous incarnation killed moments ago still holds /brokers/ids/<id> until its
        # session expires; wait that long before calling the id a duplicate.
        deadline = time.monotonic() + self.settings["zookeeper.session.timeout.ms"] * 1.5 / 1000 + 2
        while True:
            try:
                self.broker_epoch = await self.loop.run_in_executor(None, self.zk.register_broker, reg)
                break
            except BrokerIdInUseError:
                if time.monotonic() > deadline:
                    raise
                log.info("broker id %d still registered by an earlier session; waiting for it to expire", self.broker_id)
                await asyncio.sleep(0.5)
        self.replica_manager.broker_epoch = self.broker_epoch
        self.logs.unclean_start_announced = True  # (a clean stop need not carry it on)
        self.registered.set()
        if self.logs.offline_dirs or self.offline_partitions:
            self._report_offline_soon()  # a new session lost the ephemeral report: write it again
        log.info("registered broker %d with epoch %d", self.broker_id, self.broker_epoch)

    def _install_watches(self) -> None:
        call = self.loop.call_soon_threadsafe
        enqueue = self.controller.enqueue

        def on_controller(data, stat):
            if stat is None:
                call(enqueue, Elect())
                if self.controller_watch is not None:
                    call(self.controller_watch.follow, None)
            else:
                call(self._on_controller_znode, data)

        self.zk.watch_data(paths.controller_path(), on_controller)
        self.zk.watch_children(paths.brokers_ids_path(), lambda children: call(enqueue, BrokerChange()))
        self.zk.watch_children(paths.topics_path(), lambda children: call(enqueue, TopicChange()))
        self.zk.watch_children(paths.log_dir_failures_path(), lambda children: call(enqueue, LogDirFailuresChange()))
        self.zk.watch_children(paths.admin_delete_topics_path(), lambda children: call(enqueue, TopicDeletion()) if children else None)
        self.zk.watch_children(paths.config_changes_path(), lambda children: call(enqueue, ConfigChange()) if children else None)
        self.zk.watch_data(paths.preferred_replica_election_path(),
                           lambda data, stat: call(enqueue, PreferredElectionZnode()) if stat is not None else None)
        self.zk.watch_data(paths.admin_reassign_partitions_path(), lambda data, stat: call(enqueue, ReassignmentChange()))
        self._watch_partition_requests("add", PartitionsAddChange)
        self._watch_partition_requests("remove", PartitionsRemoveChange)

    def _watch_partition_requests(self, kind: str, event: type) -> None:
        """/admin/partitions_add|remove/<t>/<p>: a watch on the parent for topics, and one on
        each topic's node for its partitions (a topic node that outlives a request gets new
        partition children without the parent's children changing)."""
        call = self.loop.call_soon_threadsafe
        watched: set[str] = set()

        def on_partitions(children: list[str]) -> None:
            if children:
                call(self.controller.enqueue, event())

        def on_topics(children: list[str]) -> None:
            watched.intersection_update(children)  # a deleted node's watch has ended
            for topic in children:
                if topic not in watched:
                    watched.add(topic)
                    self.zk.watch_children(paths.admin_partition_requests_topic_path(kind, topic), on_partitions, create=False)

        self.zk.watch_children(paths.admin_partition_requests_path(kind), on_topics)

    def _on_controller_znode(self, data: bytes | None) -> None:
        try:
            owner = json.loads(data.decode()).get("brokerid") if data else None
        except (ValueError, AttributeError):
            owner = None
        # Someone else holds /controller: if it is not us, make sure we are not acting as one.
        if self.controller.active and owner is not None and owner != self.broker_id:
            self.controller.enqueue(Resign())
        if self.controller_watch is not None and not self.stopping:
            self.controller_watch.follow(owner if isinstance(owner, int) else None)

    def follow_peers(self) -> None:
        """Watch the processes of the brokers the metadata lists (after each UpdateMetadata)."""
        if self.peer_watches is not None and not self.stopping:
            cache = self.metadata_cache
            self.peer_watches.follow({b.id: (b.epoch, b.host, b.inter_broker_port) for b in cache.brokers.values()},
                                     cache.gone)

    def _peer_gone(self, broker_id: int, epoch: int) -> None:
        if self.metadata_cache.mark_gone(broker_id, epoch):
            log.info("broker %d (epoch %d) is gone: answering Metadata without it until the controller's update",
                     broker_id, epoch)
            self.metadata_updates.notify()

    def _peer_back(self, broker_id: int, epoch: int) -> None:
        if self.metadata_cache.mark_back(broker_id, epoch):
            self.metadata_updates.notify()

    async def _controller_registration(self, broker_id: int) -> tuple[int, str, int] | None:
        found = (await self.loop.run_in_executor(None, self.zk.get_brokers)).get(broker_id)
        if found is None:
            return None
        reg, epoch = found
        return epoch, reg.host, reg.inter_broker_port

    async def _remove_gone_controller(self, broker_id: int, epoch: int) -> bool:
        return await self.loop.run_in_executor(None, self.zk.remove_gone_controller, broker_id, epoch)

    def _on_zk_state(self, state: str) -> None:
        """kazoo thread: session lost means our ephemerals are gone (we may be a zombie)."""
        if self.loop is None or self.stopping:
            return
        if state == KazooState.LOST:
            self.loop.call_soon_threadsafe(self._on_session_lost)

    def _on_session_lost(self) -> None:
        log.warning("ZooKeeper session expired: resigning controller role and re-registering")
        self.controller.enqueue(Resign())
        self._sessions_lost += 1
        if self._reregistering is None or self._reregistering.done():  # one at a time
            self._reregistering = spawn(self._reregister(), name="reregister", owner=self._owned)

    async def _reregister(self) -> None:
        """Register again after a session expiry, for as long as it takes (Kafka's broker
        does too): giving up after a few minutes of ZooKeeper outage left a live broker
        unregistered for good, out of every ISR, until someone restarted it. A session lost
        again while registering (the new registration may have gone with it) registers again."""
        delay_s, failures = REREGISTER_BACKOFF_S, 0
        while not self.stopping:
            lost = self._sessions_lost
            try:
                await self._register()
            except Exception as e:  # noqa: BLE001 - ZkError, and kazoo's connection errors while reconnecting
                failures += 1
                (log.warning if failures % 20 == 0 else log.info)("re-registration failed %d times (%s); retrying", failures, e)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, REREGISTER_BACKOFF_MAX_S)
                continue
            if self._sessions_lost == lost:
                self.controller.enqueue(Elect())
                return
            log.warning("ZooKeeper session lost again while registering: registering again")

    def _cluster_view(self, tp: tuple[str, int]) -> ClusterView:
        """What the metadata cache says of a partition, for the consumer-fetch decision."""
        cache = self.metadata_cache
        meta = cache.partition(*tp)
        if meta is None:
            return ClusterView(cache.racks(), False)
        return ClusterView(cache.racks(), True, meta.isr, meta.leader_epoch)

    # -- peers --------------------------------------------------------------------------
    def note_broker_address(self, broker_id: int, host: str, port: int) -> None:
        self.peer_addresses[broker_id] = (host, port)
        client = self.peers.get(broker_id)
        if client is not None:
            client.retarget(host, port)

    def peer_client(self, broker_id: int) -> RpcClient | None:
        client = self.peers.get(broker_id)
        if client is None:
            addr = self.peer_addresses.get(broker_id)
            info = self.metadata_cache.brokers.get(broker_id)
            if info is not None:
                addr = (info.host, info.inter_broker_port)
            if addr is None:
                return None
            client = self.peers[broker_id] = RpcClient(addr[0], addr[1], sender=self.broker_id, secret=self.rpc_secret)
        return client

    # -- AlterIsr (KIP-497): the core's proposals, batched, one in flight per partition ---
    def _alter_isr_due(self) -> None:
        if self._alter_isr_wakeup is not None:
            self._alter_isr_wakeup.set()

    async def _alter_isr_loop(self) -> None:
        assert self._alter_isr_wakeup is not None
        core = self.replica_manager.core
        while True:
            await self._alter_isr_wakeup.wait()
            self._alter_isr_wakeup.clear()
            await asyncio.sleep(ALTER_ISR_LINGER_S)
            items = core.alter_isr_to_send()
            if not items:
                continue
            self.replica_manager.on_alter_isr_answer(items, await self._send_alter_isr(items))
            if core.alter_isr_pending:  # retries (and proposals made meanwhile) after a pause
                await asyncio.sleep(ALTER_ISR_RETRY_BACKOFF_S)
                self._alter_isr_wakeup.set()

    async def _send_alter_isr(self, items: list[AlterIsrItem]) -> AlterIsrResponse | None:
        """The controller's answer, or None when there is none (no controller known, or
        the call failed): the core then keeps the proposals and retries them."""
        controller_id = self.metadata_cache.controller_id
        client = self.peer_client(controller_id) if controller_id >= 0 else None
        if client is None:
            return None
        request = self.replica_manager.core.alter_isr_request(items)
        self.metrics.alter_isr_sent.inc()
        try:
            header, _ = await client.call("AlterIsr", request.to_wire(), timeout_ms=self.settings["request.timeout.ms"])
        except RpcError as e:
            log.info("AlterIsr to controller %d failed: %s", controller_id, e)
            return None
        response = AlterIsrResponse.from_wire(header)
        if response.error != 0:
            log.info("AlterIsr refused by %d: error %s", controller_id, response.error)
        return response

    # -- producer ids -------------------------------------------------------------------
    async def next_producer_id(self) -> int:
        assert self._pid_lock is not None
        async with self._pid_lock:
            if self._pid_block is None or self._pid_next > self._pid_block[1]:
                self._pid_block = await self.loop.run_in_executor(None, self.zk.allocate_producer_id_block, self.broker_id, self.settings["producer.id.block.size"])
                self._pid_next = self._pid_block[0]
            pid = self._pid_next
            self._pid_next += 1
            return pid

    # -- periodic work ------------------------------------------------------------------
    async def _periodic(self, fn, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                res = fn()
                if asyncio.iscoroutine(res):
                    await res
            except (*OPERATING_ERRORS, OSError, ZkError) as e:  # a disk or ZooKeeper hiccup: next round
                log.warning("periodic task %s failed: %s", getattr(fn, "__name__", fn), e)

    def _settle_heap(self) -> None:
        took = gc_pause.settle_if_due()
        if took is not None:
            (log.info if took >= 0.1 else log.debug)("heap settled after bulk work: collected and froze %d objects in %.0f ms",
                                                     gc.get_freeze_count(), took * 1000)

    def _shrink_isr(self) -> None:
        self.replica_manager.maybe_shrink_isr()

    async def _checkpoint_hw(self) -> None:
        """HWs (the seed's HW checkpoint thread) and recovery points, snapshotted here and
        written in a thread, so a kill -9 recovers from a recent point."""
        hws = self.replica_manager.hw_checkpoint_snapshot()
        points = self.logs.recovery_points()
        log_starts = self.logs.log_start_offsets()
        try:
            await self.loop.run_in_executor(None, self.logs.write_hw_checkpoint, hws)
            await self.loop.run_in_executor(None, self.logs.write_recovery_points, points)
            await self.loop.run_in_executor(None, self.logs.write_log_start_offsets, log_starts)
            await self._write_cleaner_checkpoints()
        except LogDirFailure as e:  # the other dirs were written; this one goes offline
            self.on_log_dir_failure(e)

    async def _write_cleaner_checkpoints(self) -> None:
        """cleaner-offset-checkpoint, snapshotted here and written in a thread (a stale one
        only makes the cleaner redo work: it is never ahead of a swapped-in pass)."""
        async with self._cleaner_checkpoint_lock:  # two writers would share the file's .tmp
            points = self.logs.cleaner_checkpoints()
            try:
                await self.loop.run_in_executor(None, self.logs.write_cleaner_checkpoints, points)
            except LogDirFailure as e:
                self.on_log_dir_failure(e)

    async def _refresh_group_lag(self) -> None:
        """The high watermarks of the partitions the groups coordinated here committed
        offsets for: read locally where this broker leads, asked of the other leaders
        (EndOffsets) otherwise. A leader that does not answer leaves its figures stale."""
        wanted = {tp for offsets in self.groups.committed().values() for tp in offsets}
        ends: dict[tuple[str, int], int] = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in sorted(wanted):
            meta = self.metadata_cache.partition(*tp)
            if meta is None or meta.leader < 0:
                continue
            part = self.replica_manager.partitions.get(tp)
            if meta.leader == self.broker_id and part is not None and part.is_leader:
                ends[tp] = part.hw
            else:
                by_leader.setdefault(meta.leader, []).append(tp)
        for leader, tps in by_leader.items():
            client = self.peer_client(leader)
            if client is None:
                continue
            try:
                reply, _ = await client.call("EndOffsets", EndOffsetsRequest(tps).to_wire(), timeout_ms=5000)
            except RpcError as e:
                log.debug("EndOffsets from %d failed: %s", leader, e)
                ends.update({tp: self.groups.end_offsets[tp] for tp in tps if tp in self.groups.end_offsets})
                continue
            for t, p, error, hw in reply.get("partitions", []):
                if error == 0:
                    ends[(t, int(p))] = int(hw)
        self.groups.end_offsets = ends

    def _high_watermarks(self) -> dict[tuple[str, int], int]:
        return {tp: part.hw for tp, part in self.replica_manager.partitions.items()}

    def _retention(self) -> None:
        self.replica_manager.apply_retention(wall_ms())

    async def _flush(self) -> None:
        """fsync what is due in a thread; the job holds private descriptors, so appends,
        truncations and deletions go on meanwhile (kafkalite.log.log.FlushJob)."""
        now = wall_ms()
        new_dirs = self.logs.dirs_to_sync()
        if new_dirs:
            # Partitions created since the last round (LogManager.get_or_create): one fsync
            # per log dir makes all their directory entries durable.
            self._flush_job = asyncio.ensure_future(self.loop.run_in_executor(None, _fsync_dirs, list(new_dirs)))
            try:
                await self._flush_job
            except OSError as e:
                log.warning("fsync of new partition directories failed: %s", e)
                self.logs.unsync(new_dirs)
            else:
                self.logs.mark_dirs_synced(new_dirs)
            finally:
                self._flush_job = None
        for tp, plog in [(tp, plog) for tp, plog in self.logs.logs().items() if plog.needs_flush(now)]:
            if self.logs.get(*tp) is not plog:
                continue  # closed while an earlier flush ran (its dir failed, it was deleted or moved)
            self._flush_job = None
            try:
                job = plog.begin_flush(now)
                self._flush_job = asyncio.ensure_future(self.loop.run_in_executor(None, job.run))
                await self._flush_job
            except OSError as e:
                log.warning("flush of %s failed: %s", plog.dir, e)
                if self._flush_job is not None:  # (begin_flush undid itself)
                    plog.abort_flush(job)
                if e.errno in NOT_THE_DISK:  # the process's limits, not the disk's: flushed again next round
                    continue
                self.on_log_dir_failure(LogDirFailure(os.path.dirname(plog.dir), e))
                continue
            finally:
                self._flush_job = None
            plog.complete_flush(job)

    # -- shutdown -----------------------------------------------------------------------
    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move our leaderships away first (DESIGN.md section 6)."""
        retries = self.settings["controlled.shutdown.max.retries"]
        for attempt in range(retries):
            controller_id = self.metadata_cache.controller_id
            client = self.peer_client(controller_id) if controller_id >= 0 else None
            if client is not None:
                try:
                    header, _ = await client.call("ControlledShutdown",
                                                  ControlledShutdownRequest(self.broker_id, self.broker_epoch).to_wire(),
                                                  timeout_ms=self.settings["request.timeout.ms"])
                    answer = ControlledShutdownResponse.from_wire(header)
                    if answer.error == 0 and not answer.remaining:
                        log.info("controlled shutdown succeeded")
                        return True
                    log.info("controlled shutdown attempt %d: error %s, %d partitions still led", attempt + 1,
                             answer.error, len(answer.remaining))
                except RpcError as e:
                    log.info("controlled shutdown attempt %d failed: %s", attempt + 1, e)
            await asyncio.sleep(self.settings["controlled.shutdown.retry.backoff.ms"] / 1000)
        log.warning("controlled shutdown did not complete; stopping anyway")
        return False

    async def stop(self, *, controlled: bool) -> None:
        if self.stopping:
            return
        self.stopping = True
        try:
            await self._stop(controlled)
        except Exception:  # the process must end even if a step failed
            log.exception("broker %d: error while stopping", self.broker_id)
        finally:
            self.stopped.set()

    async def _stop(self, controlled: bool) -> None:
        t0 = time.monotonic()
        if controlled and self.settings["controlled.shutdown.enable"] and self.broker_epoch >= 0:
            await self.controlled_shutdown()
        log.info("stopping: fetchers and periodic tasks (%.0f ms)", (time.monotonic() - t0) * 1000)
        await self.fetchers.close()
        await cancel_and_wait(self._tasks + list(self._owned))
        if self.authorizer is not None:
            await self.authorizer.close()
        if self.log_cleaner is not None:
            await self.log_cleaner.close()  # no worker outlives the logs it reads
        if self._flush_job is not None:  # a thread may still be syncing; let it finish first
            await asyncio.wait([self._flush_job])
        log.info("stopping: controller and listeners (%.0f ms)", (time.monotonic() - t0) * 1000)
        await self.controller.close()
        if self.controller_watch is not None:
            await self.controller_watch.close()
        if self.peer_watches is not None:
            await self.peer_watches.close()
        for component in (*self.client_listeners, self.rpc_server, self.admin):
            if component is not None:
                await component.close()
        for client in self.peers.values():
            await client.close()
        close_selector = getattr(self.replica_selector, "close", None)
        if callable(close_selector):
            close_selector()
        log.info("stopping: checkpoints and %d logs (%.0f ms)", len(self.logs.logs()), (time.monotonic() - t0) * 1000)
        try:
            self.logs.write_hw_checkpoint(self.replica_manager.hw_checkpoint_snapshot())
            self.logs.close()
        except Exception:  # no clean-shutdown marker then: the next start recovers
            log.exception("closing the logs failed; the next start will recover them")
        log.info("stopping: ZooKeeper session (%.0f ms)", (time.monotonic() - t0) * 1000)
        if self.kazoo is not None:
            try:
                await self.loop.run_in_executor(None, self.kazoo.stop)
                await self.loop.run_in_executor(None, self.kazoo.close)
            except Exception as e:  # noqa: BLE001 - closing anyway: whatever kazoo raises, we exit
                log.info("closing the ZooKeeper session failed: %r", e)
        if self._gc_callback in gc.callbacks:
            gc.callbacks.remove(self._gc_callback)
        log.info("broker %d stopped", self.broker_id)

    def state(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id, "broker_epoch": self.broker_epoch, "pid": os.getpid(),
            "serving_clients": self.client_listener is not None and self.client_listener.serving,
            "controller": self.controller.describe() if self.controller.active else {"active": False, "controller_id": self.metadata_cache.controller_id},
            "controller_epoch_seen": self.replica_manager.controller_epoch,
            "last_init_controller_epoch": self.replica_manager.last_init_controller_epoch,
            "metadata": self.metadata_cache.snapshot(),
            "partitions": self.replica_manager.state_summary(),
            "log_dirs": {"online": self.logs.online_dirs, "offline": sorted(self.logs.offline_dirs)},
            "offline_partitions": [f"{t}-{p}" for t, p in sorted(self.offline_partitions)],
        }


async def run(cfg: BrokerConfig) -> int:
    broker = Broker(cfg)
    loop = asyncio.get_running_loop()
    stop_kind: dict[str, bool] = {}

    stopping: set[asyncio.Task] = set()

    def on_signal(controlled: bool) -> None:
        if not stop_kind:
            stop_kind["controlled"] = controlled
            spawn(broker.stop(controlled=controlled), name="stop", owner=stopping)

    loop.add_signal_handler(signal.SIGTERM, on_signal, True)
    loop.add_signal_handler(signal.SIGINT, on_signal, True)
    try:
        await broker.start()
    except BaseException:
        await broker.stop(controlled=False)
        raise
    await broker.stopped.wait()
    return 0


__all__ = ["Broker", "run", "ErrorCode"]


def _fsync_dirs(dirs: list[str]) -> None:
    for d in dirs:
        checkpoint.fsync_dir(d)
