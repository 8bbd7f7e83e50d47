"""Inter-broker requests reach only the APIs in InterBrokerHandlers' table: a name off the
wire that is not one of them (a dunder, a helper's name) is an unknown request, answered
INVALID_REQUEST, and the handlers keep serving (found by review: api "_init__" called
self.__init__(header), after which every inter-broker request failed).

Each request is decoded before it is served: one that does not decode is INVALID_REQUEST and
reaches nothing; a bug while serving one that did is not passed off as a malformed request;
and what the real senders send decodes."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import pytest

from kafkalite.broker.fetcher import FetcherManager
from kafkalite.broker.inter_broker import InterBrokerHandlers
from kafkalite.broker.metadata_cache import MetadataCache
from kafkalite.broker.peer_messages import EndOffsetsRequest, OffsetsForLeaderEpochRequest, ReplicaFetchRequest
from kafkalite.core.fetch_session import SessionPartition
from kafkalite.core.messages import (
    AlterIsrProposal,
    AlterIsrRequest,
    BrokerEndpoint,
    ControlledShutdownRequest,
    LeaderAndIsr,
    PartitionLeadership,
    PartitionMetadata,
    PreferredElectionRequest,
    StopReplica,
    UpdateMetadata,
)
from kafkalite.log.config import LogConfig
from kafkalite.log.records import encode_batch
from kafkalite.protocol.errors import ErrorCode
from kafkalite.rpc.framing import decode_frame, encode_frame
from kafkalite.testing.replica_managers import FramedLoopback, leader_and_isr, replica_manager


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


async def test_a_bug_while_serving_a_replica_fetch_is_not_answered_as_a_malformed_request():
    class Sessions:
        def start(self, *args):
            raise KeyError("a bug in the fetch sessions")

    rm = RecordingReplicaManager()
    rm.fetch_sessions = Sessions()  # type: ignore[attr-defined]
    handlers = _registered_handlers(rm)
    header = {"api": "ReplicaFetch", "correlation_id": 1, "sender": 2, "broker_epoch": 5, "session": [0, 0],
              "partitions": [["t", 0, 0, 4, -1, 0]], "forgotten": []}
    with pytest.raises(KeyError):
        await handlers.handle(header, memoryview(b""))


def _framed(message) -> dict:
    """`message` as the receiving broker's handlers get it: its wire form through msgpack,
    with the `sender` the RPC transport adds."""
    sender = getattr(message, "replica_id", 7)
    header, _ = decode_frame(b"".join(encode_frame({"api": "x", "correlation_id": 1, "sender": sender, **message.to_wire()}, b""))[4:])
    return header


@pytest.mark.parametrize(("api", "message"), [
    ("LeaderAndIsr", LeaderAndIsr(1, 3, 20, (PartitionLeadership("t", 0, 1, 4, (1, 2), 7, (1, 2, 3), (3,), (2,)),),
                                  init=True, live_leaders={1: ("h1", 9001)}, topic_configs={"t": {"retention.ms": "1000"}},
                                  throttle={"leader": 1024}, topic_ids={"t": "AAAAAAAAAAAAAAAAAAAAAA"})),
    ("UpdateMetadata", UpdateMetadata(1, 3, 20, (BrokerEndpoint(1, "h1", 9092, 9192, 9292, "r1", 5, (("EXTERNAL", "e1", 19092),)),),
                                      (PartitionMetadata("t", 0, 1, 4, (1, 2), (1, 2, 3), (3,)),), full=True,
                                      deleted_topics=("gone",), topic_configs={"t": {"cleanup.policy": "compact"}},
                                      deleted_partitions=(("u", 5),))),
    ("StopReplica", StopReplica(1, 3, 20, (("t", 0), ("t", 1)), True)),
    ("AlterIsr", AlterIsrRequest(2, 9, (AlterIsrProposal("t", 0, 2, 4, (2, 3), 7, (9, 11)),))),
    ("ControlledShutdown", ControlledShutdownRequest(3, 12)),
    ("PreferredElection", PreferredElectionRequest(None)),
    ("PreferredElection", PreferredElectionRequest((("t", 0), ("t", 1)))),
    # (no field at its from_wire default, so a field to_wire leaves out is seen)
    ("ReplicaFetch", ReplicaFetchRequest(2, 17, 500, 64, 5 << 20, 256 << 10, 0, 0,
                                         {("t", 0): SessionPartition(5, 4, 3, 0), ("u", 2): SessionPartition(0, 1, -1, -1)}, [])),
    ("ReplicaFetch", ReplicaFetchRequest(3, 18, 250, 2, 1024, 512, 99, 4, {}, [("t", 0), ("u", 2)])),
    ("EndOffsets", EndOffsetsRequest([("t", 0), ("__consumer_offsets", 49)])),
    ("OffsetsForLeaderEpoch", OffsetsForLeaderEpochRequest([("t", 0, 4, 3), ("u", 1, 7, 7)])),
])
def test_what_a_broker_or_the_controller_sends_decodes_to_what_it_built(api, message):
    """After msgpack (tuples become lists, the NamedTuples plain arrays) the receiving
    side's decoder gives back the message the sender built: nothing legitimate is refused."""
    handlers, _ = _handlers()
    decode, _serve = handlers.apis[api]
    assert decode(_framed(message)) == message


async def test_followers_replicate_through_the_handlers_and_the_framing(tmp_path):
    """The followers' real fetchers, over the real frame encoding, against a leader's real
    replica manager: what a follower sends (full and incremental session fetches) decodes,
    and acks=all writes complete as both followers catch up."""
    settings = {"min.insync.replicas": 2, "replica.fetch.backoff.ms": 100, "replica.fetch.wait.max.ms": 500,
                "request.timeout.ms": 30000, "replica.fetch.min.bytes": 1, "replica.fetch.response.max.bytes": 10 << 20,
                "replica.fetch.max.bytes": 1 << 20}
    config = LogConfig(segment_bytes=1 << 20)
    request = leader_and_isr([("t", 0), ("t", 1)], leader=1, epoch=3, replicas=[1, 2, 3])
    leader = replica_manager(str(tmp_path), 1, config, settings)
    leader.handle_leader_and_isr(request)
    handlers = InterBrokerHandlers(SimpleNamespace(replica_manager=leader, metadata_cache=MetadataCache()))  # type: ignore[arg-type]
    followers = []
    for broker_id in (2, 3):
        rm = replica_manager(str(tmp_path), broker_id, config, settings)
        client = FramedLoopback(handlers, broker_id)
        mgr = FetcherManager(rm.settings, lambda _leader, c=client: c, lambda: -1, rm.metrics, _raise)
        mgr.broker_id = broker_id
        mgr.quotas = rm.core.quotas
        rm.fetchers = mgr
        rm.handle_leader_and_isr(request)
        followers.append((rm, mgr))
    try:
        batch = encode_batch([(None, b"v", ())], base_timestamp=1000)
        for i in range(10):
            result = await asyncio.wait_for(leader.append_records(-1, 30000, [("t", i % 2, batch)]), 10)
            assert [r["error"] for r in result.values()] == [0]
        assert [leader.partitions[("t", p)].hw for p in (0, 1)] == [5, 5]
        for rm, _mgr in followers:
            assert [rm.partitions[("t", p)].leo for p in (0, 1)] == [5, 5]
    finally:
        for _rm, mgr in followers:
            await mgr.close()


def _raise(e: BaseException) -> None:
    raise AssertionError(f"a fetcher failed: {e!r}")


def test_the_peer_requests_wire_layout_is_as_brokers_already_running_send_and_read_it():
    """A round trip cannot see a key renamed, or fields swapped, on both sides at once; a
    cluster being upgraded one broker at a time would. The layout, pinned."""
    fetch = ReplicaFetchRequest(2, 17, 500, 64, 5 << 20, 256 << 10, 99, 4, {("t", 0): SessionPartition(5, 4, 3, 0)}, [("u", 2)])
    assert fetch.to_wire() == {"broker_epoch": 17, "max_wait_ms": 500, "min_bytes": 64, "max_bytes": 5 << 20,
                               "partition_max_bytes": 256 << 10, "partitions": [["t", 0, 5, 4, 3, 0]], "session": [99, 4],
                               "forgotten": [["u", 2]]}
    assert EndOffsetsRequest([("t", 3)]).to_wire() == {"partitions": [["t", 3]]}
    assert OffsetsForLeaderEpochRequest([("t", 0, 4, 3)]).to_wire() == {"partitions": [["t", 0, 4, 3]]}
    # A follower from before the log-start field sends five fields a row.
    old = ReplicaFetchRequest.from_wire({"sender": 2, "session": [0, 0], "partitions": [["t", 0, 5, 4, 3]]})
    assert old.changed == {("t", 0): SessionPartition(5, 4, 3, -1)} and old.forgotten == []
