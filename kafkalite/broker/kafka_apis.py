"""Handlers of the Kafka client protocol: decoded request body in, response body out.

Field names follow kafkalite.protocol.schema (Kafka's JSON schemas, snake_case). Only the
transport (kafkalite.broker.client_listener) touches sockets; these functions only read
and change broker state, awaiting where a request must wait (acks=all, long-poll fetch,
topic creation).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import re
import time
from typing import TYPE_CHECKING, Any

from kafkalite.broker import acl_apis, records_apis
from kafkalite.broker.client_listener import current_listener
from kafkalite.broker.config_apis import ConfigApis
from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for, fail
from kafkalite.config import ConfigError, validate_topic_config
from kafkalite.core.group_messages import OFFSETS_TOPIC, partition_for
from kafkalite.core.messages import PreferredElectionRequest, PreferredElectionResponse
from kafkalite.core.placement import assign_replicas
from kafkalite.core.replica_selector import ClientMetadata
from kafkalite.protocol.codec import RequestHeader, api_versions_entries
from kafkalite.protocol.errors import ErrorCode
from kafkalite.protocol.schema import ApiKey
from kafkalite.rpc.transport import RpcError
from kafkalite.zk import paths as zk_paths
from kafkalite.zk.codec import TopicAssignment, encode_topic_assignment, new_topic_id
from kafkalite.zk.errors import TopicAlreadyExistsError, ZkError
from kafkalite.zk.multi import check_write_size

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)

TOPIC_NAME_RE = re.compile(r"[a-zA-Z0-9._-]+")  # the whole name: fullmatch ("$" would let a final newline through)
TOPIC_NAME_LEN_MAX = 249
# As Kafka's KRaft controller (ReplicationControlManager's MAX_PARTITIONS_PER_BATCH): a
# CreateTopics or CreatePartitions that would add more is refused whole with
# POLICY_VIOLATION. Its placement and znode writes would otherwise hold the broker (and a
# topic of more than ~60,000 RF 3 partitions does not fit in one znode at all).
MAX_PARTITIONS_PER_REQUEST = 10_000
OFFSETS_TOPIC_CREATE_WAIT_MS = 5000  # then COORDINATOR_NOT_AVAILABLE, and the client asks again
GROUP_APIS = {ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
              ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LIST_GROUPS,
              ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE}


@dataclasses.dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str]
    assignment: dict[int, list[int]]  # explicit replica assignment, or empty


def topic_name_error(name: Any) -> str | None:
    """Kafka's topic name rules; None when the name is legal."""
    if type(name) is str and name in _LEGAL_TOPIC_NAMES:  # every produce request asks again for the same few names
        return None
    if not isinstance(name, str) or not name:
        return "topic name is empty"
    if name in (".", ".."):
        return "topic name cannot be '.' or '..'"
    if len(name) > TOPIC_NAME_LEN_MAX:
        return f"topic name is longer than {TOPIC_NAME_LEN_MAX} characters"
    if not TOPIC_NAME_RE.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    if len(_LEGAL_TOPIC_NAMES) >= LEGAL_TOPIC_NAMES_KEPT:
        _LEGAL_TOPIC_NAMES.clear()  # bounded: a client naming endless topics costs the full check again, nothing more
    _LEGAL_TOPIC_NAMES.add(name)
    return None


LEGAL_TOPIC_NAMES_KEPT = 10_000
_LEGAL_TOPIC_NAMES: set[str] = set()  # names topic_name_error found legal


WATCH_SETTLE_WAIT_S = 0.1  # a peer watch's verdict after its connection ended (a reconnect on loopback)
GONE_LEADER_WAIT_S = 0.5  # the controller's update after a leader's process is found gone
DEPARTED_LISTED_S = 5.0  # a departed broker stays in Metadata's broker list (MetadataCache.listed_brokers)


class KafkaApis:
    def __init__(self, broker: Broker):
        self.broker = broker
        self.rm = broker.replica_manager
        self.cache = broker.metadata_cache
        self.settings = broker.settings
        self.configs = ConfigApis(broker, topic_name_error)

    async def handle(self, header: RequestHeader, body: dict[str, Any], client_address: str = "") -> dict[str, Any] | None:
        """`client_address`: the client's IP as the listener sees it (KIP-392 ClientMetadata).
        With an authorizer, the request is first checked against the ACLs
        (kafkalite.broker.authorization): what is refused never reaches the handler."""
        if self.broker.authorizer is not None and header.api_key != ApiKey.API_VERSIONS:
            return await self.broker.request_authorizer.handle(
                header, body, lambda h, b: self._dispatch(h, b, client_address))
        return await self._dispatch(header, body, client_address)

    async def _dispatch(self, header: RequestHeader, body: dict[str, Any], client_address: str) -> dict[str, Any] | None:
        key = header.api_key
        if key in GROUP_APIS:
            return await self.broker.groups.serve(header, body, client_address, lambda tp: self.cache.partition(*tp) is not None)
        if key == ApiKey.FETCH:
            return await self.fetch(header, body, client_address)
        handler = _HANDLERS[key]
        return await handler(self, header, body)

    # -- ApiVersions --------------------------------------------------------------------
    async def api_versions(self, header: RequestHeader, body: dict) -> dict:
        return {"error_code": 0, "api_keys": api_versions_entries(), "throttle_time_ms": 0}

    # -- SaslHandshake / SaslAuthenticate -----------------------------------------------
    # A SASL listener's gate (broker/sasl_gate.py) serves these before authentication; one
    # reaching the handlers came after it, or on a listener without SASL: Kafka answers
    # ILLEGAL_SASL_STATE.
    async def sasl_handshake(self, header: RequestHeader, body: dict) -> dict:
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": []}

    async def sasl_authenticate(self, header: RequestHeader, body: dict) -> dict:
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "auth_bytes": b"",
                "error_message": "SaslAuthenticate outside a SASL handshake (not a SASL listener, or already authenticated)"}

    # -- Metadata -----------------------------------------------------------------------
    async def metadata(self, header: RequestHeader, body: dict) -> dict:
        cache = self.cache
        requested = body.get("topics")
        names = sorted(cache.topics) if requested is None else [t["name"] for t in requested]
        if requested is not None and self.settings["auto.create.topics.enable"] and body.get("allow_auto_topic_creation", True):
            missing = [n for n in names if n not in cache.topics and topic_name_error(n) is None]
            if missing:
                await self._create_topics([TopicSpec(n, self.settings["num.partitions"], self.settings["default.replication.factor"], {}, {})
                                           for n in missing], 0)
        await self._settle_leaders(names)
        topics = []
        for name in names:
            err = topic_name_error(name)
            parts = cache.topics.get(name)
            if err is not None:
                topics.append({"error_code": int(ErrorCode.INVALID_TOPIC_EXCEPTION), "name": name, "partitions": []})
                continue
            if parts is None:
                topics.append({"error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "name": name, "partitions": []})
                continue
            plist = []
            for p, m in sorted(parts.items()):
                live_isr = [b for b in m.isr]
                plist.append({
                    "error_code": 0 if m.leader >= 0 and m.leader in cache.brokers else int(ErrorCode.LEADER_NOT_AVAILABLE),
                    "partition_index": p, "leader_id": m.leader if m.leader in cache.brokers else -1,
                    "leader_epoch": m.leader_epoch, "replica_nodes": list(m.replicas),
                    "isr_nodes": live_isr, "offline_replicas": list(m.offline_replicas),
                })
            topics.append({"error_code": 0, "name": name, "is_internal": name == OFFSETS_TOPIC, "partitions": plist})
        listener = current_listener.get()
        brokers = [{"node_id": b.id, "host": address[0], "port": address[1], "rack": b.rack}
                   for b in cache.listed_brokers(DEPARTED_LISTED_S) for address in [b.address_for(listener)]]
        # A controller known gone is not named (-1: unknown) while the new one's update is
        # on its way: librdkafka keeps waiting for a named controller's connection to come
        # back, and asks again only when it has none.
        controller_id = cache.controller_id if cache.controller_id not in cache.gone else -1
        return {"throttle_time_ms": 0, "brokers": brokers, "cluster_id": self.broker.cluster_id,
                "controller_id": controller_id, "topics": topics}

    async def _settle_leaders(self, names: list[str]) -> None:
        """Issue 13: a client asks for metadata the moment its connection to a leader (or
        the controller) breaks, which is the moment this broker's watch of that broker
        hears of it too. Let the watch finish its verdict (a reconnect, milliseconds), and
        when the broker is gone, wait (bounded) for the controller's update naming a new
        leader or controller: the client then learns it in this answer, not at its next
        periodic refresh. (An admin client that was told the dead controller again waited
        for it to come back: minutes, CI's test_compat_configs.)"""
        watches = self.broker.peer_watches
        if watches is None:
            return
        cache = self.cache

        def named() -> set[int]:
            ids = {m.leader for n in names for m in cache.topics.get(n, {}).values() if m.leader >= 0}
            if cache.controller_id >= 0:
                ids.add(cache.controller_id)
            return ids

        await watches.settled(named(), WATCH_SETTLE_WAIT_S)
        if cache.gone and named() & set(cache.gone):  # (nearly always empty: no second walk)
            await self.broker.metadata_updates.wait_until(lambda: not named() & set(cache.gone), GONE_LEADER_WAIT_S)

    # -- Produce ------------------------------------------------------------------------
    async def produce(self, header: RequestHeader, body: dict) -> dict | None:
        acks = body["acks"]
        entries = []
        order = []
        bad: dict[tuple[str, int], int] = {}
        for t in body["topic_data"]:
            for pd in t["partition_data"]:
                tp = (t["name"], pd["index"])
                order.append(tp)
                if acks not in (-1, 0, 1):
                    bad[tp] = int(ErrorCode.INVALID_REQUIRED_ACKS)
                elif body.get("transactional_id"):
                    bad[tp] = int(ErrorCode.INVALID_REQUEST)  # transactions are not supported
                elif topic_name_error(t["name"]) is not None or t["name"] == OFFSETS_TOPIC:
                    bad[tp] = int(ErrorCode.INVALID_TOPIC_EXCEPTION)  # (only the group coordinator writes the offsets topic)
                else:
                    entries.append((tp[0], tp[1], pd["records"]))
        t0 = time.monotonic()
        results = await self.rm.append_records(acks, body["timeout_ms"], entries) if entries else {}
        self.broker.metrics.request_latency("Produce", time.monotonic() - t0)
        if acks == 0:
            return None
        responses: dict[str, list] = {}
        for tp in order:
            r = results.get(tp)
            if tp in bad:
                pr = {"index": tp[1], "error_code": bad[tp], "base_offset": -1}
            else:
                pr = {"index": tp[1], "error_code": r["error"], "base_offset": r["base_offset"], "log_start_offset": r["log_start_offset"]}
            pr["log_append_time_ms"] = -1
            responses.setdefault(tp[0], []).append(pr)
        return {"responses": [{"name": n, "partition_responses": ps} for n, ps in responses.items()], "throttle_time_ms": 0}

    # -- Fetch --------------------------------------------------------------------------
    async def fetch(self, header: RequestHeader, body: dict, client_address: str = "") -> dict:
        """A consumer's Fetch. From v11 it carries the client's rack: the leader may answer
        a partition with no records and a `preferred_read_replica` (KIP-392), and followers
        serve it below their HW; before v11 only leaders serve, as in Kafka."""
        if body.get("replica_id", -1) >= 0:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST), "session_id": 0, "responses": []}
        client = None
        if header.api_version >= 11:
            client = ClientMetadata(rack_id=body.get("rack_id") or "", client_id=header.client_id or "", client_address=client_address)
        reqs = []
        for t in body["topics"]:
            for p in t["partitions"]:
                reqs.append(((t["topic"], p["partition"]), {
                    "fetch_offset": p["fetch_offset"], "max_bytes": p["partition_max_bytes"],
                    "current_leader_epoch": p.get("current_leader_epoch", -1),
                }))
        t0 = time.monotonic()
        max_wait = min(max(body["max_wait_ms"], 0), 60_000)
        results = await self.rm.fetch(reqs, replica_id=-1, max_wait_ms=max_wait, min_bytes=body["min_bytes"],
                                      max_bytes=max(body.get("max_bytes", 2**31 - 1), 1), client=client)
        self.broker.metrics.request_latency("Fetch", time.monotonic() - t0)
        responses: dict[str, list] = {}
        for (topic, p), r in results:
            responses.setdefault(topic, []).append({
                "partition_index": p, "error_code": r["error"], "high_watermark": r["hw"],
                "last_stable_offset": r["hw"], "log_start_offset": r["log_start"],
                "aborted_transactions": None, "preferred_read_replica": r["preferred_read_replica"],
                "records": r["records"] or b"",
            })
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": [{"topic": t, "partitions": ps} for t, ps in responses.items()]}

    # -- ListOffsets --------------------------------------------------------------------
    async def list_offsets(self, header: RequestHeader, body: dict) -> dict:
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                parts.append(self._list_offset(t["name"], p["partition_index"], p["timestamp"], p.get("current_leader_epoch", -1)))
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offset(self, topic: str, p: int, ts: int, current_leader_epoch: int) -> dict:
        out = {"partition_index": p, "error_code": 0, "timestamp": -1, "offset": -1, "leader_epoch": -1}
        part = self.rm.partitions.get((topic, p))
        if part is None:
            out["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if self.cache.partition(topic, p) is None else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return out
        fenced = part.state.validate_leader_epoch(current_leader_epoch)  # not leader, or KIP-320 fencing
        if fenced:
            out["error_code"] = int(fenced)
            return out
        if ts == -1 and part.hw < part.state.leader_epoch_start_offset:
            # KIP-392: a new leader that does not yet know the true HW cannot answer "latest".
            out["error_code"] = int(ErrorCode.OFFSET_NOT_AVAILABLE)
            return out
        # The leader epoch answered is that of the offset's records, as Kafka's: a consumer
        # keeps it with its position and checks it for truncation (KIP-320). The current
        # epoch for "latest" (Partition.fetchOffsetForTimestamp); for the earliest offset
        # and a timestamp's, the epoch the log records there. The current epoch for those
        # let a consumer that seeked below a later truncation miss it.
        epochs = part.log.leader_epoch_cache
        if ts == -2:
            out["offset"] = part.log_start_offset
            out["leader_epoch"] = epochs.epoch_for_offset(part.log_start_offset)
        elif ts == -1:
            out["offset"] = part.hw
            out["leader_epoch"] = part.leader_epoch
        else:
            found = part.log.offset_for_timestamp(ts)
            if found is not None and found[0] < part.hw:
                out["offset"], out["timestamp"] = found
                out["leader_epoch"] = epochs.epoch_for_offset(found[0])
            else:
                out["offset"] = -1
        return out

    # -- OffsetForLeaderEpoch (clients, KIP-320) ----------------------------------------
    async def offset_for_leader_epoch(self, header: RequestHeader, body: dict) -> dict:
        """A consumer's truncation check (KIP-320), answered by the leader only. Consumers
        send replica_id -1 (v3; older versions carry none, -2 here): their end offset is
        limited to the HW, and a new leader that does not know the true HW yet answers
        OFFSET_NOT_AVAILABLE (the core decides; kafkalite.core.replica_manager)."""
        for_consumer = body.get("replica_id", -2) < 0
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                tp = (t["topic"], p["partition"])
                out = {"error_code": 0, "partition": p["partition"], "leader_epoch": -1, "end_offset": -1}
                if tp not in self.rm.partitions:
                    out["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if self.cache.partition(*tp) is None
                                            else ErrorCode.NOT_LEADER_OR_FOLLOWER)
                else:
                    try:
                        answer = self.rm.core.offsets_for_leader_epoch(tp, p.get("current_leader_epoch", -1), p["leader_epoch"],
                                                                       for_consumer=for_consumer)
                        out["leader_epoch"], out["end_offset"] = answer.epoch, answer.end_offset
                    except OPERATING_ERRORS as e:
                        out["error_code"] = error_code_for(e)
                parts.append(out)
            topics.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # -- CreateTopics / DeleteTopics ----------------------------------------------------
    async def create_topics(self, header: RequestHeader, body: dict) -> dict:
        specs, results = [], {}
        for t in body["topics"]:
            name = t["name"]
            err = topic_name_error(name)
            if err is not None:
                results[name] = (int(ErrorCode.INVALID_TOPIC_EXCEPTION), err)
                continue
            try:
                cfg = validate_topic_config({c["name"]: c["value"] for c in t.get("configs", [])})
            except ConfigError as e:
                results[name] = (int(ErrorCode.INVALID_CONFIG), str(e))
                continue
            n = t["num_partitions"] if t["num_partitions"] != -1 else self.settings["num.partitions"]
            rf = t["replication_factor"] if t["replication_factor"] != -1 else self.settings["default.replication.factor"]
            manual = {a["partition_index"]: list(a["broker_ids"]) for a in t.get("assignments", [])}
            specs.append(TopicSpec(name, n, rf, cfg, manual))
        total = sum(len(spec.assignment) if spec.assignment else max(spec.partitions, 0) for spec in specs)
        if total > MAX_PARTITIONS_PER_REQUEST:
            too_many = (int(ErrorCode.POLICY_VIOLATION), _too_many_partitions(total))
            results.update((spec.name, too_many) for spec in specs)
            specs = []
        if body.get("validate_only"):
            for spec in specs:
                results.setdefault(spec.name, self._validate_spec(spec))
        else:
            results.update(await self._create_topics(specs, body.get("timeout_ms", 60000)))
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "error_code": results.get(t["name"], (0, None))[0], "error_message": results.get(t["name"], (0, None))[1]}
            for t in body["topics"]]}

    def _validate_spec(self, spec: TopicSpec) -> tuple[int, str | None]:
        live = sorted(self.cache.brokers)
        if spec.name in self.cache.topics:
            return int(ErrorCode.TOPIC_ALREADY_EXISTS), f"topic {spec.name!r} already exists"
        if spec.assignment:
            return self._validate_assignment(spec.assignment, set(live))
        if spec.partitions <= 0:
            return int(ErrorCode.INVALID_PARTITIONS), f"number of partitions must be positive, got {spec.partitions}"
        if spec.replication_factor <= 0 or spec.replication_factor > len(live):
            return int(ErrorCode.INVALID_REPLICATION_FACTOR), f"replication factor {spec.replication_factor} is not within 1..{len(live)} (live brokers)"
        return 0, None

    @staticmethod
    def _validate_assignment(assignment: dict[int, list[int]], live: set[int]) -> tuple[int, str | None]:
        """Kafka's rules for an explicit assignment: partitions 0..n-1, the same number of
        distinct, live replicas for each."""
        bad = int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        if sorted(assignment) != list(range(len(assignment))):
            return bad, f"partitions must be numbered 0..{len(assignment) - 1}, got {sorted(assignment)}"
        sizes = {len(r) for r in assignment.values()}
        if len(sizes) != 1 or 0 in sizes:
            return bad, "every partition needs the same, non-zero number of replicas"
        for p, replicas in assignment.items():
            if len(set(replicas)) != len(replicas):
                return bad, f"partition {p} lists a broker twice: {replicas}"
            if not set(replicas) <= live:
                return bad, f"partition {p} names brokers that are not live: {sorted(set(replicas) - live)}"
        return 0, None

    async def _create_topics(self, specs: list[TopicSpec], timeout_ms: int) -> dict[str, tuple[int, str | None]]:
        results: dict[str, tuple[int, str | None]] = {}
        created = []
        for spec in specs:
            name = spec.name
            code, msg = self._validate_spec(spec)
            if code:
                results[name] = (code, msg)
                continue
            live = sorted(self.cache.brokers)
            racks = {b: self.cache.brokers[b].rack for b in live}
            try:
                if spec.assignment:
                    assignment = {int(p): list(r) for p, r in spec.assignment.items()}
                else:  # the seeds' round robin from a random start broker (rack aware with racks)
                    assignment = assign_replicas(spec.partitions, spec.replication_factor, live, racks,
                                                 start_index=random.randrange(len(live)), replica_shift=random.randrange(len(live)))
                # A new topic gets its id here, as Kafka's AdminZkClient gives it (KIP-516).
                await asyncio.get_running_loop().run_in_executor(
                    None, self.broker.zk.create_topic_znode, name,
                    TopicAssignment(partitions=assignment, config=spec.config, topic_id=new_topic_id()))
                created.append((name, len(assignment)))
                results[name] = (0, None)
            except TopicAlreadyExistsError:
                results[name] = (int(ErrorCode.TOPIC_ALREADY_EXISTS), f"topic {name!r} already exists")
            except OPERATING_ERRORS as e:  # typed placement errors carry a code; a too large znode too
                results[name] = (error_code_for(e), str(e))
            except ZkError as e:
                results[name] = (int(ErrorCode.REQUEST_TIMED_OUT), f"ZooKeeper: {e}")
        deadline = time.monotonic() + timeout_ms / 1000

        def led(name: str, n: int) -> bool:
            parts = self.cache.topics.get(name, {})
            return len(parts) == n and all(m.leader >= 0 for m in parts.values())

        for name, n in created:
            if not await self.broker.metadata_updates.wait_until(lambda: led(name, n), deadline - time.monotonic()):  # noqa: B023 - awaited here
                if timeout_ms > 0:
                    results[name] = (int(ErrorCode.REQUEST_TIMED_OUT), "topic created; leaders not yet elected")
        return results

    # -- CreatePartitions (seed PartitionAdd) --------------------------------------------
    async def create_partitions(self, header: RequestHeader, body: dict) -> dict:
        """Validate, write /admin/partitions_add/<t>/<p> for the controller, and wait (up to
        timeout_ms) until the new partitions have leaders in our metadata."""
        results: dict[str, tuple[int, str | None]] = {}
        names = [t["name"] for t in body["topics"]]
        waiting: list[tuple[str, int]] = []
        adding = 0  # new partitions accepted so far in this request
        for t in body["topics"]:
            name = t["name"]
            if names.count(name) > 1:
                results[name] = (int(ErrorCode.INVALID_REQUEST), f"topic {name!r} is listed more than once")
                continue
            try:
                adds = await self._partitions_to_add(name, t["count"], t.get("assignments"), adding)
                adding += len(adds)
            except OPERATING_ERRORS as e:
                results[name] = (error_code_for(e), str(e))
                continue
            except ZkError as e:
                results[name] = (int(ErrorCode.REQUEST_TIMED_OUT), f"ZooKeeper: {e}")
                continue
            if not body.get("validate_only"):
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        None, self.broker.zk.request_partition_changes, "add", {(name, p): r for p, r in adds.items()})
                except ZkError as e:
                    results[name] = (int(ErrorCode.REQUEST_TIMED_OUT), f"ZooKeeper: {e}")
                    continue
                waiting.append((name, t["count"]))
            results[name] = (0, None)
        timeout_ms = max(body.get("timeout_ms", 0), 0)
        deadline = time.monotonic() + timeout_ms / 1000

        def led(name: str, n: int) -> bool:
            parts = self.cache.topics.get(name, {})
            return len(parts) >= n and all(parts[p].leader >= 0 for p in range(n) if p in parts)

        for name, n in waiting:
            if not await self.broker.metadata_updates.wait_until(lambda: led(name, n), deadline - time.monotonic()):  # noqa: B023 - awaited here
                if timeout_ms > 0:
                    results[name] = (int(ErrorCode.REQUEST_TIMED_OUT), "partitions requested; leaders not yet elected")
        return {"throttle_time_ms": 0, "results": [
            {"name": t["name"], "error_code": results[t["name"]][0], "error_message": results[t["name"]][1]} for t in body["topics"]]}

    async def _partitions_to_add(self, name: str, count: int, assignments: list | None,
                                 adding: int) -> dict[int, list[int]]:
        """Kafka's checks: a known topic, more partitions than now, not being reassigned; an
        explicit assignment lists live, distinct brokers, as many as the topic's replication
        factor, per new partition. Without one, placement continues the topic's round robin
        (rack aware with racks) from its partition 0's first broker. At most
        MAX_PARTITIONS_PER_REQUEST new partitions in one request (`adding` are already
        accepted), and the topic's assignment must still fit in its znode."""
        if topic_name_error(name) is not None:
            raise fail(ErrorCode.INVALID_TOPIC_EXCEPTION, topic_name_error(name))
        if name == OFFSETS_TOPIC:  # every tool maps a group to a partition by the partition count
            raise fail(ErrorCode.INVALID_PARTITIONS, f"the partition count of the internal topic {OFFSETS_TOPIC} cannot change")
        found = await asyncio.get_running_loop().run_in_executor(None, self.broker.zk.get_topic_assignment, name)
        if found is None:
            raise fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = found[0]
        n = len(current.partitions)
        if count <= n:
            raise fail(ErrorCode.INVALID_PARTITIONS, f"topic {name!r} has {n} partitions; the new count {count} must be higher"
                                         " (removing partitions: kafkalite topics alter --partitions N --force)")
        if current.adding_replicas or current.removing_replicas:
            raise fail(ErrorCode.REASSIGNMENT_IN_PROGRESS, f"topic {name!r} has partitions being reassigned")
        if adding + count - n > MAX_PARTITIONS_PER_REQUEST:
            raise fail(ErrorCode.POLICY_VIOLATION, _too_many_partitions(adding + count - n))
        adds = self._new_partitions(current, count, assignments)
        check_write_size(zk_paths.topic_path(name), encode_topic_assignment(
            dataclasses.replace(current, partitions={**current.partitions, **adds})))
        return adds

    def _new_partitions(self, current: TopicAssignment, count: int, assignments: list | None) -> dict[int, list[int]]:
        n = len(current.partitions)
        rf = len(current.partitions[0])
        live = sorted(self.cache.brokers)
        if assignments is not None:
            if len(assignments) != count - n:
                raise fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{len(assignments)} assignments for {count - n} new partitions")
            adds = {n + i: list(a["broker_ids"]) for i, a in enumerate(assignments)}
            for p, replicas in adds.items():
                if len(replicas) != rf or len(set(replicas)) != rf:
                    raise fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {p} needs {rf} distinct replicas, got {replicas}")
                if not set(replicas) <= set(live):
                    raise fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {p} names brokers that are not live: {sorted(set(replicas) - set(live))}")
            return adds
        if rf > len(live):
            raise fail(ErrorCode.INVALID_REPLICATION_FACTOR, f"replication factor {rf} is more than the {len(live)} live brokers")
        first = current.partitions[0][0]
        start = next((i for i, b in enumerate(live) if b >= first), 0)
        racks = {b: self.cache.brokers[b].rack for b in live}
        return assign_replicas(count - n, rf, live, racks, start_index=start, replica_shift=random.randrange(len(live)),
                               start_partition_id=n)

    async def delete_topics(self, header: RequestHeader, body: dict) -> dict:
        out = []
        waiting = []
        loop = asyncio.get_running_loop()
        for name in body["topic_names"]:
            if topic_name_error(name) is not None:
                out.append({"name": name, "error_code": int(ErrorCode.INVALID_TOPIC_EXCEPTION)})
            elif name == OFFSETS_TOPIC:
                out.append({"name": name, "error_code": int(ErrorCode.INVALID_TOPIC_EXCEPTION)})  # internal, as in Kafka
            elif not self.settings["delete.topic.enable"]:
                out.append({"name": name, "error_code": int(ErrorCode.TOPIC_DELETION_DISABLED)})
            elif name not in self.cache.topics:
                out.append({"name": name, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})
            else:
                try:
                    await loop.run_in_executor(None, self.broker.zk.mark_topic_for_deletion, name)
                    out.append({"name": name, "error_code": 0})
                    waiting.append(name)
                except ZkError:
                    out.append({"name": name, "error_code": int(ErrorCode.REQUEST_TIMED_OUT)})
        deadline = time.monotonic() + body["timeout_ms"] / 1000
        for name in waiting:
            gone = await self.broker.metadata_updates.wait_until(lambda: name not in self.cache.topics, deadline - time.monotonic())  # noqa: B023
            if not gone:
                for r in out:
                    if r["name"] == name:
                        r["error_code"] = int(ErrorCode.REQUEST_TIMED_OUT)
        return {"throttle_time_ms": 0, "responses": out}

    # -- FindCoordinator ----------------------------------------------------------------
    async def find_coordinator(self, header: RequestHeader, body: dict) -> dict:
        """The group's coordinator: the leader of its `__consumer_offsets` partition, as
        Kafka computes it (the topic is created by the first FindCoordinator, as in Kafka;
        clients retry COORDINATOR_NOT_AVAILABLE meanwhile)."""

        def answer(code: ErrorCode, message: str | None, node: Any = None) -> dict:
            host, port = node.address_for(current_listener.get()) if node else ("", -1)
            return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
                    "node_id": node.id if node else -1, "host": host, "port": port}

        if body.get("key_type", 0) != 0:
            return answer(ErrorCode.INVALID_REQUEST, "transaction coordinators are not supported: only key_type 0 (group)")
        if OFFSETS_TOPIC not in self.cache.topics:
            await self._create_offsets_topic()
        parts = self.cache.topics.get(OFFSETS_TOPIC)
        if not parts:
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is being created")
        meta = parts.get(partition_for(body["key"], len(parts)))
        node = self.cache.brokers.get(meta.leader) if meta is not None else None
        if node is None:
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group's offsets partition has no live leader")
        return answer(ErrorCode.NONE, None, node)

    async def _create_offsets_topic(self) -> None:
        """`offsets.topic.num.partitions` partitions, replicated on min(RF, live brokers),
        compacted, acknowledged by min(2, RF) replicas."""
        live = len(self.cache.brokers)
        if live == 0:
            return
        rf = min(self.settings["offsets.topic.replication.factor"], live)
        config = {"cleanup.policy": "compact", "min.insync.replicas": str(min(2, rf)),
                  "segment.bytes": str(self.settings["offsets.topic.segment.bytes"])}
        spec = TopicSpec(OFFSETS_TOPIC, self.settings["offsets.topic.num.partitions"], rf, config, {})
        results = await self._create_topics([spec], OFFSETS_TOPIC_CREATE_WAIT_MS)
        code, message = results[OFFSETS_TOPIC]
        if code not in (0, int(ErrorCode.TOPIC_ALREADY_EXISTS)):
            log.warning("creating %s: %s", OFFSETS_TOPIC, message)
        elif code == 0:
            log.info("created %s: %d partitions, replication factor %d", OFFSETS_TOPIC, spec.partitions, rf)

    # -- InitProducerId -----------------------------------------------------------------
    async def init_producer_id(self, header: RequestHeader, body: dict) -> dict:
        if body.get("transactional_id"):
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST), "producer_id": -1, "producer_epoch": -1}
        try:
            pid = await self.broker.next_producer_id()
        except ZkError:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "producer_id": -1, "producer_epoch": -1}
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}

    # -- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs (kafkalite.broker.config_apis)
    async def describe_configs(self, header: RequestHeader, body: dict) -> dict:
        return await self.configs.describe_configs(header.api_version, body)

    async def alter_configs(self, header: RequestHeader, body: dict) -> dict:
        return await self.configs.alter_configs(body, incremental=False)

    async def incremental_alter_configs(self, header: RequestHeader, body: dict) -> dict:
        return await self.configs.alter_configs(body, incremental=True)

    # -- ElectLeaders (preferred replica election, KIP-460 type 0) -----------------------
    async def elect_leaders(self, header: RequestHeader, body: dict) -> dict:
        """Decide NOT NEEDED / UNKNOWN here from the metadata cache, forward the rest to the
        controller's PreferredElection, then wait (up to timeout_ms) until this broker's
        cache shows the elected leaders, so a Metadata request right after sees them."""
        cache = self.cache
        requested = body.get("topic_partitions")
        if requested is None:
            tps = [(t, p) for t in sorted(cache.topics) for p in sorted(cache.topics[t])]
        else:
            tps = [(t["topic"], p) for t in requested for p in t["partition_id"]]
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        candidates = []
        for tp in tps:
            meta = cache.partition(*tp)
            if meta is None:
                results[tp] = (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "unknown topic or partition")
            elif meta.replicas and meta.leader == meta.replicas[0]:
                results[tp] = (int(ErrorCode.ELECTION_NOT_NEEDED), "the preferred replica is already the leader")
            else:
                candidates.append(tp)
        timeout_ms = max(body.get("timeout_ms", 60000), 1000)
        if candidates:
            results.update(await self._preferred_election(candidates, timeout_ms))
        out: dict[str, list] = {}
        for tp in tps:
            code, message = results[tp]
            out.setdefault(tp[0], []).append({"partition_id": tp[1], "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "error_code": 0,
                "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in out.items()]}

    async def _preferred_election(self, tps: list, timeout_ms: int) -> dict:
        client = self.broker.peer_client(self.cache.controller_id) if self.cache.controller_id >= 0 else None
        if client is None:
            return {tp: (int(ErrorCode.NOT_CONTROLLER), "no controller known") for tp in tps}
        try:
            reply, _ = await client.call("PreferredElection", PreferredElectionRequest(tuple(tps)).to_wire(), timeout_ms=timeout_ms)
        except RpcError as e:
            return {tp: (int(ErrorCode.REQUEST_TIMED_OUT), str(e)) for tp in tps}
        answer = PreferredElectionResponse.from_wire(reply)
        if answer.error != 0:
            return {tp: (answer.error, "the controller refused the election") for tp in tps}
        elected = set(answer.elected)
        results = {}
        for tp in tps:
            if tp in elected:
                results[tp] = (0, None)
            else:
                results[tp] = (int(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE), "the preferred replica is not alive or not in the ISR")

        def preferred_lead() -> bool:
            metas = [self.cache.partition(*tp) for tp in elected]
            return all(m is None or (m.replicas and m.leader == m.replicas[0]) for m in metas)

        await self.broker.metadata_updates.wait_until(preferred_lead, timeout_ms / 1000)
        return results


def _too_many_partitions(n: int) -> str:
    return (f"Excessively large number of partitions per request: {n}, at most {MAX_PARTITIONS_PER_REQUEST} "
            "(create them in several requests)")


_HANDLERS = {
    ApiKey.API_VERSIONS: KafkaApis.api_versions,
    ApiKey.SASL_HANDSHAKE: KafkaApis.sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: KafkaApis.sasl_authenticate,
    ApiKey.METADATA: KafkaApis.metadata,
    ApiKey.PRODUCE: KafkaApis.produce,
    ApiKey.FETCH: KafkaApis.fetch,
    ApiKey.LIST_OFFSETS: KafkaApis.list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: KafkaApis.offset_for_leader_epoch,
    ApiKey.CREATE_TOPICS: KafkaApis.create_topics,
    ApiKey.DELETE_TOPICS: KafkaApis.delete_topics,
    ApiKey.INIT_PRODUCER_ID: KafkaApis.init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: KafkaApis.describe_configs,
    ApiKey.ALTER_CONFIGS: KafkaApis.alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: KafkaApis.incremental_alter_configs,
    ApiKey.ELECT_LEADERS: KafkaApis.elect_leaders,
    ApiKey.CREATE_PARTITIONS: KafkaApis.create_partitions,
    ApiKey.FIND_COORDINATOR: KafkaApis.find_coordinator,
    ApiKey.DESCRIBE_ACLS: lambda apis, header, body: acl_apis.describe_acls(apis.broker, header, body),
    ApiKey.CREATE_ACLS: lambda apis, header, body: acl_apis.create_acls(apis.broker, header, body),
    ApiKey.DELETE_ACLS: lambda apis, header, body: acl_apis.delete_acls(apis.broker, header, body),
    ApiKey.DELETE_RECORDS: records_apis.delete_records_handler,
    ApiKey.DESCRIBE_LOG_DIRS: records_apis.describe_log_dirs_handler,
}
