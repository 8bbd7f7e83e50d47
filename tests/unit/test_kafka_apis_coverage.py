"""Every API the broker advertises in ApiVersions has a handler (or is a group API, served by
the group coordinator's driver): an advertised API without one would be a KeyError, a closed
connection, for any client that uses it."""

from __future__ import annotations

from kafkalite.broker.kafka_apis import _HANDLERS, GROUP_APIS
from kafkalite.protocol.schema import SUPPORTED_VERSIONS, ApiKey


def test_every_advertised_api_is_handled():
    assert set(SUPPORTED_VERSIONS) == set(_HANDLERS) | GROUP_APIS
    assert not set(_HANDLERS) & GROUP_APIS
    assert {ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE} <= GROUP_APIS
