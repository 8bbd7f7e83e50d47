"""Inter-broker requests reach only the APIs in InterBrokerHandlers' table: a name off the
wire that is not one of them (a dunder, a helper's name) is an unknown request, answered
INVALID_REQUEST, and the handlers keep serving (found by review: api "_init__" called
self.__init__(header), after which every inter-broker request failed)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from kafkalite.broker.inter_broker import InterBrokerHandlers
from kafkalite.protocol.errors import ErrorCode


def _handlers() -> tuple[InterBrokerHandlers, SimpleNamespace]:
    broker = SimpleNamespace(replica_manager=object(), broker_id=7, broker_epoch=42, incarnation="inc-1")
    return InterBrokerHandlers(broker), broker  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["_init__", "_class__", "_controller_call", "controller_call", "handle", "Ping ", ""])
async def test_a_request_naming_no_served_api_is_refused_and_breaks_nothing(api):
    handlers, broker = _handlers()
    answer, payload = await handlers.handle({"api": api, "correlation_id": 1, "sender": 99}, memoryview(b""))
    assert answer == {"error": int(ErrorCode.INVALID_REQUEST)}
    assert payload == b""
    assert handlers.broker is broker
    ping, _ = await handlers.handle({"api": "Ping", "correlation_id": 2, "sender": 1}, memoryview(b""))
    assert ping == {"error": 0, "broker_id": 7, "broker_epoch": 42, "incarnation": "inc-1"}


def test_every_handler_method_is_in_the_table():
    handlers, _ = _handlers()
    methods = {name[1:] for name, _ in inspect.getmembers(InterBrokerHandlers, inspect.iscoroutinefunction)
               if name[:1] == "_" and name[1:2].isupper()}
    assert methods == set(handlers.apis)
