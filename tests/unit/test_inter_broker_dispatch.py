"""Inter-broker requests reach only the APIs in InterBrokerHandlers' table: a name off the
wire that is not one of them (a dunder, a helper's name) is an unknown request, answered
INVALID_REQUEST, and the handlers keep serving (found by review: api "_init__" called
self.__init__(header), after which every inter-broker request failed)."""

from __future__ import annotations

import asyncio
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


class RecordingReplicaManager:
    """Records what reaches it; `fail_with` makes serving fail as a bug in it would."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.calls: list[str] = []
        self.fail_with = fail_with

    def handle_leader_and_isr(self, request):
        self.calls.append("LeaderAndIsr")
        if self.fail_with is not None:
            raise self.fail_with
        return {"error": 0, "partitions": []}

    def handle_stop_replica(self, request):
        self.calls.append("StopReplica")
        return {"error": 0, "partitions": []}


def _registered_handlers(rm: RecordingReplicaManager) -> InterBrokerHandlers:
    registered = asyncio.Event()
    registered.set()
    broker = SimpleNamespace(replica_manager=rm, registered=registered, note_broker_address=lambda *a: None,
                             metadata_cache=SimpleNamespace(brokers={}), controller=SimpleNamespace(active=False))
    return InterBrokerHandlers(broker)  # type: ignore[arg-type]


LEADER_AND_ISR = {"controller_id": 1, "controller_epoch": 3, "broker_epoch": 20, "live_leaders": {},
                  "partitions": [["t", 0, 1, 4, [1, 2], 0, [1, 2]]]}


@pytest.mark.parametrize(("api", "header"), [
    ("LeaderAndIsr", {**LEADER_AND_ISR, "partitions": [["t", 0, 1]]}),            # a row too short
    ("LeaderAndIsr", {**LEADER_AND_ISR, "partitions": [[7, 0, 1, 4, [1, 2], 0, [1, 2]]]}),  # a topic that is no string
    ("LeaderAndIsr", {k: v for k, v in LEADER_AND_ISR.items() if k != "controller_epoch"}),
    ("StopReplica", {"controller_id": 1, "controller_epoch": 3, "partitions": 5}),
    ("UpdateMetadata", {"controller_id": 1, "controller_epoch": 3, "brokers": [{"id": 1}]}),
    ("AlterIsr", {"broker_id": 1, "partitions": [["t", 0, 1, 4, "not a list", 0]]}),
    ("ControlledShutdown", {"broker_epoch": 3}),
    ("PreferredElection", {"partitions": [["t"]]}),
    ("ReplicaFetch", {"sender": 2, "partitions": []}),                              # no session
    ("ReplicaFetch", {"sender": 2, "session": [0, 0], "partitions": [["t", 0, "x", 1, 1]]}),
    ("EndOffsets", {"partitions": [["t", "zero"]]}),
    ("OffsetsForLeaderEpoch", {"partitions": [["t", 0, 1]]}),
])
async def test_a_request_that_does_not_decode_is_refused_before_anything_is_served(api, header):
    rm = RecordingReplicaManager()
    handlers = _registered_handlers(rm)
    answer, payload = await handlers.handle({"api": api, "correlation_id": 1, "sender": 2, **header}, memoryview(b""))
    assert answer == {"error": int(ErrorCode.INVALID_REQUEST)} and payload == b""
    assert rm.calls == []


@pytest.mark.parametrize("bug", [KeyError("partition"), TypeError("unhashable"), ValueError("bad state")])
async def test_a_bug_while_serving_a_decoded_request_is_not_answered_as_a_malformed_request(bug, caplog):
    """The same exception types as a malformed request's, raised by this broker's own code
    after decoding: they reach the RPC transport (which logs them with their traceback and
    closes the connection), not the sender as INVALID_REQUEST with a one-line warning."""
    rm = RecordingReplicaManager(fail_with=bug)
    handlers = _registered_handlers(rm)
    with pytest.raises(type(bug)):
        await handlers.handle({"api": "LeaderAndIsr", "correlation_id": 1, "sender": 1, **LEADER_AND_ISR}, memoryview(b""))
    assert rm.calls == ["LeaderAndIsr"]
    assert "malformed" not in caplog.text
    answer, _ = await handlers.handle({"api": "StopReplica", "correlation_id": 2, "sender": 1, "controller_id": 1,
                                       "controller_epoch": 3, "partitions": [["t", 0]]}, memoryview(b""))
    assert answer["error"] == 0  # and the handlers go on serving
