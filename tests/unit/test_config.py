"""Broker configuration: Kafka names, TOML and .properties, overrides, errors that name the key."""

import pytest

from kafkalite.config import ConfigError, load_config, validate_topic_config


def test_properties_toml_and_overrides(tmp_path):
    props = tmp_path / "b.properties"
    props.write_text("# comment\nbroker.id=3\nlog.dirs=/a, /b\nmin.insync.replicas : 2\nunclean.leader.election.enable=true\n")
    cfg = load_config(props, ["min.insync.replicas=1", "broker.rack=r1"])
    assert cfg.broker_id == 3
    assert cfg["log.dirs"] == ["/a", "/b"]
    assert cfg["min.insync.replicas"] == 1
    assert cfg["unclean.leader.election.enable"] is True
    assert cfg.rack == "r1"
    toml = tmp_path / "b.toml"
    toml.write_text('listeners = "PLAINTEXT://127.0.0.1:9999"\n[broker]\nid = 4\n[log]\ndirs = ["/x"]\n')
    cfg = load_config(toml)
    assert (cfg.broker_id, cfg["log.dirs"], cfg.listener()) == (4, ["/x"], ("127.0.0.1", 9999))


@pytest.mark.parametrize("override, key", [
    ("bogus.key=1", "bogus.key"),
    ("num.partitions=zero", "num.partitions"),
    ("min.insync.replicas=0", "min.insync.replicas"),
    ("listeners=nonsense", "listeners"),
    ("log.level=LOUD", "log.level"),
    ("controller.enable=maybe", "controller.enable"),
])
def test_bad_keys_and_values_name_the_key(tmp_path, override, key):
    props = tmp_path / "b.properties"
    props.write_text("broker.id=1\n")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(props, [override])


def test_missing_required_key_and_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="broker.id"):
        load_config(None, [])
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.properties")
    bad = tmp_path / "b.toml"
    bad.write_text("broker.id = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_topic_configs_are_validated():
    assert validate_topic_config({"min.insync.replicas": "2", "retention.ms": 1000}) == {"min.insync.replicas": "2", "retention.ms": "1000"}
    with pytest.raises(ConfigError, match="unknown topic config"):
        validate_topic_config({"compression.typo": "x"})
    with pytest.raises(ConfigError, match="min.insync.replicas"):
        validate_topic_config({"min.insync.replicas": "0"})
    with pytest.raises(ConfigError, match="cleanup.policy"):
        validate_topic_config({"cleanup.policy": "compact"})


def test_sample_configs_load():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "config"
    for f in sorted(root.glob("broker*")):
        assert load_config(f).broker_id >= 1
