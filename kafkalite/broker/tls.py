"""TLS for SSL and SASL_SSL client listeners: the server context built from the broker's
ssl.* settings, and the principal a client certificate stands for.

TLS 1.2 is the floor (Kafka's default ssl.enabled.protocols is TLSv1.2,TLSv1.3). The
principal of a certificate is Kafka's default (DefaultKafkaPrincipalBuilder without
ssl.principal.mapping.rules): "User:" + the subject's distinguished name as an RFC 2253
string, most specific attribute first, e.g. "User:CN=client,O=kafkalite".
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from cryptography import x509

from kafkalite.config import ConfigError

HANDSHAKE_TIMEOUT_S = 10.0  # a client that opens the port and says nothing is dropped after this

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(settings: Mapping[str, Any], security_protocol: str) -> ssl.SSLContext:
    """The SSLContext of this broker's SSL or SASL_SSL listeners; a missing or bad file is a
    ConfigError naming the key. ssl.client.auth applies to SSL listeners, where the
    certificate is the identity; a SASL_SSL client authenticates with SASL and is not asked
    for a certificate (Kafka would apply ssl.client.auth to both unless overridden per
    listener; kafkalite has no per-listener ssl settings, so one cluster can offer SCRAM over
    TLS and mutual TLS side by side)."""
    assert security_protocol in ("SSL", "SASL_SSL"), security_protocol
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(settings["ssl.certificate.location"], settings["ssl.key.location"],
                            password=settings["ssl.key.password"] or None)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"config keys 'ssl.certificate.location'/'ssl.key.location': cannot load "
                          f"{settings['ssl.certificate.location']!r} with {settings['ssl.key.location']!r}: {e}") from None
    ctx.verify_mode = _VERIFY[settings["ssl.client.auth"]] if security_protocol == "SSL" else ssl.CERT_NONE
    if settings["ssl.ca.location"]:
        try:
            ctx.load_verify_locations(cafile=settings["ssl.ca.location"])
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"config key 'ssl.ca.location': cannot load {settings['ssl.ca.location']!r}: {e}") from None
    return ctx


def certificate_principal(der: bytes) -> str:
    """"User:<subject DN, RFC 2253>" of a DER certificate the handshake verified."""
    subject = x509.load_der_x509_certificate(der).subject
    return "User:" + subject.rfc4514_string()
