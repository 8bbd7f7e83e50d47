"""A small synchronous admin client for the `kafkalite` CLI, speaking the Kafka protocol.

Requests are encoded and responses decoded with kafkalite.protocol.codec over a plain
blocking socket with timeouts; no asyncio, no threads. Metadata goes to the first bootstrap
server that answers; CreateTopics, DeleteTopics and ElectLeaders go to the controller named
by Metadata (as Kafka's admin client does), falling back to any broker when it cannot be
reached (not when it was sent the request but did not answer: see `_request_any`).

Every failure a user can cause or meet (nothing listening, unknown topic, topic exists, a
replication factor the cluster cannot hold, a bad config) is an ``AdminError`` whose message
is one line fit for stderr. Anything else is a bug and raises as it is.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkalite.cli import client_security
from kafkalite.protocol.codec import decode_response, encode_request
from kafkalite.protocol.errors import ErrorCode, KafkaliteError
from kafkalite.protocol.schema import ApiKey

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "KAFKALITE_BOOTSTRAP"
CLIENT_ID = "kafkalite-cli"
CONNECT_TIMEOUT_MS = 3000
# CreateTopics/DeleteTopics/ElectLeaders wait on the broker up to this long; the socket
# waits a little longer so the broker's answer (even a timeout) arrives.
REQUEST_TIMEOUT_MS = 30000
SOCKET_SLACK_MS = 5000
RESPONSE_BYTES_MAX = 100 << 20

METADATA_VERSION = 8
CREATE_TOPICS_VERSION = 4
DELETE_TOPICS_VERSION = 3
ELECT_LEADERS_VERSION = 1
CREATE_PARTITIONS_VERSION = 1
DESCRIBE_CONFIGS_VERSION = 1
INCREMENTAL_ALTER_CONFIGS_VERSION = 0
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

_LENGTH = struct.Struct(">i")


class AdminError(Exception):
    """An operating error; ``str(e)`` is one line for the user."""


class NoBrokerError(AdminError):
    pass


class TopicNotReadyError(AdminError):
    """The topic was created, but the broker's wait for every partition's leader ended
    first (a big topic takes longer than the request timeout): `wait_for_leaders`."""


# `topics create` keeps waiting for leaders while their number grows; it gives up after
# this long without one more partition getting a leader.
LEADERS_STALL_TIMEOUT_S = 120.0
LEADERS_POLL_INTERVAL_S = 0.5


def resolve_bootstrap(value: str | None) -> str:
    """--bootstrap, else $KAFKALITE_BOOTSTRAP, else the command config's bootstrap.servers,
    else 127.0.0.1:9092."""
    return value or os.environ.get(BOOTSTRAP_ENV) or client_security.bootstrap_default() or DEFAULT_BOOTSTRAP


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2' -> [(h1, p1), (h2, p2)]; raises ValueError naming the bad entry (also
    a host name the resolver cannot take: an empty label, one over 63 characters)."""
    servers = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad bootstrap server {item!r}; expected host:port")
        host = host.strip("[]")
        problem = host_name_problem(host)
        if problem:
            raise ValueError(f"bad bootstrap server {item!r}: {problem}")
        servers.append((host, int(port)))
    if not servers:
        raise ValueError("no bootstrap server given")
    return servers


def host_name_problem(host: str) -> str | None:
    """Why `host` cannot be looked up (None if it can): socket's resolver encodes a name
    with the idna codec, which raises UnicodeError (not OSError) for an empty label
    (`broker1..example.com`) or one longer than 63 characters."""
    try:
        host.encode("idna")
    except UnicodeError:
        return f"bad host name {host!r} (empty label, or a label over 63 characters)"
    return None


# The range of each Kafka protocol integer type, for command-line values that go on the wire.
INT16_RANGE = (-(1 << 15), (1 << 15) - 1)
INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)


def wire_int(wire_range: tuple[int, int], wire_type: str) -> Callable[[str], int]:
    """An argparse `type` for an integer sent as `wire_type`: a value it cannot hold is a
    usage error (exit 2) naming the range, not a struct.error when the request is encoded."""
    low, high = wire_range

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({wire_type}: {low}..{high})")
        return value

    return parse


int16_arg = wire_int(INT16_RANGE, "int16")
int32_arg = wire_int(INT32_RANGE, "int32")
int64_arg = wire_int(INT64_RANGE, "int64")


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


@dataclass(frozen=True)
class BrokerMeta:
    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    error_code: int

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition, "leader": self.leader, "leader_epoch": self.leader_epoch,
            "replicas": self.replicas, "isr": self.isr, "offline_replicas": self.offline_replicas,
            "under_replicated": self.under_replicated, "offline": self.offline,
        }


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: list[PartitionInfo]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "partitions": [p.to_json() for p in self.partitions]}


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerMeta]
    topics: dict[str, TopicInfo] = field(default_factory=dict)

    def broker(self, broker_id: int) -> BrokerMeta | None:
        return next((b for b in self.brokers if b.id == broker_id), None)


def encode_request_or_fail(api: ApiKey, version: int, correlation_id: int, body: dict) -> bytes:
    """The request's bytes; AdminError when a value does not fit its field (a topic name
    over 32767 bytes, a number too big for its integer type): the codec raises
    struct.error or ValueError, which a user's input must not turn into a traceback."""
    try:
        return encode_request(api, version, correlation_id, CLIENT_ID, body)
    except (struct.error, ValueError, OverflowError) as e:
        raise AdminError(f"cannot send {api.name}: a value does not fit the Kafka protocol ({e})") from None


class _Connection:
    """One blocking socket to one broker; one request at a time."""

    def __init__(self, host: str, port: int, timeout_ms: int):
        self.address = f"{host}:{port}"
        problem = host_name_problem(host)  # a broker may advertise a name the resolver refuses
        if problem:
            raise OSError(problem)
        # TLS and SASL as --command-config says (plain TCP without one)
        self.sock = client_security.connect(host, port, CONNECT_TIMEOUT_MS / 1000, timeout_ms / 1000, CLIENT_ID)
        self._correlation_ids = itertools.count(1)

    def request(self, api: ApiKey, version: int, body: dict) -> dict:
        correlation_id = next(self._correlation_ids)
        self.sock.sendall(encode_request_or_fail(api, version, correlation_id, body))
        (size,) = _LENGTH.unpack(self._read_exactly(_LENGTH.size))
        if not 0 < size <= RESPONSE_BYTES_MAX:
            raise OSError(f"bad response size {size}")
        got_id, response = decode_response(api, version, self._read_exactly(size))
        if got_id != correlation_id:
            raise OSError(f"correlation id {got_id}, expected {correlation_id}")
        return response

    def _read_exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise OSError("connection closed by the broker")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


class AdminClient:
    def __init__(self, bootstrap: str, *, request_timeout_ms: int = REQUEST_TIMEOUT_MS):
        try:
            self.servers = parse_bootstrap(bootstrap)
        except ValueError as e:
            raise AdminError(str(e)) from None
        self.bootstrap = bootstrap
        self.request_timeout_ms = request_timeout_ms
        self._connections: dict[tuple[str, int], _Connection] = {}

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    # -- transport ----------------------------------------------------------------------
    def _request_to(self, address: tuple[str, int], api: ApiKey, version: int, body: dict) -> dict:
        return self._request_on(address, self._connect(address), api, version, body)

    def _connect(self, address: tuple[str, int]) -> _Connection:
        """The connection to `address`, opened if needed; an error here means nothing was sent."""
        conn = self._connections.get(address)
        if conn is None:
            conn = self._connections[address] = _Connection(*address, self.request_timeout_ms + SOCKET_SLACK_MS)
        return conn

    def _request_on(self, address: tuple[str, int], conn: _Connection, api: ApiKey, version: int, body: dict) -> dict:
        try:
            return conn.request(api, version, body)
        except (OSError, KafkaliteError):
            self._drop(address)
            raise

    def request_broker(self, host: str, port: int, api: ApiKey, version: int, body: dict) -> dict:
        """One request to one broker (DeleteRecords to a leader, DescribeLogDirs to each
        broker); NoBrokerError when it does not answer."""
        try:
            return self._request_to((host, port), api, version, body)
        except (OSError, KafkaliteError) as e:
            raise NoBrokerError(f"broker at {host}:{port} did not answer ({e})") from None

    def _drop(self, address: tuple[str, int]) -> None:
        conn = self._connections.pop(address, None)
        if conn is not None:
            conn.close()

    def _request_any(self, api: ApiKey, version: int, body: dict, first: tuple[str, int] | None = None,
                     *, idempotent: bool = True) -> dict:
        """Try ``first`` (the controller), then every bootstrap server in turn. A request
        that is not `idempotent` (CreateTopics, DeleteTopics, CreatePartitions) goes to the
        next one only if it could not be sent: once sent, a broker that timed out may be
        carrying it out, and sent again it would come back "already exists" (or "unknown
        topic") while the first one succeeds."""
        order = ([first] if first else []) + [s for s in self.servers if s != first]
        last: Exception | None = None
        for address in order:
            try:
                conn = self._connect(address)
            except (OSError, KafkaliteError) as e:
                last = e
                continue
            try:
                return self._request_on(address, conn, api, version, body)
            except (OSError, KafkaliteError) as e:
                if not idempotent:
                    raise _unanswered(api, conn.address, e) from None
                last = e
        assert last is not None
        if isinstance(last, (socket.timeout, TimeoutError)):
            raise NoBrokerError(f"no answer from the brokers at {self.bootstrap} (timed out)")
        if isinstance(last, client_security.SecurityHandshakeError):
            raise NoBrokerError(f"no broker reachable at {self.bootstrap}: {last}")
        raise NoBrokerError(f"no broker reachable at {self.bootstrap}")

    # -- Metadata -----------------------------------------------------------------------
    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        """All topics (None) or the named ones; an unknown name raises AdminError."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        response = self._request_any(ApiKey.METADATA, METADATA_VERSION, body)
        brokers = [BrokerMeta(b["node_id"], b["host"], b["port"], b["rack"]) for b in response["brokers"]]
        out: dict[str, TopicInfo] = {}
        for t in response["topics"]:
            code = t["error_code"]
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise AdminError(f"unknown topic {t['name']!r}")
            if code == ErrorCode.INVALID_TOPIC_EXCEPTION:
                raise AdminError(f"invalid topic name {t['name']!r}")
            if code != 0:
                raise AdminError(f"topic {t['name']!r}: {error_name(code)}")
            parts = sorted((PartitionInfo(p["partition_index"], p["leader_id"], p["leader_epoch"],
                                          list(p["replica_nodes"]), list(p["isr_nodes"]),
                                          list(p["offline_replicas"]), p["error_code"])
                            for p in t["partitions"]), key=lambda p: p.partition)
            out[t["name"]] = TopicInfo(t["name"], parts)
        return ClusterMetadata(response["cluster_id"], response["controller_id"],
                               sorted(brokers, key=lambda b: b.id), dict(sorted(out.items())))

    def _controller_address(self) -> tuple[str, int] | None:
        meta = self.metadata([])
        controller = meta.broker(meta.controller_id)
        return (controller.host, controller.port) if controller else None

    # -- CreateTopics / DeleteTopics ----------------------------------------------------
    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str] | None = None) -> None:
        body = {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": self.request_timeout_ms, "validate_only": False,
        }
        response = self._request_any(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, body, self._controller_address(),
                                     idempotent=False)
        for t in response["topics"]:
            code = t["error_code"]
            if code == ErrorCode.TOPIC_ALREADY_EXISTS:
                raise AdminError(f"topic {name!r} already exists")
            if code == ErrorCode.REQUEST_TIMED_OUT and (t["error_message"] or "").startswith("topic created"):
                raise TopicNotReadyError(t["error_message"])
            if code != 0:
                raise AdminError(t["error_message"] or error_name(code))

    def wait_for_leaders(self, name: str, partitions: int, *, stall_timeout_s: float = LEADERS_STALL_TIMEOUT_S,
                         on_progress=None, clock=time.monotonic, sleep=time.sleep) -> None:
        """Until every one of the topic's `partitions` has a leader in Metadata, for as long
        as that takes while it progresses: AdminError after `stall_timeout_s` without one
        more partition led. A broker too busy to answer, or not yet knowing the topic,
        counts as no progress. `on_progress(led, partitions)` hears each increase."""
        best = -1
        last_progress = clock()
        while True:
            led = 0
            try:
                topic = self.metadata([name]).topics.get(name)
                if topic is not None:
                    led = sum(1 for p in topic.partitions if p.leader >= 0)
                    if len(topic.partitions) == partitions and led == partitions:
                        if on_progress is not None and led > best:
                            on_progress(led, partitions)
                        return
            except NoBrokerError:
                pass
            except AdminError as e:
                if "unknown topic" not in str(e):
                    raise
            if led > best:
                best, last_progress = led, clock()
                if on_progress is not None:
                    on_progress(led, partitions)
            elif clock() - last_progress > stall_timeout_s:
                raise AdminError(f"topic {name!r} was created, but {partitions - max(best, 0)} of its {partitions} "
                                 f"partitions still have no leader ({stall_timeout_s:.0f} s without progress)")
            sleep(LEADERS_POLL_INTERVAL_S)

    def delete_topic(self, name: str) -> None:
        body = {"topic_names": [name], "timeout_ms": self.request_timeout_ms}
        response = self._request_any(ApiKey.DELETE_TOPICS, DELETE_TOPICS_VERSION, body, self._controller_address(),
                                     idempotent=False)
        for r in response["responses"]:
            code = r["error_code"]
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise AdminError(f"unknown topic {name!r}")
            if code == ErrorCode.TOPIC_DELETION_DISABLED:
                raise AdminError("topic deletion is disabled on the brokers (delete.topic.enable=false)")
            if code != 0:
                raise AdminError(f"deleting topic {name!r} failed: {error_name(code)}")

    # -- CreatePartitions ---------------------------------------------------------------
    def create_partitions(self, name: str, count: int) -> None:
        """Grow `name` to `count` partitions (Kafka's CreatePartitions); placement by the
        broker, continuing the topic's round robin."""
        body = {"topics": [{"name": name, "count": count, "assignments": None}],
                "timeout_ms": self.request_timeout_ms, "validate_only": False}
        response = self._request_any(ApiKey.CREATE_PARTITIONS, CREATE_PARTITIONS_VERSION, body, self._controller_address(),
                                     idempotent=False)
        for r in response["results"]:
            if r["error_code"] != 0:
                raise AdminError(r["error_message"] or error_name(r["error_code"]))

    # -- ElectLeaders -------------------------------------------------------------------
    def elect_preferred_leaders(self, partitions: list[tuple[str, int]] | None) -> list[tuple[str, int, int, str | None]]:
        """Preferred leader election (ElectLeaders, type 0) for the given partitions, or
        all of them (None). Returns (topic, partition, error code, message) per partition."""
        requested = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, p in partitions:
                by_topic.setdefault(topic, []).append(p)
            requested = [{"topic": t, "partition_id": ps} for t, ps in by_topic.items()]
        body = {"election_type": 0, "topic_partitions": requested, "timeout_ms": self.request_timeout_ms}
        response = self._request_any(ApiKey.ELECT_LEADERS, ELECT_LEADERS_VERSION, body, self._controller_address())
        if response["error_code"] != 0:
            raise AdminError(f"leader election failed: {error_name(response['error_code'])}")
        return sorted((r["topic"], p["partition_id"], p["error_code"], p["error_message"])
                      for r in response["replica_election_results"] for p in r["partition_result"])


    # -- DescribeConfigs / IncrementalAlterConfigs ---------------------------------------
    def _broker_address(self, resource_type: int, name: str) -> tuple[str, int] | None:
        """A broker's own configs are described by that broker (as Kafka's are)."""
        if resource_type != RESOURCE_BROKER or name == "":
            return None
        meta = self.metadata([])
        broker = meta.broker(int(name))
        if broker is None:
            raise AdminError(f"broker {name} is not alive (known: {', '.join(str(b.id) for b in meta.brokers) or 'none'})")
        return (broker.host, broker.port)

    def describe_configs(self, resource_type: int, name: str) -> list[dict[str, Any]]:
        """Every config of a topic (2) or a broker (4; "" the cluster-wide dynamic
        defaults): dicts with name, value, source (Kafka's number), read_only, sensitive."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": False}
        address = self._broker_address(resource_type, name)
        response = (self._request_to(address, ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, body) if address
                    else self._request_any(ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, body))
        (result,) = response["results"]
        if result["error_code"] != 0:
            raise AdminError(result["error_message"] or error_name(result["error_code"]))
        return [{"name": c["name"], "value": c["value"], "source": c["config_source"], "read_only": c["read_only"],
                 "sensitive": c["is_sensitive"]} for c in result["configs"]]

    def incremental_alter_configs(self, resource_type: int, name: str, sets: dict[str, str], deletes: list[str]) -> None:
        """SET and DELETE (IncrementalAlterConfigs); AdminError carries the broker's message."""
        configs = [{"name": k, "config_operation": 0, "value": v} for k, v in sets.items()]
        configs += [{"name": k, "config_operation": 1, "value": None} for k in deletes]
        body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": configs}], "validate_only": False}
        response = self._request_any(ApiKey.INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS_VERSION, body)
        (result,) = response["responses"]
        if result["error_code"] != 0:
            raise AdminError(result["error_message"] or error_name(result["error_code"]))


def _unanswered(api: ApiKey, address: str, error: Exception) -> NoBrokerError:
    """A non-idempotent request sent to `address` whose answer never came. "timed out" in
    the message is what `topics create` waits for leaders on."""
    if isinstance(error, (socket.timeout, TimeoutError)):
        return NoBrokerError(f"no answer from the broker at {address} to {api.name} (timed out); it may still be carried out")
    return NoBrokerError(f"the broker at {address} did not answer {api.name} ({error}); it may have been carried out")


# -- glue shared by the CLI modules --------------------------------------------------------

def add_bootstrap_argument(parser: Any) -> None:
    parser.add_argument("--bootstrap", metavar="HOST:PORT[,...]", default=None,
                        help=f"brokers to contact (default ${BOOTSTRAP_ENV}, else the command config's bootstrap.servers, "
                             f"else {DEFAULT_BOOTSTRAP})")
    add_command_config_argument(parser)


def add_command_config_argument(parser: Any) -> None:
    parser.add_argument("--command-config", metavar="FILE", default=None,
                        help="librdkafka properties for TLS/SASL (security.protocol, sasl.mechanisms, sasl.username, "
                             f"sasl.password, ssl.ca.location, ...; default ${client_security.COMMAND_CONFIG_ENV}), "
                             "e.g. the client.properties of `bin/cluster up --secure`")


def fail(command: str, message: str, code: int = 1) -> int:
    """Print one line on stderr and return the exit code (1 failed, 2 usage)."""
    import sys

    print(f"kafkalite {command}: {message}", file=sys.stderr)
    return code


def counted(n: int, noun: str) -> str:
    """'1 member', '2 members'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def console_for_tables() -> Any:
    """A rich Console; when stdout is not a terminal (pipes, tests) it is wide enough that
    no table cell wraps, so `grep UNDER-REPLICATED` works.

    Strings print as they are: no console markup, no :emoji: codes. The tables and lines
    carry names from the cluster (ACL principals and names, group, member and client ids,
    config values, hosts), and as markup a group named "[/]g" raised MarkupError and the
    principal "User:[red]eve" showed as "User:eve". Styles are given as rich Text."""
    import sys

    from rich.console import Console

    plain = {"markup": False, "emoji": False}
    return Console(**plain) if sys.stdout.isatty() else Console(width=250, **plain)
