"""Typed, validated broker settings (DESIGN.md section 8).

Kafka's property names wherever an equivalent exists. A config file is TOML or Java
.properties; KAFKALITE_CFG_<KEY> environment variables (`kafkalite broker`) win over the
file, and `--override key=value` over both. An unknown key or a bad value is a
start-up error (ConfigError) whose message names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafkalite.core.replica_selector import BUILTIN_SELECTORS, ReplicaSelector
from kafkalite.log.config import DEDUPE_BUFFER_BYTES_MIN, parse_cleanup_policy
from kafkalite.rpc.framing import RECORD_BATCH_BYTES_MAX, REPLICA_FETCH_RESPONSE_BYTES_MAX, RPC_FRAME_BYTES_MAX


class ConfigError(Exception):
    """A configuration problem a user can fix; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # "int" (Kafka's INT, 32 bits), "long" (LONG, 64 bits), "bool", "str", "list", "float"
    default: Any
    doc: str
    check: Callable[[Any], bool] | None = None
    allowed: str = ""


def _positive(v: int) -> bool:
    return v > 0


def _non_negative(v: int) -> bool:
    return v >= 0


def _minus_one_or_positive(v: int) -> bool:
    return v == -1 or v > 0


# Sizes that travel in one inter-broker frame (kafkalite.rpc.framing): a replica fetch
# answer that could not fit would be refused by the follower, and the same fetch resent
# forever.
def _replica_fetch_bytes(v: int) -> bool:
    return 0 < v <= REPLICA_FETCH_RESPONSE_BYTES_MAX


_REPLICA_FETCH_BYTES_ALLOWED = (f"1 to {REPLICA_FETCH_RESPONSE_BYTES_MAX} (a replica fetch answer must fit in one "
                                f"inter-broker frame of at most {RPC_FRAME_BYTES_MAX} bytes)")


def _record_batch_bytes(v: int) -> bool:
    return 0 < v <= RECORD_BATCH_BYTES_MAX


_RECORD_BATCH_BYTES_ALLOWED = (f"1 to {RECORD_BATCH_BYTES_MAX} (a batch must fit in a replica fetch answer, one "
                               f"inter-broker frame of at most {RPC_FRAME_BYTES_MAX} bytes)")


def _ratio(v: float) -> bool:
    return 0.0 <= v <= 1.0


def _listener(v: str) -> bool:
    return _parse_listener(v) is not None


_LISTENER_RE = re.compile(r"^(?:[A-Za-z_]+://)?([^:/]*):(\d{1,5})$")


def _parse_listener(v: str) -> tuple[str, int] | None:
    m = _LISTENER_RE.match(v.strip())
    if m is None:
        return None
    port = int(m.group(2))
    if port > 65535:
        return None
    return (m.group(1) or "127.0.0.1", port)


_NAMED_LISTENER_RE = re.compile(r"^(?:([A-Za-z_][A-Za-z0-9_]*)://)?([^:/,]*):(\d{1,5})$")


def _parse_listeners(v: str) -> list[tuple[str | None, str, int]] | None:
    """`NAME://HOST:PORT,...` (NAME optional) -> [(NAME upper-cased or None, host, port)];
    None if any entry is malformed, a name or a port repeats, or there is none."""
    out: list[tuple[str | None, str, int]] = []
    for item in v.split(","):
        m = _NAMED_LISTENER_RE.match(item.strip())
        if m is None or int(m.group(3)) > 65535:
            return None
        out.append((m.group(1).upper() if m.group(1) else None, m.group(2), int(m.group(3))))
    names = [n or "PLAINTEXT" for n, _, _ in out]
    if not out or len(set(names)) != len(names):
        return None
    return out


def _listeners_ok(v: str) -> bool:
    parsed = _parse_listeners(v)
    return parsed is not None and len({p for _, _, p in parsed}) == len(parsed)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
SSL_CLIENT_AUTH = ("none", "requested", "required")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _parse_protocol_map(v: str) -> dict[str, str] | None:
    """Kafka's `listener.security.protocol.map`: NAME:PROTOCOL,... -> {NAME: PROTOCOL};
    None if an entry is malformed, a name repeats or a protocol is not one of Kafka's four."""
    out: dict[str, str] = {}
    for item in v.split(","):
        name, sep, protocol = item.strip().partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name) or protocol not in SECURITY_PROTOCOLS or name in out:
            return None
        out[name] = protocol
    return out


def _mechanisms_ok(v: list[str]) -> bool:
    return all(m.upper() in SASL_MECHANISMS for m in v)


def protocol_uses_tls(security_protocol: str) -> bool:
    """Kafka's security protocols that run over TLS."""
    return security_protocol in ("SSL", "SASL_SSL")


def protocol_uses_sasl(security_protocol: str) -> bool:
    """Kafka's security protocols that authenticate with SASL."""
    return security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclasses.dataclass(frozen=True)
class ClientListenerConfig:
    """One Kafka-protocol listener: where it binds, what clients are told to use, and its
    security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)."""

    name: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def tls(self) -> bool:
        return protocol_uses_tls(self.security_protocol)

    @property
    def sasl(self) -> bool:
        return protocol_uses_sasl(self.security_protocol)


THROTTLE_UNLIMITED = (1 << 63) - 1  # Kafka's default replication throttle: Long.MAX_VALUE, none

# `authorizer.class.name` values that turn on kafkalite's ACL authorizer: Kafka's two
# class names (so a Kafka server.properties works unchanged) and our own.
AUTHORIZER_CLASS_NAMES = frozenset({"", "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                                    "kafkalite.AclAuthorizer"})

_SETTINGS: tuple[Setting, ...] = (
    Setting("broker.id", "int", None, "unique id of this broker", _non_negative, ">= 0"),
    Setting("listeners", "str", "PLAINTEXT://127.0.0.1:9092",
            "client listeners, NAME://HOST:PORT,... (each NAME's security protocol comes from listener.security.protocol.map; "
            "a client is told the brokers' addresses of the listener it connected to; the first one is the address peers and "
            "tools find in ZooKeeper)", _listeners_ok,
            "HOST:PORT or NAME://HOST:PORT[,NAME://HOST:PORT...] with distinct names and ports"),
    Setting("advertised.listeners", "str", "", "addresses clients are told to use, by listener name (default: each listener's own)",
            lambda v: v == "" or _parse_listeners(v) is not None, "empty, HOST:PORT or NAME://HOST:PORT[,...]"),
    Setting("listener.security.protocol.map", "str", DEFAULT_PROTOCOL_MAP,
            "security protocol of each listener name, NAME:PROTOCOL,... (Kafka's default maps each protocol's own name)",
            lambda v: _parse_protocol_map(v) is not None, "NAME:PROTOCOL[,...] with PROTOCOL one of " + ", ".join(SECURITY_PROTOCOLS)),
    Setting("ssl.certificate.location", "str", "", "PEM file of this broker's certificate (and chain) for SSL and SASL_SSL listeners"),
    Setting("ssl.key.location", "str", "", "PEM file of the private key of ssl.certificate.location"),
    Setting("ssl.key.password", "str", "", "password of ssl.key.location if it is encrypted"),
    Setting("ssl.ca.location", "str", "", "PEM file of the CA certificates client certificates are verified against"),
    Setting("ssl.client.auth", "str", "none", "client certificates on SSL listeners: none, requested (verified if sent) or "
            "required (mutual TLS); the principal is User:<certificate subject>. SASL_SSL listeners authenticate by SASL and "
            "never ask for a certificate",
            lambda v: v.lower() in SSL_CLIENT_AUTH, "none, requested, required"),
    Setting("sasl.enabled.mechanisms", "list", ["SCRAM-SHA-256", "SCRAM-SHA-512"],
            "SASL mechanisms SASL_PLAINTEXT/SASL_SSL listeners offer (credentials in ZooKeeper, `kafkalite users`)",
            _mechanisms_ok, "a comma-separated list of " + ", ".join(SASL_MECHANISMS)),
    Setting("inter.broker.listener", "str", "127.0.0.1:9192", "inter-broker msgpack RPC host:port", _listener, "HOST:PORT"),
    Setting("admin.listener", "str", "127.0.0.1:9292", "admin HTTP host:port (/metrics, /healthz, /state, status page /)", _listener, "HOST:PORT"),
    Setting("zookeeper.connect", "str", "127.0.0.1:2181", "ZooKeeper connect string, optional /chroot"),
    Setting("zookeeper.session.timeout.ms", "int", 6000, "ZooKeeper session timeout", _positive, "> 0"),
    Setting("zookeeper.set.acl", "bool", False,
            "create the cluster's znodes with ACLs: ALL for the brokers' digest identity, READ for everyone (needs credentials)"),
    Setting("zookeeper.digest.user", "str", "", "ZooKeeper digest user of the brokers and admin tools"),
    Setting("zookeeper.digest.password", "str", "", "its password (or use zookeeper.digest.file)"),
    Setting("zookeeper.digest.file", "str", "", "a file holding one line user:password (instead of the two keys above)"),
    Setting("zookeeper.classpath", "str", "", "classpath of the ZooKeeper jars (bin/cluster)"),
    Setting("log.dirs", "list", ["/tmp/kafkalite-logs"], "comma-separated data directories"),
    Setting("broker.rack", "str", "", "rack id of this broker (rack-aware placement, KIP-392)"),
    Setting("controller.enable", "bool", True, "whether this broker may become the controller"),
    Setting("num.partitions", "int", 1, "default partitions for auto-created topics", _positive, "> 0"),
    Setting("default.replication.factor", "int", 1, "default replication factor", _positive, "> 0"),
    Setting("auto.create.topics.enable", "bool", False, "create a topic on first Metadata request for it"),
    Setting("delete.topic.enable", "bool", True, "allow topic deletion"),
    Setting("min.insync.replicas", "int", 1, "broker default for the topic config", _positive, "> 0"),
    Setting("unclean.leader.election.enable", "bool", False, "elect a leader outside the ISR (may lose data)"),
    Setting("replica.lag.time.max.ms", "long", 10000, "a follower not caught up for this long leaves the ISR", _positive, "> 0"),
    Setting("replica.fetch.max.bytes", "int", 1048576, "max bytes per partition in a replica fetch", _replica_fetch_bytes, _REPLICA_FETCH_BYTES_ALLOWED),
    Setting("replica.fetch.response.max.bytes", "int", 10485760, "max bytes in one replica fetch response", _replica_fetch_bytes, _REPLICA_FETCH_BYTES_ALLOWED),
    Setting("replica.fetch.wait.max.ms", "int", 500, "max wait of a replica fetch", _positive, "> 0"),
    Setting("replica.fetch.min.bytes", "int", 1, "min bytes of a replica fetch", _positive, "> 0"),
    Setting("replica.fetch.backoff.ms", "int", 200, "back-off after a replica fetch error", _non_negative, ">= 0"),
    Setting("replica.high.watermark.checkpoint.interval.ms", "long", 5000, "how often HWs are checkpointed", _positive, "> 0"),
    Setting("replica.selector.class", "str", "LeaderSelector", "who serves consumers (KIP-392): LeaderSelector, RackAwareReplicaSelector or a module.path.ClassName"),
    Setting("log.segment.bytes", "int", 1 << 30, "segment size before rolling", lambda v: v >= 1024, ">= 1024"),
    Setting("log.roll.ms", "long", 7 * 24 * 3600 * 1000, "segment age before rolling", _positive, "> 0"),
    Setting("log.index.interval.bytes", "int", 4096, "bytes between offset index entries", _positive, "> 0"),
    Setting("log.open.files.max", "int", 4096, "segment files kept open at once (least recently used ones are closed, "
            "so idle partitions cost no file descriptor)", lambda v: v >= 2, ">= 2"),
    Setting("log.retention.ms", "long", 7 * 24 * 3600 * 1000, "delete segments older than this (-1: never)", _minus_one_or_positive, "-1 or > 0"),
    Setting("log.retention.bytes", "long", -1, "delete old segments past this size (-1: never)", _minus_one_or_positive, "-1 or > 0"),
    Setting("log.retention.check.interval.ms", "long", 300000, "how often retention runs", _positive, "> 0"),
    Setting("log.cleanup.policy", "str", "delete", "broker default of cleanup.policy: delete old segments, compact by key, or both",
            lambda v: parse_cleanup_policy(v) is not None, "delete, compact, or compact,delete"),
    Setting("log.cleaner.enable", "bool", True, "run the log cleaner (compaction of cleanup.policy=compact topics)"),
    Setting("log.cleaner.threads", "int", 1, "cleaning passes at once, each in its own worker process", _positive, "> 0"),
    Setting("log.cleaner.dedupe.buffer.size", "long", 128 * 1024 * 1024, "memory of the cleaners' offset maps, shared by the threads",
            lambda v: v >= DEDUPE_BUFFER_BYTES_MIN, f">= {DEDUPE_BUFFER_BYTES_MIN} per cleaner thread"),
    Setting("log.cleaner.io.max.bytes.per.second", "float", 1.7976931348623157e308, "cleaner read+write rate limit, shared by the threads (default: none)",
            lambda v: v > 0, "> 0"),
    Setting("log.cleaner.backoff.ms", "long", 15000, "cleaner sleep when no log needs cleaning", _non_negative, ">= 0"),
    Setting("log.cleaner.delete.retention.ms", "long", 24 * 3600 * 1000, "broker default of delete.retention.ms", _non_negative, ">= 0"),
    Setting("log.cleaner.min.cleanable.ratio", "float", 0.5, "broker default of min.cleanable.dirty.ratio", _ratio, "0..1"),
    Setting("log.cleaner.min.compaction.lag.ms", "long", 0, "broker default of min.compaction.lag.ms", _non_negative, ">= 0"),
    Setting("log.flush.interval.messages", "long", -1, "fsync after this many messages (-1: leave it to the OS)", _minus_one_or_positive, "-1 or > 0"),
    Setting("log.flush.interval.ms", "long", -1, "fsync at least this often (-1: leave it to the OS)", _minus_one_or_positive, "-1 or > 0"),
    Setting("message.max.bytes", "int", 1048588, "largest record batch accepted", _record_batch_bytes, _RECORD_BATCH_BYTES_ALLOWED),
    Setting("socket.request.max.bytes", "int", 104857600, "largest request frame accepted", _positive, "> 0"),
    Setting("max.in.flight.requests.per.connection", "int", 100, "requests read ahead per client connection", _positive, "> 0"),
    Setting("request.timeout.ms", "int", 30000, "controller RPC and admin wait timeout", _positive, "> 0"),
    Setting("controller.socket.timeout.ms", "int", 30000, "timeout of controller-to-broker RPCs", _positive, "> 0"),
    Setting("controller.process.watch.enable", "bool", True,
            "fail a broker as soon as its process is gone (connection closed, reconnect refused), before its ZooKeeper "
            "session expires"),
    Setting("controlled.shutdown.enable", "bool", True, "move leaderships away before stopping on SIGTERM"),
    Setting("controlled.shutdown.max.retries", "int", 3, "attempts of controlled shutdown", _positive, "> 0"),
    Setting("controlled.shutdown.retry.backoff.ms", "long", 1000, "back-off between attempts", _non_negative, ">= 0"),
    Setting("auto.leader.rebalance.enable", "bool", True, "periodically move leadership back to preferred replicas"),
    Setting("leader.imbalance.check.interval.seconds", "long", 300, "how often imbalance is checked", _positive, "> 0"),
    Setting("leader.imbalance.per.broker.percentage", "int", 10, "imbalance that triggers a rebalance", lambda v: 0 <= v <= 100, "0..100"),
    Setting("producer.id.block.size", "int", 1000, "producer ids reserved per ZooKeeper round trip", _positive, "> 0"),
    Setting("offsets.topic.num.partitions", "int", 50, "partitions of __consumer_offsets, fixed when it is created", _positive, "> 0"),
    Setting("offsets.topic.replication.factor", "int", 3, "replication factor of __consumer_offsets (at most the live brokers)",
            lambda v: 0 < v <= 32767, "1..32767 (Kafka's SHORT type)"),
    Setting("offsets.topic.segment.bytes", "int", 100 * 1024 * 1024, "segment size of __consumer_offsets", lambda v: v >= 1024, ">= 1024"),
    Setting("offsets.retention.minutes", "int", 10080, "committed offsets of an empty group expire after this", _positive, "> 0"),
    Setting("offsets.retention.check.interval.ms", "long", 600000, "how often expired offsets are removed", _positive, "> 0"),
    Setting("offsets.commit.timeout.ms", "int", 5000, "how long an offset commit or group write waits for the ISR", _positive, "> 0"),
    Setting("offsets.load.buffer.size", "int", 5 * 1024 * 1024, "bytes read at a time when loading an offsets partition", _positive, "> 0"),
    Setting("offset.metadata.max.bytes", "int", 4096, "largest metadata string of a committed offset", _non_negative, ">= 0"),
    Setting("group.min.session.timeout.ms", "int", 6000, "smallest session timeout a consumer may ask for", _positive, "> 0"),
    Setting("group.max.session.timeout.ms", "int", 1800000, "largest session timeout a consumer may ask for", _positive, "> 0"),
    Setting("group.max.size", "int", 2147483647, "most members in one consumer group", _positive, "> 0"),
    Setting("group.initial.rebalance.delay.ms", "int", 3000, "wait for more members before the first rebalance of an empty group",
            _non_negative, ">= 0"),
    Setting("leader.replication.throttled.rate", "long", THROTTLE_UNLIMITED,
            "bytes/s a leader serves to replicas being added (a reassignment's own rate when not set; dynamic)", _positive, "> 0"),
    Setting("follower.replication.throttled.rate", "long", THROTTLE_UNLIMITED,
            "bytes/s a follower being added fetches (a reassignment's own rate when not set; dynamic)", _positive, "> 0"),
    Setting("purgatory.max.size", "int", 100000, "max delayed operations per purgatory", _positive, "> 0"),
    Setting("inter.broker.secret", "str", "",
            "shared secret of the cluster's brokers: every inter-broker RPC connection starts with an HMAC-SHA256 "
            "challenge-response on it (empty, with no secret file: RPC unauthenticated); at least 16 bytes",
            lambda v: v == "" or len(v.encode()) >= 16, "empty or at least 16 bytes"),
    Setting("inter.broker.secret.file", "str", "", "a file holding the inter-broker secret (instead of inter.broker.secret)"),
    Setting("authorizer.class.name", "str", "",
            "ACL authorization of client requests: empty = none (anyone may do anything), or "
            "kafka.security.authorizer.AclAuthorizer (also kafka.security.auth.SimpleAclAuthorizer, kafkalite.AclAuthorizer)",
            lambda v: v in AUTHORIZER_CLASS_NAMES, "empty, " + ", ".join(sorted(n for n in AUTHORIZER_CLASS_NAMES if n))),
    Setting("super.users", "str", "", "principals allowed everything, separated by semicolons (User:admin;User:CN=broker)"),
    Setting("allow.everyone.if.no.acl.found", "bool", False, "with an authorizer: allow a resource that has no ACL at all"),
    Setting("log.level", "str", "INFO", "logging level", lambda v: v.upper() in ("DEBUG", "INFO", "WARNING", "ERROR"), "DEBUG, INFO, WARNING, ERROR"),
)

SETTINGS: Mapping[str, Setting] = {s.name: s for s in _SETTINGS}

# Topic-level configs accepted by CreateTopics / `topics create --config` (Kafka's names).
TOPIC_CONFIGS: Mapping[str, str] = {
    "min.insync.replicas": "int",
    "unclean.leader.election.enable": "bool",
    "retention.ms": "long",
    "retention.bytes": "long",
    "segment.bytes": "int",
    "segment.ms": "long",
    "max.message.bytes": "int",
    "cleanup.policy": "str",
    "delete.retention.ms": "long",
    "min.cleanable.dirty.ratio": "float",
    "min.compaction.lag.ms": "long",
}

# Checks of topic config values, with what is allowed (the error names the key).
_TOPIC_CHECKS: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "min.insync.replicas": (_positive, ">= 1"),
    "retention.ms": (_minus_one_or_positive, "-1 or > 0"),
    "retention.bytes": (_minus_one_or_positive, "-1 or > 0"),
    "segment.bytes": (lambda v: v >= 1024, ">= 1024"),
    "segment.ms": (_positive, "> 0"),
    "max.message.bytes": (_record_batch_bytes, _RECORD_BATCH_BYTES_ALLOWED),
    "cleanup.policy": (lambda v: parse_cleanup_policy(v) is not None, "delete, compact, or compact,delete"),
    "delete.retention.ms": (_non_negative, ">= 0"),
    "min.cleanable.dirty.ratio": (_ratio, "a number from 0 to 1"),
    "min.compaction.lag.ms": (_non_negative, ">= 0"),
}


# The range of Kafka's INT and LONG config types: an INT config is stored and sent as 32
# bits (log/index.py keeps segment positions as int32, so a segment.bytes past INT_MAX
# would fail every append once the segment reached 2 GiB).
INT_RANGE = (-(1 << 31), (1 << 31) - 1)
LONG_RANGE = (-(1 << 63), (1 << 63) - 1)
_INT_RANGES = {"int": INT_RANGE, "long": LONG_RANGE}


def _coerce(name: str, kind: str, raw: Any) -> Any:
    try:
        if kind in _INT_RANGES:
            if isinstance(raw, bool):
                raise ValueError
            value = int(str(raw).strip()) if not isinstance(raw, int) else raw
            low, high = _INT_RANGES[kind]
            if not low <= value <= high:
                raise ConfigError(f"config key {name!r}: bad value {raw!r}, expected an integer from {low} to {high} "
                                  f"(Kafka's {kind.upper()} type)")
            return value
        if kind == "float":
            return float(raw)
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "1", "yes"):
                return True
            if text in ("false", "0", "no"):
                return False
            raise ValueError
        if kind == "list":
            if isinstance(raw, list):
                items = [str(x).strip() for x in raw]
            else:
                items = [x.strip() for x in str(raw).split(",")]
            items = [x for x in items if x]
            if not items:
                raise ValueError
            return items
        return str(raw)
    except (TypeError, ValueError):
        allowed = {"int": "an integer", "long": "an integer", "float": "a number", "bool": "true or false", "list": "a non-empty comma-separated list"}.get(kind, "a string")
        raise ConfigError(f"config key {name!r}: bad value {raw!r}, expected {allowed}") from None


def coerce_setting(setting: Setting, raw: Any) -> Any:
    """A broker setting's typed value; ConfigError names the key when it is bad."""
    value = _coerce(setting.name, setting.kind, raw)
    if setting.check is not None and not setting.check(value):
        raise ConfigError(f"config key {setting.name!r}: bad value {raw!r}, allowed: {setting.allowed}")
    return value


def validate_topic_config(config: Mapping[str, Any]) -> dict[str, str]:
    """Check a topic's config overrides; returns them normalised to strings."""
    out: dict[str, str] = {}
    for key, raw in config.items():
        kind = TOPIC_CONFIGS.get(key)
        if kind is None:
            raise ConfigError(f"unknown topic config {key!r}; allowed: {', '.join(sorted(TOPIC_CONFIGS))}")
        value = _coerce(key, kind, raw)
        check = _TOPIC_CHECKS.get(key)
        if check is not None and not check[0](value):
            raise ConfigError(f"topic config {key!r}: bad value {raw!r}, allowed: {check[1]}")
        if key == "cleanup.policy":
            value = ",".join(sorted(parse_cleanup_policy(value) or ()))
        out[key] = str(value).lower() if kind == "bool" else str(value)
    return out


class BrokerConfig:
    """Validated settings; attribute access by Kafka name via `cfg["log.dirs"]` or helpers."""

    def __init__(self, values: Mapping[str, Any]):
        merged: dict[str, Any] = {}
        for key, raw in values.items():
            setting = SETTINGS.get(key)
            if setting is None:
                close = [k for k in SETTINGS if k.split(".")[-1] == key.split(".")[-1]]
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"unknown config key {key!r}{hint}")
            merged[key] = coerce_setting(setting, raw)
        self.explicit = frozenset(merged)  # the keys a file, the environment or --override set
        for setting in _SETTINGS:
            if setting.name not in merged:
                if setting.default is None:
                    raise ConfigError(f"config key {setting.name!r} is required ({setting.doc})")
                merged[setting.name] = setting.default
        replica_selector_class(merged["replica.selector.class"])  # a bad class path stops start-up here
        per_thread = merged["log.cleaner.dedupe.buffer.size"] // merged["log.cleaner.threads"]
        if per_thread < DEDUPE_BUFFER_BYTES_MIN:
            raise ConfigError(f"config key 'log.cleaner.dedupe.buffer.size': {merged['log.cleaner.dedupe.buffer.size']} leaves "
                              f"{per_thread} bytes to each of the {merged['log.cleaner.threads']} log.cleaner.threads; "
                              f"allowed: >= {DEDUPE_BUFFER_BYTES_MIN} per thread")
        self._client_listeners = _client_listeners(merged["listeners"], merged["advertised.listeners"],
                                                   merged["listener.security.protocol.map"])
        merged["ssl.client.auth"] = merged["ssl.client.auth"].lower()
        merged["sasl.enabled.mechanisms"] = [m.upper() for m in merged["sasl.enabled.mechanisms"]]
        _check_security(merged, self._client_listeners)
        if merged["group.min.session.timeout.ms"] > merged["group.max.session.timeout.ms"]:
            raise ConfigError(f"config key 'group.min.session.timeout.ms': {merged['group.min.session.timeout.ms']} is more than "
                              f"group.max.session.timeout.ms={merged['group.max.session.timeout.ms']}")
        self._values = merged

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def broker_id(self) -> int:
        return self._values["broker.id"]

    def client_listeners(self) -> list[ClientListenerConfig]:
        """Every client listener, the first one first (its advertised address is the one
        registered as the broker's host and port)."""
        return list(self._client_listeners)

    def listener(self) -> tuple[str, int]:
        first = self._client_listeners[0]
        return first.host, first.port

    def advertised_listener(self) -> tuple[str, int]:
        first = self._client_listeners[0]
        return first.advertised_host, first.advertised_port

    def inter_broker_listener(self) -> tuple[str, int]:
        parsed = _parse_listener(self._values["inter.broker.listener"])
        assert parsed is not None
        return parsed

    def admin_listener(self) -> tuple[str, int]:
        parsed = _parse_listener(self._values["admin.listener"])
        assert parsed is not None
        return parsed

    @property
    def rack(self) -> str | None:
        return self._values["broker.rack"] or None


def _check_security(values: Mapping[str, Any], listeners: tuple[ClientListenerConfig, ...]) -> None:
    """A TLS listener needs a certificate and key; verifying client certificates needs CAs."""
    tls = [spec.name for spec in listeners if spec.tls]
    if not tls:
        return
    for key in ("ssl.certificate.location", "ssl.key.location"):
        if not values[key]:
            raise ConfigError(f"config key {key!r} is required: listener {tls[0]} is {'SSL or SASL_SSL'}")
    if values["ssl.client.auth"] != "none" and not values["ssl.ca.location"]:
        raise ConfigError(f"config key 'ssl.ca.location' is required with ssl.client.auth={values['ssl.client.auth']}")


def _client_listeners(listeners: str, advertised: str, protocol_map: str = DEFAULT_PROTOCOL_MAP) -> tuple[ClientListenerConfig, ...]:
    """Pair `listeners` with `advertised.listeners` by name (an unnamed advertised address
    belongs to the first listener); a listener not advertised is advertised as it binds
    (127.0.0.1 for a wildcard or empty host). Each name must be in the protocol map, as in
    Kafka: an unmapped name is a start-up error, never silently plaintext."""
    bound = _parse_listeners(listeners)
    assert bound is not None  # checked by its Setting
    names = [n or "PLAINTEXT" for n, _, _ in bound]
    adverts: dict[str, tuple[str, int]] = {}
    for name, host, port in (_parse_listeners(advertised) or []) if advertised else []:
        key = name if name is not None else names[0]
        if key not in names:
            raise ConfigError(f"config key 'advertised.listeners': listener {key!r} is not in listeners ({', '.join(names)})")
        if key in adverts:
            raise ConfigError(f"config key 'advertised.listeners': listener {key!r} is advertised twice")
        if host in ("", "0.0.0.0"):
            raise ConfigError(f"config key 'advertised.listeners': listener {key!r} needs a host clients can reach, got {host!r}")
        adverts[key] = (host, port)
    protocols = _parse_protocol_map(protocol_map)
    assert protocols is not None  # checked by its Setting
    for name in names:
        if name not in protocols:
            raise ConfigError(f"config key 'listener.security.protocol.map': listener {name!r} has no security protocol "
                              f"(add {name}:PLAINTEXT, {name}:SSL, {name}:SASL_PLAINTEXT or {name}:SASL_SSL)")
    out = []
    for name, (_, host, port) in zip(names, bound):
        bind_host = host or "127.0.0.1"
        ad_host, ad_port = adverts.get(name, (bind_host if bind_host != "0.0.0.0" else "127.0.0.1", port))
        out.append(ClientListenerConfig(name, bind_host, port, ad_host, ad_port, protocols[name]))
    return tuple(out)


_SELECTOR_KEY = "replica.selector.class"


def replica_selector_class(name: str) -> type:
    """The class `replica.selector.class` names (KIP-392): a built-in (`LeaderSelector`,
    `RackAwareReplicaSelector`, or Kafka's `org.apache.kafka.common.replica.` names), or any
    importable `module.path.ClassName` with a `select` method. Anything else is a
    ConfigError naming the key (a user mistake: a message, never a traceback)."""
    builtin = BUILTIN_SELECTORS.get(name)
    if builtin is not None:
        return builtin
    module_name, dot, class_name = name.strip().rpartition(".")
    if not dot or not module_name or not class_name:
        raise ConfigError(f"config key {_SELECTOR_KEY!r}: {name!r} is neither LeaderSelector, RackAwareReplicaSelector "
                          "nor a Python class path (module.path.ClassName)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"config key {_SELECTOR_KEY!r}: cannot import module {module_name!r} of {name!r}: {e}") from None
    except Exception as e:  # noqa: BLE001 - whatever the user's module raises while importing is a config problem
        raise ConfigError(f"config key {_SELECTOR_KEY!r}: importing module {module_name!r} failed: {type(e).__name__}: {e}") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"config key {_SELECTOR_KEY!r}: module {module_name!r} has no {class_name!r}")
    if not isinstance(cls, type):
        raise ConfigError(f"config key {_SELECTOR_KEY!r}: {name!r} is not a class")
    if not callable(getattr(cls, "select", None)):
        raise ConfigError(f"config key {_SELECTOR_KEY!r}: class {name!r} has no select(topic_partition, client_metadata, "
                          "partition_view) method")
    return cls


def make_replica_selector(name: str, configs: Mapping[str, Any]) -> ReplicaSelector:
    """An instance of the configured selector, given the broker's settings through its
    optional `configure(configs)`. A plug-in whose constructor or configure fails is a
    ConfigError naming the key."""
    cls = replica_selector_class(name)
    try:
        selector = cls()
        configure = getattr(selector, "configure", None)
        if callable(configure):
            configure(dict(configs))
    except Exception as e:  # noqa: BLE001 - a plug-in refusing its configuration is a config problem
        raise ConfigError(f"config key {_SELECTOR_KEY!r}: {name!r} could not be set up: {type(e).__name__}: {e}") from None
    return selector


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read TOML (`.toml`) or Java .properties (anything else) into a flat dict."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(p)!r}: {e.strerror}") from None
    if p.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {str(p)!r} is not valid TOML: {e}") from None
        return _flatten(data)
    out: dict[str, Any] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{p}:{lineno}: expected key=value, got {line!r}")
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


# Environment overrides (containers): KAFKALITE_CFG_BROKER_ID=1 sets broker.id; the key is
# the variable's name after the prefix, lower-cased, with "_" for "." (no key has "_").
ENV_PREFIX = "KAFKALITE_CFG_"


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """The config keys set by KAFKALITE_CFG_* variables; an unknown one is a ConfigError
    naming the variable."""
    out: dict[str, str] = {}
    for var, value in sorted(environ.items()):
        if not var.startswith(ENV_PREFIX):
            continue
        key = var[len(ENV_PREFIX):].lower().replace("_", ".")
        if key not in SETTINGS:
            raise ConfigError(f"environment variable {var}: {key!r} is not a config key "
                              f"({ENV_PREFIX}<KEY> with '_' for '.', e.g. {ENV_PREFIX}BROKER_ID for broker.id)")
        out[key] = value
    return out


def load_config(path: str | Path | None, overrides: list[str] | None = None, environ: Mapping[str, str] | None = None) -> BrokerConfig:
    """The file, then KAFKALITE_CFG_* variables of `environ`, then `--override`s: the last
    word wins."""
    values: dict[str, Any] = read_config_file(path) if path else {}
    values.update(env_overrides(environ or {}))
    values.update(parse_overrides(overrides))
    return BrokerConfig(values)
