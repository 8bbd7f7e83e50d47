"""Config resolution with sources and synonyms, validation and incremental operations
(kafkalite.dynamic_config, issue 16)."""

from __future__ import annotations

import pytest

from kafkalite import dynamic_config as dc
from kafkalite.config import SETTINGS, TOPIC_CONFIGS, BrokerConfig
from kafkalite.core.quota import FOLLOWER_RATE, LEADER_RATE, ReplicationQuotas
from kafkalite.zk import codec
from kafkalite.zk.errors import ZnodeDecodeError

S = dc.ConfigSource


def layers(static: dict | None = None, default: dict | None = None, broker: dict | None = None) -> dc.BrokerLayers:
    cfg = BrokerConfig({"broker.id": 1, **(static or {})})
    return dc.BrokerLayers(cfg.as_dict(), cfg.explicit, default or {}, broker or {})


def by_name(entries: list[dc.ConfigEntry]) -> dict[str, dc.ConfigEntry]:
    return {e.name: e for e in entries}


def test_a_topic_without_overrides_lists_every_topic_config_with_its_broker_default():
    entries = by_name(dc.describe_topic(layers(), {}))
    assert set(entries) == set(TOPIC_CONFIGS)
    retention = entries["retention.ms"]
    assert retention.value == str(SETTINGS["log.retention.ms"].default)
    assert retention.source == S.DEFAULT_CONFIG
    assert retention.is_default
    assert [s.name for s in retention.synonyms] == ["log.retention.ms"]
    assert entries["segment.ms"].synonyms[0].name == "log.roll.ms"
    assert entries["unclean.leader.election.enable"].value == "false"


def test_each_layer_wins_over_the_ones_below_and_all_are_synonyms_in_order():
    lay = layers(static={"log.retention.ms": 1000}, default={"log.retention.ms": "2000"}, broker={"log.retention.ms": "3000"})
    entry = by_name(dc.describe_topic(lay, {"retention.ms": "4000"}))["retention.ms"]
    assert (entry.value, entry.source) == ("4000", S.DYNAMIC_TOPIC_CONFIG)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("retention.ms", "4000", S.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "3000", S.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "2000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "1000", S.STATIC_BROKER_CONFIG),
        ("log.retention.ms", str(SETTINGS["log.retention.ms"].default), S.DEFAULT_CONFIG),
    ]
    broker = by_name(dc.describe_broker(lay))["log.retention.ms"]
    assert (broker.value, broker.source, broker.read_only) == ("3000", S.DYNAMIC_BROKER_CONFIG, False)
    assert by_name(dc.describe_topic(layers(static={"log.retention.ms": 1000}), {}))["retention.ms"].source == S.STATIC_BROKER_CONFIG


def test_broker_describe_lists_every_setting_and_marks_static_ones_read_only():
    entries = by_name(dc.describe_broker(layers()))
    assert set(entries) == set(SETTINGS)
    assert entries["broker.id"].read_only
    assert entries["broker.id"].source == S.STATIC_BROKER_CONFIG
    assert entries["num.partitions"].source == S.DEFAULT_CONFIG
    assert not entries[LEADER_RATE].read_only


def test_the_broker_default_resource_shows_only_the_dynamic_defaults():
    entries = dc.describe_broker(layers(default={"log.retention.bytes": "5000"}, broker={"min.insync.replicas": "2"}),
                                 defaults_only=True)
    assert [(e.name, e.value, e.source) for e in entries] == [("log.retention.bytes", "5000", S.DYNAMIC_DEFAULT_BROKER_CONFIG)]


def test_sensitive_values_are_never_shown():
    assert dc.is_sensitive("sasl.jaas.config")
    assert dc.is_sensitive("ssl.keystore.password")
    assert not dc.is_sensitive("retention.ms")
    entry = dc.ConfigEntry("x.password", "hunter2", S.STATIC_BROKER_CONFIG, True, True,
                           (dc.Synonym("x.password", "hunter2", S.STATIC_BROKER_CONFIG),))
    hidden = dc._hide(entry)
    assert hidden.value is None
    assert hidden.synonyms[0].value is None


def test_effective_settings_apply_the_dynamic_layers_typed():
    eff = layers(static={"log.retention.ms": 1000}, default={"log.retention.ms": "2000", "min.insync.replicas": "2"},
                 broker={"log.retention.ms": "3000"}).effective()
    assert eff["log.retention.ms"] == 3000
    assert eff["min.insync.replicas"] == 2


def test_incremental_set_delete_append_subtract():
    current = {"retention.ms": "1000", "segment.bytes": "2048"}
    ops = dc.parse_alterations([
        {"name": "retention.ms", "config_operation": 1, "value": None},
        {"name": "min.insync.replicas", "config_operation": 0, "value": "2"},
        {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
    ], incremental=True)
    out = dc.apply_incremental(current, ops, {"cleanup.policy": "delete"})
    assert out == {"segment.bytes": "2048", "min.insync.replicas": "2", "cleanup.policy": "delete,compact"}
    sub = dc.parse_alterations([{"name": "cleanup.policy", "config_operation": 3, "value": "delete"}], incremental=True)
    assert dc.apply_incremental(out, sub, {})["cleanup.policy"] == "compact"


def test_append_to_a_config_that_is_not_a_list_is_invalid():
    ops = dc.parse_alterations([{"name": "retention.ms", "config_operation": 2, "value": "5"}], incremental=True)
    with pytest.raises(dc.InvalidConfig, match="not a list"):
        dc.apply_incremental({}, ops, {"retention.ms": "1"})


def test_malformed_alterations_are_refused():
    with pytest.raises(dc.InvalidConfigRequest, match="more than once"):
        dc.parse_alterations([{"name": "a", "value": "1"}, {"name": "a", "value": "2"}], incremental=False)
    with pytest.raises(dc.InvalidConfigRequest, match="unknown operation"):
        dc.parse_alterations([{"name": "a", "config_operation": 9, "value": "1"}], incremental=True)
    with pytest.raises(dc.InvalidConfig, match="value is required"):
        dc.parse_alterations([{"name": "a", "config_operation": 0, "value": None}], incremental=True)


def test_non_incremental_alter_replaces_every_override():
    ops = dc.parse_alterations([{"name": "retention.ms", "value": "5"}, {"name": "segment.ms", "value": None}], incremental=False)
    assert dc.replace_all(ops) == {"retention.ms": "5"}


@pytest.mark.parametrize("overrides, message", [
    ({"retention.msx": "1"}, "unknown topic config 'retention.msx'"),
    ({"retention.ms": "soon"}, "expected an integer"),
    ({"min.insync.replicas": "0"}, ">= 1"),
    ({"cleanup.policy": "shred"}, "delete, compact"),
    ({"segment.bytes": "10"}, ">= 1024"),
])
def test_bad_topic_configs_name_the_key(overrides, message):
    with pytest.raises(dc.InvalidConfig, match=message):
        dc.validate_topic_overrides(overrides)


def test_topic_configs_are_normalised():
    assert dc.validate_topic_overrides({"cleanup.policy": "delete,compact", "unclean.leader.election.enable": "TRUE"}) == {
        "cleanup.policy": "compact,delete", "unclean.leader.election.enable": "true"}


@pytest.mark.parametrize("overrides, message", [
    ({"no.such.config": "1"}, "unknown broker config"),
    ({"broker.id": "7"}, "read-only"),
    ({"log.retention.ms": "-5"}, "-1 or > 0"),
    ({LEADER_RATE: "0"}, "> 0"),
])
def test_bad_broker_configs_name_the_key(overrides, message):
    with pytest.raises(dc.InvalidConfig, match=message):
        dc.validate_broker_overrides(overrides)


def test_dynamic_broker_configs_are_settings_and_normalised():
    assert dc.DYNAMIC_BROKER_CONFIGS <= set(SETTINGS)
    assert set(dc.TOPIC_BROKER_SYNONYMS) == set(TOPIC_CONFIGS)
    assert dc.validate_broker_overrides({"log.cleanup.policy": "delete,compact", LEADER_RATE: "1000"}) == {
        "log.cleanup.policy": "compact,delete", LEADER_RATE: "1000"}


def test_broker_throttle_wins_over_the_reassignments_and_unlimited_means_none():
    q = ReplicationQuotas(1)
    q.set_rates({LEADER_RATE: 100, FOLLOWER_RATE: 200}, 0)
    q.set_broker_rates({LEADER_RATE: 50, FOLLOWER_RATE: (1 << 63) - 1}, 0)
    assert q.rates == {LEADER_RATE: 50, FOLLOWER_RATE: 200}
    q.set_rates({}, 0)
    assert q.rates == {LEADER_RATE: 50}
    q.set_broker_rates({LEADER_RATE: (1 << 63) - 1}, 0)
    assert q.rates == {}


def test_config_znodes_round_trip_in_kafkas_layout():
    data = codec.encode_entity_config({"retention.ms": "5"})
    assert data == b'{"version":1,"config":{"retention.ms":"5"}}'
    assert codec.decode_entity_config(data, "/config/topics/t") == {"retention.ms": "5"}
    change = codec.encode_config_change("topics/t")
    assert codec.decode_config_change(change, "/config/changes/config_change_0000000001") == "topics/t"
    # `kafkalite users add` announces users/NAME as Kafka does: read without complaint
    assert codec.decode_config_change(b'{"version":2,"entity_path":"users/x"}',
                                      "/config/changes/config_change_0000000002") == "users/x"
    with pytest.raises(ZnodeDecodeError):
        codec.decode_config_change(b'{"version":2,"entity_path":"groups/x"}', "/config/changes/config_change_0000000003")
    with pytest.raises(ZnodeDecodeError):
        codec.decode_config_change(b'{"version":2,"entity_path":"users/"}', "/config/changes/config_change_0000000004")
    with pytest.raises(ZnodeDecodeError):
        codec.decode_entity_config(b'{"version":1,"config":{"a":1}}', "/config/topics/t")


def test_dynamic_log_segment_bytes_is_bounded_by_int32():
    with pytest.raises(dc.InvalidConfig, match="log.segment.bytes.*2147483647"):
        dc.validate_broker_overrides({"log.segment.bytes": "4294967296"})
    with pytest.raises(dc.InvalidConfig, match="segment.bytes.*2147483647"):
        dc.validate_topic_overrides({"segment.bytes": "2147483648"})
    assert dc.validate_broker_overrides({"log.segment.bytes": "2147483647"}) == {"log.segment.bytes": "2147483647"}


def _config_apis(topic_overrides: dict[str, str]):
    """ConfigApis over a stand-in broker: ZooKeeper holds topic t with `topic_overrides`
    and no dynamic broker configs."""
    from types import SimpleNamespace

    from kafkalite.broker.config_apis import ConfigApis

    zk = SimpleNamespace(get_topic_assignment=lambda topic: (SimpleNamespace(config=topic_overrides), 0) if topic == "t" else None,
                         get_entity_config=lambda path: {})
    broker = SimpleNamespace(broker_id=1, zk=zk, dynamic_configs=SimpleNamespace(layers=layers()))
    return ConfigApis(broker, lambda topic: None)


@pytest.mark.parametrize("rtype, name, delete, says", [
    (dc.ResourceType.TOPIC, "t", "no.such.config", "unknown topic config 'no.such.config'"),
    (dc.ResourceType.TOPIC, "t", "log.retention.ms", "unknown topic config 'log.retention.ms'"),  # a broker name
    (dc.ResourceType.BROKER, "1", "no.such.config", "unknown broker config 'no.such.config'"),
    (dc.ResourceType.BROKER, "", "broker.id", "broker config 'broker.id' is read-only"),
    (dc.ResourceType.BROKER, "1", "retention.ms", "unknown broker config 'retention.ms'"),  # a topic name
])
def test_deleting_an_unknown_or_read_only_config_is_invalid_config(rtype, name, delete, says):
    """It succeeded as a no-op: only the overrides left after the DELETE were validated."""
    import asyncio

    from kafkalite.protocol.errors import ErrorCode

    body = {"resources": [{"resource_type": int(rtype), "resource_name": name, "configs": [
        {"name": "retention.ms" if rtype == dc.ResourceType.TOPIC else "log.retention.ms", "config_operation": 0, "value": "1000"},
        {"name": delete, "config_operation": 1, "value": None}]}], "validate_only": True}
    (result,) = asyncio.run(_config_apis({"retention.ms": "5"}).alter_configs(body, incremental=True))["responses"]
    assert result["error_code"] == ErrorCode.INVALID_CONFIG
    assert says in result["error_message"]


def test_deleting_a_known_config_is_fine_whether_or_not_it_is_set():
    import asyncio

    body = {"resources": [{"resource_type": int(dc.ResourceType.TOPIC), "resource_name": "t", "configs": [
        {"name": "retention.ms", "config_operation": 1, "value": None},
        {"name": "segment.bytes", "config_operation": 1, "value": None}]}], "validate_only": True}
    (result,) = asyncio.run(_config_apis({"retention.ms": "5"}).alter_configs(body, incremental=True))["responses"]
    assert (result["error_code"], result["error_message"]) == (0, None)


def test_a_broker_resource_named_by_a_non_ascii_digit_is_an_invalid_request():
    """"²" passed isdigit() and int() raised ValueError: not an operating error, so the
    broker logged a traceback and closed the client's connection."""
    import asyncio

    from kafkalite.protocol.errors import ErrorCode

    body = {"resources": [{"resource_type": int(dc.ResourceType.BROKER), "resource_name": "\u00b2", "configs": [
        {"name": "log.retention.ms", "config_operation": 0, "value": "1000"}]}], "validate_only": True}
    (result,) = asyncio.run(_config_apis({}).alter_configs(body, incremental=True))["responses"]
    assert result["error_code"] == ErrorCode.INVALID_REQUEST
    assert "neither a broker id" in result["error_message"]
