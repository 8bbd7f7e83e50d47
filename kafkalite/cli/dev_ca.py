"""`kafkalite security dev-ca --out DIR`: a development certificate authority, a broker
certificate and a client certificate, as PEM files, with the `cryptography` package.

    DIR/ca.pem  ca.key           the CA (keep ca.key private; clients trust ca.pem)
    DIR/broker.pem  broker.key   for ssl.certificate.location / ssl.key.location; its SANs
                                 are 127.0.0.1, ::1, localhost and every --host
    DIR/client.pem  client.key   for mutual TLS (ssl.client.auth=required); subject
                                 CN=<--client-cn>,O=kafkalite, so its principal is
                                 User:CN=client,O=kafkalite

Keys are EC P-256, unencrypted (file mode 0600): for development and tests, not production.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kafkalite.cli.admin_client import fail

ORGANIZATION = "kafkalite"
DAYS_DEFAULT = 825


@dataclass(frozen=True)
class Issued:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(days: int, not_before: datetime.datetime | None) -> tuple[datetime.datetime, datetime.datetime]:
    start = not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    return start, start + datetime.timedelta(days=days)


def make_ca(common_name: str = "kafkalite dev CA", days: int = DAYS_DEFAULT) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days, None)
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return Issued(cert, key)


def issue(ca: Issued, common_name: str, *, hosts: tuple[str, ...] = (), server: bool, days: int = DAYS_DEFAULT,
          not_before: datetime.datetime | None = None) -> Issued:
    """A leaf certificate signed by `ca`: a server one (SANs: `hosts`) or a client one."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days, not_before)
    builder = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca.certificate.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False))
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def write_pair(issued: Issued, directory: Path, stem: str) -> tuple[Path, Path]:
    """DIR/<stem>.pem and DIR/<stem>.key (0600)."""
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    cert_path.write_bytes(issued.certificate.public_bytes(serialization.Encoding.PEM))
    key_bytes = issued.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_bytes)
    return cert_path, key_path


def create_dev_ca(out: Path, hosts: tuple[str, ...] = (), client_cn: str = "client", days: int = DAYS_DEFAULT) -> dict[str, Path]:
    """Write the CA, broker and client pairs under `out`; their paths by name."""
    out.mkdir(parents=True, exist_ok=True)
    ca = make_ca(days=days)
    broker_hosts = tuple(dict.fromkeys(("127.0.0.1", "::1", "localhost", *hosts)))
    paths: dict[str, Path] = {}
    paths["ca"], paths["ca_key"] = write_pair(ca, out, "ca")
    paths["broker"], paths["broker_key"] = write_pair(issue(ca, "kafkalite broker", hosts=broker_hosts, server=True, days=days),
                                                      out, "broker")
    paths["client"], paths["client_key"] = write_pair(issue(ca, client_cn, server=False, days=days), out, "client")
    return paths


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("security", help="development TLS material")
    ssub = p.add_subparsers(dest="security_command", required=True)
    dev = ssub.add_parser("dev-ca", help="a development CA, a broker certificate and a client certificate (PEM)")
    dev.add_argument("--out", required=True, metavar="DIR", help="directory for the PEM files (created)")
    dev.add_argument("--host", action="append", default=[], metavar="NAME_OR_IP",
                     help="extra SAN of the broker certificate (repeatable; 127.0.0.1, ::1 and localhost are always in)")
    dev.add_argument("--client-cn", default="client", help="common name of the client certificate (default client)")
    dev.add_argument("--days", type=int, default=DAYS_DEFAULT, help=f"validity in days (default {DAYS_DEFAULT})")
    dev.set_defaults(func=run_dev_ca)


def run_dev_ca(args: argparse.Namespace) -> int:
    if args.days < 1:
        return fail("security dev-ca", "--days must be >= 1", 2)
    try:
        paths = create_dev_ca(Path(args.out), tuple(args.host), args.client_cn, args.days)
    except OSError as e:
        return fail("security dev-ca", f"cannot write to {args.out!r}: {e.strerror}")
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0
