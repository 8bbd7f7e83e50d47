"""Dynamic configs (issue 16): what DescribeConfigs reports and what AlterConfigs and
IncrementalAlterConfigs may change, as pure functions (no ZooKeeper, no sockets).

A config's effective value comes from the first layer that sets it, as in Kafka:

- a topic config: the topic's override (/config/topics/<topic>, DYNAMIC_TOPIC_CONFIG),
  else its broker synonym (`retention.ms` <- `log.retention.ms`) resolved as below;
- a broker config: this broker's dynamic value (/config/brokers/<id>,
  DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic default (/config/brokers/<default>,
  DYNAMIC_DEFAULT_BROKER_CONFIG), the broker's config file or overrides
  (STATIC_BROKER_CONFIG), else the built-in default (DEFAULT_CONFIG).

The synonyms DescribeConfigs v1+ returns are every layer that sets the config, first wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from typing import Any

from kafkalite.config import SETTINGS, TOPIC_CONFIGS, ConfigError, coerce_setting, validate_topic_config
from kafkalite.log.config import parse_cleanup_policy


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs config_source numbers."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


class AlterOp(IntEnum):
    """IncrementalAlterConfigs config_operation (KIP-339)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class InvalidConfig(Exception):
    """A request names an unknown or read-only config, or a bad value: INVALID_CONFIG."""


class InvalidConfigRequest(Exception):
    """A malformed alteration (a name twice, an unknown operation): INVALID_REQUEST."""


# Each topic config and the broker setting that gives its default (Kafka's synonyms).
TOPIC_BROKER_SYNONYMS: Mapping[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "max.message.bytes": "message.max.bytes",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

# Broker configs that may change without a restart (per broker or as the cluster-wide
# default); every other broker config is read-only (set in the config file).
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset({
    "log.retention.ms", "log.retention.bytes", "log.segment.bytes", "log.roll.ms", "log.cleanup.policy",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.cleanable.ratio", "log.cleaner.min.compaction.lag.ms",
    "log.flush.interval.messages", "log.flush.interval.ms", "message.max.bytes", "min.insync.replicas",
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
})

# Configs whose value is a comma-separated list (APPEND and SUBTRACT apply to them only).
LIST_CONFIGS: frozenset[str] = frozenset({"cleanup.policy", "log.cleanup.policy"})

_SENSITIVE_MARKS = ("password", "secret", "jaas.config", ".key")


def is_sensitive(name: str) -> bool:
    """Passwords, secrets, JAAS configs and keys are never shown (value null)."""
    return any(mark in name for mark in _SENSITIVE_MARKS)


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclasses.dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclasses.dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    synonyms: tuple[Synonym, ...]
    doc: str = ""

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclasses.dataclass(frozen=True)
class BrokerLayers:
    """What one broker knows of broker configs: its settings with the keys its file,
    environment or overrides set (`explicit`), and the two dynamic layers from ZooKeeper."""

    static: Mapping[str, Any]
    explicit: frozenset[str]
    dynamic_default: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dynamic_broker: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def synonyms(self, name: str) -> tuple[Synonym, ...]:
        """Every layer that sets broker config `name`, the one that wins first."""
        out = []
        if name in self.dynamic_broker:
            out.append(Synonym(name, self.dynamic_broker[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
        if name in self.dynamic_default:
            out.append(Synonym(name, self.dynamic_default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        setting = SETTINGS.get(name)
        if name in self.explicit and name in self.static:
            out.append(Synonym(name, format_value(self.static[name]), ConfigSource.STATIC_BROKER_CONFIG))
        if setting is not None and setting.default is not None:
            out.append(Synonym(name, format_value(setting.default), ConfigSource.DEFAULT_CONFIG))
        return tuple(out)

    def effective(self) -> dict[str, Any]:
        """The settings with the dynamic layers applied (typed as the static ones)."""
        out = dict(self.static)
        for layer in (self.dynamic_default, self.dynamic_broker):
            for name, raw in layer.items():
                setting = SETTINGS.get(name)
                if setting is not None:
                    out[name] = coerce_setting(setting, raw)
        return out


def _hide(entry: ConfigEntry) -> ConfigEntry:
    if not entry.sensitive:
        return entry
    return dataclasses.replace(entry, value=None, synonyms=tuple(dataclasses.replace(s, value=None) for s in entry.synonyms))


def describe_broker(layers: BrokerLayers, *, defaults_only: bool = False) -> list[ConfigEntry]:
    """Every broker config as this broker sees it; `defaults_only`: the cluster-wide dynamic
    defaults only (DescribeConfigs of the broker resource named "", as Kafka answers it)."""
    out = []
    for name, setting in sorted(SETTINGS.items()):
        synonyms = layers.synonyms(name)
        if defaults_only:
            synonyms = tuple(s for s in synonyms if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            if not synonyms:
                continue
        if not synonyms:  # a required setting without default, not set: cannot happen on a running broker
            continue
        first = synonyms[0]
        out.append(_hide(ConfigEntry(name, first.value, first.source, name not in DYNAMIC_BROKER_CONFIGS,
                                     is_sensitive(name), synonyms, setting.doc)))
    return out


def describe_topic(layers: BrokerLayers, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config: the topic's override, else its broker synonym's value."""
    out = []
    for name in sorted(TOPIC_CONFIGS):
        synonym = TOPIC_BROKER_SYNONYMS[name]
        synonyms = layers.synonyms(synonym)
        if name in overrides:
            synonyms = (Synonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG),) + synonyms
        assert synonyms, f"topic config {name} has neither an override nor a broker default"
        first = synonyms[0]
        doc = SETTINGS[synonym].doc
        out.append(_hide(ConfigEntry(name, first.value, first.source, False, is_sensitive(name), synonyms, doc)))
    return out


def select(entries: Sequence[ConfigEntry], keys: Iterable[str] | None) -> list[ConfigEntry]:
    """DescribeConfigs configuration_keys: null means all."""
    if keys is None:
        return list(entries)
    wanted = set(keys)
    return [e for e in entries if e.name in wanted]


# -- alterations ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Alteration:
    name: str
    op: AlterOp
    value: str | None


def parse_alterations(configs: Sequence[Mapping[str, Any]], *, incremental: bool) -> list[Alteration]:
    """AlterConfigs / IncrementalAlterConfigs config entries; a name twice or an unknown
    operation is an InvalidConfigRequest."""
    out = []
    seen: set[str] = set()
    for c in configs:
        name = c["name"]
        if name in seen:
            raise InvalidConfigRequest(f"config {name!r} appears more than once in the request")
        seen.add(name)
        raw_op = c.get("config_operation", 0) if incremental else 0
        try:
            op = AlterOp(raw_op)
        except ValueError:
            raise InvalidConfigRequest(f"config {name!r}: unknown operation {raw_op} (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)") from None
        if incremental and op != AlterOp.DELETE and c.get("value") is None:
            raise InvalidConfig(f"config {name!r}: a value is required for {op.name}")
        out.append(Alteration(name, op, c.get("value")))
    return out


def replace_all(alterations: Sequence[Alteration]) -> dict[str, str]:
    """AlterConfigs (not incremental): the request's configs become the whole set of
    overrides; a null value removes the override."""
    return {a.name: a.value for a in alterations if a.value is not None}


def apply_incremental(current: Mapping[str, str], alterations: Sequence[Alteration],
                      effective: Mapping[str, str]) -> dict[str, str]:
    """The overrides after SET / DELETE / APPEND / SUBTRACT (KIP-339). APPEND and SUBTRACT
    start from the effective value (`effective`: the current value of every config) and
    apply only to list configs."""
    out = dict(current)
    for a in alterations:
        if a.op == AlterOp.SET:
            out[a.name] = str(a.value)
        elif a.op == AlterOp.DELETE:
            out.pop(a.name, None)
        else:
            if a.name not in LIST_CONFIGS:
                raise InvalidConfig(f"config {a.name!r} is not a list: {a.op.name} applies only to {', '.join(sorted(LIST_CONFIGS))}")
            base = out.get(a.name, effective.get(a.name, ""))
            items = [x.strip() for x in base.split(",") if x.strip()]
            given = [x.strip() for x in str(a.value).split(",") if x.strip()]
            if a.op == AlterOp.APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            out[a.name] = ",".join(items)
    return out


def check_deletions(resource_type: ResourceType, alterations: Sequence[Alteration]) -> None:
    """A DELETE must name a config the resource can have an override of: a topic config, or
    a dynamic broker config (InvalidConfig, Kafka's INVALID_CONFIG, naming it). Validating
    only the overrides that remain let `--delete no.such.config` (or `broker.id`) succeed
    as a no-op. A known config that is simply not set is no error here (DELETE is
    idempotent, as in Kafka); `kafkalite configs alter` refuses it, as kafka-configs does."""
    for a in alterations:
        if a.op != AlterOp.DELETE:
            continue
        if resource_type == ResourceType.TOPIC and a.name not in TOPIC_CONFIGS:
            raise InvalidConfig(f"unknown topic config {a.name!r}; allowed: {', '.join(sorted(TOPIC_CONFIGS))}")
        if resource_type == ResourceType.BROKER:
            if a.name not in SETTINGS:
                raise InvalidConfig(f"unknown broker config {a.name!r}")
            if a.name not in DYNAMIC_BROKER_CONFIGS:
                raise InvalidConfig(f"broker config {a.name!r} is read-only: it can only be set in the broker's config file "
                                    f"(dynamic ones: {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})")


def validate_topic_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    """A topic's complete overrides, normalised; InvalidConfig names the key."""
    try:
        return validate_topic_config(overrides)
    except ConfigError as e:
        raise InvalidConfig(str(e)) from None


def validate_broker_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    """Dynamic broker configs (per broker or the cluster default), normalised; unknown and
    read-only names and bad values raise InvalidConfig naming the key."""
    out = {}
    for name, raw in overrides.items():
        setting = SETTINGS.get(name)
        if setting is None:
            raise InvalidConfig(f"unknown broker config {name!r}")
        if name not in DYNAMIC_BROKER_CONFIGS:
            raise InvalidConfig(f"broker config {name!r} is read-only: it can only be set in the broker's config file "
                                f"(dynamic ones: {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})")
        try:
            value = coerce_setting(setting, raw)
        except ConfigError as e:
            raise InvalidConfig(str(e)) from None
        if name in LIST_CONFIGS:
            policy = parse_cleanup_policy(str(value))
            assert policy is not None  # checked by its Setting
            value = ",".join(sorted(policy))
        out[name] = format_value(value)
    return out


def topic_effective_values(layers: BrokerLayers, overrides: Mapping[str, str]) -> dict[str, str]:
    return {e.name: e.value or "" for e in describe_topic(layers, overrides)}


def broker_effective_values(layers: BrokerLayers) -> dict[str, str]:
    return {e.name: e.value or "" for e in describe_broker(layers)}
