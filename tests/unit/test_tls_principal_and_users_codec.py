"""The mTLS principal of a dev-ca client certificate (Kafka's default: User:<subject, RFC
2253>) and the /config/users znode codec (Kafka's layout)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization

from kafkalite.broker.tls import certificate_principal
from kafkalite.cli.client_security import ClientConfigError, parse_properties, security_from_properties
from kafkalite.cli.dev_ca import issue, make_ca
from kafkalite.core.sasl import make_credential, user_credentials
from kafkalite.zk import paths
from kafkalite.zk.errors import ZnodeDecodeError
from kafkalite.zk.users import decode_user_config, encode_user_config


def test_client_certificate_principal_is_user_and_the_subject_most_specific_first():
    ca = make_ca()
    client = issue(ca, "client", server=False)
    der = client.certificate.public_bytes(serialization.Encoding.DER)
    assert certificate_principal(der) == "User:CN=client,O=kafkalite"
    odd = issue(ca, "a,b+c", server=False)
    assert certificate_principal(odd.certificate.public_bytes(serialization.Encoding.DER)) == "User:CN=a\\,b\\+c,O=kafkalite"


def test_user_config_znode_is_kafkas_layout_and_round_trips():
    cred = make_credential("SCRAM-SHA-512", "pw", b"salt", 4096).to_kafka()
    data = encode_user_config({"SCRAM-SHA-512": cred, "producer_byte_rate": "1024"})
    assert data.startswith(b'{"version":1,"config":{"SCRAM-SHA-512":"salt=c2FsdA==,stored_key=')
    config = decode_user_config(data, "/config/users/alice")
    assert config["producer_byte_rate"] == "1024"
    assert list(user_credentials(config)) == ["SCRAM-SHA-512"]
    for bad in (b"", b"[]", b'{"config": {"a": 1}}', b"\xff"):
        with pytest.raises(ZnodeDecodeError):
            decode_user_config(bad, "/config/users/x")


def test_user_names_are_sanitized_into_one_znode_name():
    assert paths.config_user_path("alice") == "/config/users/alice"
    assert paths.config_user_path("CN=a/b,O=x") == "/config/users/CN%3Da%2Fb%2CO%3Dx"
    assert paths.desanitize_user("CN%3Da%2Fb%2CO%3Dx") == "CN=a/b,O=x"
    with pytest.raises(ValueError):
        paths.config_user_path("")


def test_command_config_is_checked():
    props = parse_properties("# c\nsecurity.protocol=sasl_ssl\nsasl.mechanisms=SCRAM-SHA-512\nsasl.username=u\nsasl.password=p=q\n")
    sec = security_from_properties(props)
    assert (sec.security_protocol, sec.mechanism, sec.username, sec.password, sec.tls, sec.sasl) == \
        ("SASL_SSL", "SCRAM-SHA-512", "u", "p=q", True, True)
    for text in ("security.protocol=TLS\n", "security.protocol=SASL_SSL\nsasl.mechanisms=GSSAPI\n",
                 "security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=PLAIN\nsasl.username=u\n", "no equals sign\n"):
        with pytest.raises(ClientConfigError):
            security_from_properties(parse_properties(text))


def test_security_dev_ca_command_writes_pairs_that_chain_to_its_ca(tmp_path):
    """`kafkalite security dev-ca` as a user runs it: PEM pairs whose certificates the CA
    signed, the broker's with the loopback names and --host in its SANs; bad input is one
    line, not a traceback."""
    import ipaddress
    import subprocess
    import sys

    from cryptography import x509

    out = tmp_path / "ca"
    run = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "security", "dev-ca", "--out", str(out),
                          "--host", "broker.example", "--client-cn", "alice"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    listed = dict(line.split("\t") for line in run.stdout.splitlines())
    assert set(listed) == {"ca", "ca_key", "broker", "broker_key", "client", "client_key"}
    ca = x509.load_pem_x509_certificate(open(listed["ca"], "rb").read())
    broker = x509.load_pem_x509_certificate(open(listed["broker"], "rb").read())
    client = x509.load_pem_x509_certificate(open(listed["client"], "rb").read())
    for cert in (broker, client):
        cert.verify_directly_issued_by(ca)  # raises if the CA did not sign it
    sans = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "broker.example"} <= set(sans.get_values_for_type(x509.DNSName))
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert certificate_principal(client.public_bytes(serialization.Encoding.DER)) == "User:CN=alice,O=kafkalite"
    bad = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "security", "dev-ca", "--out", str(out), "--days", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--days" in bad.stderr and "Traceback" not in bad.stderr

