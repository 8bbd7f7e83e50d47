"""Broker configuration: Kafka names, TOML and .properties, overrides, errors that name the key."""

import pytest

from kafkalite.config import BrokerConfig, ConfigError, load_config, validate_topic_config


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
        validate_topic_config({"cleanup.policy": "compress"})


def test_compaction_topic_configs_are_validated_and_normalised():
    assert validate_topic_config({"cleanup.policy": "Delete, compact", "delete.retention.ms": "0", "min.cleanable.dirty.ratio": "0.25",
                                  "min.compaction.lag.ms": 5, "segment.ms": "60000"}) == {
        "cleanup.policy": "compact,delete", "delete.retention.ms": "0", "min.cleanable.dirty.ratio": "0.25",
        "min.compaction.lag.ms": "5", "segment.ms": "60000"}
    for key, bad in [("cleanup.policy", "compact,purge"), ("cleanup.policy", ""), ("delete.retention.ms", "-1"),
                     ("min.cleanable.dirty.ratio", "1.5"), ("min.cleanable.dirty.ratio", "nan"), ("min.cleanable.dirty.ratio", "x"),
                     ("min.compaction.lag.ms", "-5"), ("segment.ms", "0")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            validate_topic_config({key: bad})


def test_sizes_that_cannot_fit_in_an_inter_broker_frame_are_refused_naming_the_limit():
    # A replica fetch answer carries up to replica.fetch.response.max.bytes of records plus
    # one batch (<= message.max.bytes) in one frame of at most 256 MiB (268435456 bytes);
    # above that the follower refused every answer and resent the same fetch forever.
    at_limit = BrokerConfig({"broker.id": 1, "replica.fetch.response.max.bytes": 128 << 20,
                             "replica.fetch.max.bytes": 128 << 20, "message.max.bytes": 64 << 20})
    assert at_limit["replica.fetch.response.max.bytes"] == 128 << 20
    for key, bad in [("replica.fetch.response.max.bytes", (128 << 20) + 1), ("replica.fetch.response.max.bytes", 300 << 20),
                     ("replica.fetch.max.bytes", 300 << 20), ("message.max.bytes", (64 << 20) + 1)]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.") + r".*268435456") as info:
            BrokerConfig({"broker.id": 1, key: bad})
        assert str((128 << 20) if key.startswith("replica") else (64 << 20)) in str(info.value)
    assert validate_topic_config({"max.message.bytes": 64 << 20}) == {"max.message.bytes": str(64 << 20)}
    with pytest.raises(ConfigError, match=r"max\.message\.bytes.*268435456"):
        validate_topic_config({"max.message.bytes": (64 << 20) + 1})


def test_log_cleaner_broker_configs_are_validated():
    cfg = BrokerConfig({"broker.id": 1})
    assert cfg["log.cleaner.enable"] is True
    assert cfg["log.cleanup.policy"] == "delete"
    assert cfg["log.cleaner.dedupe.buffer.size"] == 128 * 1024 * 1024
    assert BrokerConfig({"broker.id": 1, "log.cleaner.io.max.bytes.per.second": "1e6"})["log.cleaner.io.max.bytes.per.second"] == 1e6
    for key, bad in [("log.cleanup.policy", "sometimes"), ("log.cleaner.threads", "0"), ("log.cleaner.dedupe.buffer.size", "1000"),
                     ("log.cleaner.io.max.bytes.per.second", "0"), ("log.cleaner.backoff.ms", "-1"),
                     ("log.cleaner.delete.retention.ms", "-1"), ("log.cleaner.min.cleanable.ratio", "2"),
                     ("log.cleaner.min.compaction.lag.ms", "-1"), ("log.cleaner.enable", "maybe")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            BrokerConfig({"broker.id": 1, key: bad})
    with pytest.raises(ConfigError, match=r"log\.cleaner\.dedupe\.buffer\.size.*per thread"):
        BrokerConfig({"broker.id": 1, "log.cleaner.threads": 4, "log.cleaner.dedupe.buffer.size": 200_000})


def test_sample_configs_load():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "config"
    for f in sorted(root.glob("broker*")):
        assert load_config(f).broker_id >= 1


# -- replica.selector.class (KIP-392) ------------------------------------------------------

def test_replica_selector_class_built_ins_kafka_names_and_class_paths(tmp_path):
    from kafkalite.config import make_replica_selector, replica_selector_class
    from kafkalite.core.replica_selector import LeaderSelector, RackAwareReplicaSelector
    from kafkalite.testing.replica_selectors import PinnedReplicaSelector

    assert load_config(None, ["broker.id=1"])["replica.selector.class"] == "LeaderSelector"
    assert replica_selector_class("RackAwareReplicaSelector") is RackAwareReplicaSelector
    assert replica_selector_class("org.apache.kafka.common.replica.LeaderSelector") is LeaderSelector
    assert replica_selector_class("kafkalite.core.replica_selector.RackAwareReplicaSelector") is RackAwareReplicaSelector
    path = "kafkalite.testing.replica_selectors.PinnedReplicaSelector"
    cfg = load_config(None, ["broker.id=7", f"replica.selector.class={path}"])
    selector = make_replica_selector(cfg["replica.selector.class"], cfg.as_dict())
    assert isinstance(selector, PinnedReplicaSelector) and selector.configured_for == 7  # configure() got the settings


@pytest.mark.parametrize("value, says", [
    ("Nonsense", "neither LeaderSelector"),
    ("no_such_module_kafkalite.Selector", "cannot import module"),
    ("kafkalite.testing.replica_selectors.Missing", "has no 'Missing'"),
    ("kafkalite.testing.replica_selectors.PIN_SEPARATOR", "is not a class"),
    ("collections.OrderedDict", "has no select"),
])
def test_a_bad_replica_selector_class_is_a_config_error_naming_the_key(value, says):
    with pytest.raises(ConfigError, match=r"replica\.selector\.class") as e:
        load_config(None, ["broker.id=1", f"replica.selector.class={value}"])
    assert says in str(e.value)


class _RefusingSelector:
    def configure(self, configs):
        raise ValueError("needs a rack map")

    def select(self, topic_partition, client_metadata, partition_view):
        return partition_view.leader


def test_a_selector_whose_configure_fails_is_a_config_error():
    from kafkalite.config import make_replica_selector

    with pytest.raises(ConfigError, match=r"replica\.selector\.class.*needs a rack map"):
        make_replica_selector(f"{__name__}._RefusingSelector", {})


def test_the_broker_command_reports_a_bad_selector_in_one_line(tmp_path):
    import subprocess
    import sys

    props = tmp_path / "b.properties"
    props.write_text("broker.id=1\n")
    proc = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "broker", "--config", str(props),
                           "--override", "replica.selector.class=no_such_module_kafkalite.Selector"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "replica.selector.class" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_group_coordinator_configs_are_validated():
    cfg = BrokerConfig({"broker.id": 1})
    assert cfg["offsets.topic.num.partitions"] == 50
    assert cfg["group.initial.rebalance.delay.ms"] == 3000
    for key, bad in [("offsets.topic.num.partitions", "0"), ("offsets.topic.replication.factor", "0"),
                     ("offsets.retention.minutes", "0"), ("offsets.commit.timeout.ms", "-5"), ("offset.metadata.max.bytes", "-1"),
                     ("group.max.size", "0"), ("group.initial.rebalance.delay.ms", "-1"), ("group.min.session.timeout.ms", "x")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            BrokerConfig({"broker.id": 1, key: bad})
    with pytest.raises(ConfigError, match=r"group\.min\.session\.timeout\.ms.*group\.max\.session\.timeout\.ms"):
        BrokerConfig({"broker.id": 1, "group.min.session.timeout.ms": 10_000, "group.max.session.timeout.ms": 5_000})


@pytest.mark.parametrize("key, value", [
    ("segment.bytes", "2147483648"),  # log/index.py keeps positions as int32: every append failed at 2 GiB
    ("segment.bytes", "4294967296"),
    ("max.message.bytes", "2147483648"),
    ("min.insync.replicas", str(1 << 40)),
    ("retention.ms", str(1 << 63)),  # LONG: 64 bits
])
def test_topic_configs_are_bounded_by_kafkas_int_and_long_types(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".*expected an integer from"):
        validate_topic_config({key: value})


def test_int_topic_configs_accept_int_max_and_long_ones_long_max():
    assert validate_topic_config({"segment.bytes": "2147483647", "retention.ms": str((1 << 63) - 1)}) == {
        "segment.bytes": "2147483647", "retention.ms": str((1 << 63) - 1)}


@pytest.mark.parametrize("key, value", [
    # (message.max.bytes and the replica fetch sizes have a lower bound: one inter-broker frame)
    ("log.segment.bytes", 1 << 31), ("min.insync.replicas", 1 << 31),
    ("offsets.topic.segment.bytes", 1 << 31), ("socket.request.max.bytes", 1 << 31),
    ("log.retention.bytes", 1 << 63), ("leader.replication.throttled.rate", 1 << 63),
    ("offsets.topic.replication.factor", 1 << 15),  # Kafka's SHORT
])
def test_broker_settings_are_bounded_by_kafkas_types(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BrokerConfig({"broker.id": 1, key: value})
    assert BrokerConfig({"broker.id": 1, key: value - 1})[key] == value - 1
