"""Named client listeners (internal + host-advertised, as in docker-compose) and the
KAFKALITE_CFG_* environment overrides of `kafkalite broker`."""

from __future__ import annotations

import pytest

from kafkalite.config import BrokerConfig, ClientListenerConfig, ConfigError, env_overrides, load_config
from kafkalite.core.messages import BrokerEndpoint, UpdateMetadata
from kafkalite.zk.codec import BrokerRegistration, decode_broker_registration, encode_broker_registration


def test_two_named_listeners_pair_with_their_advertised_addresses():
    cfg = BrokerConfig({"broker.id": 1, "listeners": "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092",
                        "advertised.listeners": "EXTERNAL://localhost:9092,INTERNAL://broker1:19092",
                        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"})
    assert cfg.client_listeners() == [ClientListenerConfig("INTERNAL", "0.0.0.0", 19092, "broker1", 19092),
                                      ClientListenerConfig("EXTERNAL", "0.0.0.0", 9092, "localhost", 9092)]
    assert cfg.listener() == ("0.0.0.0", 19092)
    assert cfg.advertised_listener() == ("broker1", 19092)


def test_one_listener_keeps_its_old_meaning():
    assert BrokerConfig({"broker.id": 1}).advertised_listener() == ("127.0.0.1", 9092)
    cfg = BrokerConfig({"broker.id": 1, "listeners": "0.0.0.0:9100", "advertised.listeners": "example.org:9200"})
    assert cfg.client_listeners() == [ClientListenerConfig("PLAINTEXT", "0.0.0.0", 9100, "example.org", 9200)]


@pytest.mark.parametrize("values, message", [
    ({"listeners": "A://:1,A://:2"}, "distinct names and ports"),
    ({"listeners": "A://:1,B://:1"}, "distinct names and ports"),
    ({"listeners": "A://x:1", "advertised.listeners": "B://y:1"}, "listener 'B' is not in listeners (A)"),
    ({"listeners": "A://x:1", "advertised.listeners": "A://0.0.0.0:1"}, "needs a host clients can reach"),
    ({"listeners": "A://x:1", "advertised.listeners": "A://y:1,A://z:1"}, "bad value"),
])
def test_bad_listeners_name_the_key(values, message):
    with pytest.raises(ConfigError, match="listeners") as e:
        BrokerConfig({"broker.id": 1, **values})
    assert message in str(e.value)


def test_environment_overrides_sit_between_the_file_and_override(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("broker.id=1\nbroker.rack=file\nmin.insync.replicas=1\n")
    env = {"KAFKALITE_CFG_BROKER_RACK": "env", "KAFKALITE_CFG_MIN_INSYNC_REPLICAS": "2", "KAFKALITE_BOOTSTRAP": "ignored:1",
           "PATH": "/bin"}
    cfg = load_config(props, ["min.insync.replicas=3"], env)
    assert cfg["broker.rack"] == "env"
    assert cfg["min.insync.replicas"] == 3
    assert load_config(None, [], {"KAFKALITE_CFG_BROKER_ID": "4"}).broker_id == 4


def test_unknown_environment_override_names_the_variable():
    with pytest.raises(ConfigError, match="KAFKALITE_CFG_BROKER_IDD"):
        env_overrides({"KAFKALITE_CFG_BROKER_IDD": "1"})
    with pytest.raises(ConfigError, match="min.insync.replicas"):
        load_config(None, [], {"KAFKALITE_CFG_BROKER_ID": "1", "KAFKALITE_CFG_MIN_INSYNC_REPLICAS": "many"})


def test_endpoints_travel_through_zookeeper_and_update_metadata():
    reg = BrokerRegistration(1, "broker1", 19092, 9192, 9292, "a", (("INTERNAL", "broker1", 19092), ("EXTERNAL", "localhost", 9092)))
    assert decode_broker_registration(encode_broker_registration(reg), "/brokers/ids/1") == reg
    plain = BrokerRegistration(2, "h", 1, 2, 3, None)
    assert b"endpoints" not in encode_broker_registration(plain)  # one listener: the znode's layout is unchanged
    ep = BrokerEndpoint(1, "broker1", 19092, 9192, 9292, "a", 5, reg.endpoints)
    back = UpdateMetadata.from_wire(UpdateMetadata(1, 1, 5, (ep,)).to_wire()).brokers[0]
    assert back == ep
    assert back.address_for("EXTERNAL") == ("localhost", 9092)
    assert back.address_for("INTERNAL") == ("broker1", 19092)
    assert back.address_for("OTHER") == ("broker1", 19092)
    assert back.address_for(None) == ("broker1", 19092)


def test_security_protocols_come_from_the_protocol_map():
    cfg = BrokerConfig({"broker.id": 1, "listeners": "PLAINTEXT://:9092,SASL_SSL://:9192,CLIENTS://:9292",
                        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CLIENTS:SSL",
                        "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"})
    protocols = [(s.name, s.security_protocol, s.tls, s.sasl) for s in cfg.client_listeners()]
    assert protocols == [("PLAINTEXT", "PLAINTEXT", False, False), ("SASL_SSL", "SASL_SSL", True, True),
                         ("CLIENTS", "SSL", True, False)]
    assert BrokerConfig({"broker.id": 1, "listeners": "SASL_PLAINTEXT://:9"}).client_listeners()[0].security_protocol == "SASL_PLAINTEXT"


@pytest.mark.parametrize("values, message", [
    ({"listeners": "OUTSIDE://:1"}, "listener 'OUTSIDE' has no security protocol"),
    ({"listener.security.protocol.map": "A:TLS"}, "listener.security.protocol.map"),
    ({"listener.security.protocol.map": "A:SSL,A:PLAINTEXT"}, "listener.security.protocol.map"),
    ({"listeners": "SSL://:1"}, "'ssl.certificate.location' is required"),
    ({"listeners": "SSL://:1", "ssl.certificate.location": "c", "ssl.key.location": "k", "ssl.client.auth": "required"},
     "'ssl.ca.location' is required"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
])
def test_bad_security_settings_name_the_key(values, message):
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"broker.id": 1, **values})
    assert message in str(e.value)
