"""The broker's ElectLeaders handler (behind `kafkalite elect-leaders`), with a fake controller."""

from __future__ import annotations

from types import SimpleNamespace

from kafkalite.broker.kafka_apis import KafkaApis
from kafkalite.broker.metadata_cache import MetadataCache, MetadataUpdates
from kafkalite.core.messages import UpdateMetadata
from kafkalite.protocol.codec import RequestHeader, decode_request, decode_response, encode_request, encode_response
from kafkalite.protocol.errors import ErrorCode
from kafkalite.protocol.schema import ApiKey
from kafkalite.rpc.transport import RpcError


def _cache() -> MetadataCache:
    cache = MetadataCache()
    cache.apply_update(UpdateMetadata.from_wire({
        "controller_id": 1, "controller_epoch": 1, "full": True,
        "brokers": [{"id": b, "host": "h", "port": 1, "inter_broker_port": 2, "admin_port": 3, "rack": None, "epoch": 1}
                    for b in (1, 2, 3)],
        "partitions": {"t": {"0": [1, 2, [1, 2, 3], [1, 2, 3], []],      # preferred leads
                             "1": [3, 5, [3, 1, 2], [2, 3, 1], []],      # 2 preferred, in ISR
                             "2": [1, 5, [1], [3, 1, 2], []]}},          # 3 preferred, out of ISR
    }))
    return cache


class FakeController:
    def __init__(self, cache: MetadataCache, fail: bool = False):
        self.cache = cache
        self.fail = fail
        self.calls: list[dict] = []

    async def call(self, api: str, body: dict, payload: bytes = b"", *, timeout_ms: int = 30000):
        self.calls.append({"api": api, **body})
        if self.fail:
            raise RpcError("PreferredElection timed out")
        elected = [tp for tp in body["partitions"] if tp == ["t", 1]]
        self.cache.apply_update(UpdateMetadata.from_wire({
            "controller_id": 1, "controller_epoch": 1, "brokers": [b.to_wire() for b in self.cache.brokers.values()],
            "partitions": {"t": {"1": [2, 6, [3, 1, 2], [2, 3, 1], []]}}}))
        return {"error": 0, "elected": elected}, memoryview(b"")


def _apis(controller: FakeController) -> KafkaApis:
    broker = SimpleNamespace(replica_manager=None, metadata_cache=controller.cache, metadata_updates=MetadataUpdates(),
                             settings={}, peer_client=lambda broker_id: controller)
    return KafkaApis(broker)


def _results(response: dict) -> dict:
    return {(r["topic"], p["partition_id"]): p["error_code"]
            for r in response["replica_election_results"] for p in r["partition_result"]}


async def test_elect_all_partitions_forwards_only_candidates_and_maps_results():
    controller = FakeController(_cache())
    frame = encode_request(ApiKey.ELECT_LEADERS, 1, 9, "t", {"election_type": 0, "topic_partitions": None, "timeout_ms": 2000})
    header, body = decode_request(frame[4:])
    response = await _apis(controller).elect_leaders(header, body)
    assert _results(response) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED, ("t", 1): 0,
                                  ("t", 2): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    assert controller.calls == [{"api": "PreferredElection", "partitions": [["t", 1], ["t", 2]]}]
    assert controller.cache.partition("t", 1).leader == 2
    # the response encodes at both versions
    for version in (0, 1):
        encoded = encode_response(RequestHeader(ApiKey.ELECT_LEADERS, version, 9, "t"), response)
        assert decode_response(ApiKey.ELECT_LEADERS, version, encoded[4:])[0] == 9


async def test_unknown_partitions_and_unreachable_controller():
    controller = FakeController(_cache(), fail=True)
    body = {"election_type": 0, "timeout_ms": 2000,
            "topic_partitions": [{"topic": "t", "partition_id": [0, 1, 9]}, {"topic": "nope", "partition_id": [0]}]}
    response = await _apis(controller).elect_leaders(None, body)
    assert _results(response) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED, ("t", 1): ErrorCode.REQUEST_TIMED_OUT,
                                  ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # nothing to elect: the controller is not asked
    controller.calls.clear()
    response = await _apis(controller).elect_leaders(None, {"topic_partitions": [{"topic": "t", "partition_id": [0]}]})
    assert controller.calls == []
