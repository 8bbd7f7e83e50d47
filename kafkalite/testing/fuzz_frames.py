"""Malformed and mutated frames for fuzzing live brokers (issue 14's fuzz soak,
`bench/fuzz_soak.py`, and its short version in tests/integration/test_bad_input.py).

`FrameFuzzer(seed)` yields (kind, bytes), reproducibly for a seed:

- `random`: any bytes, so the length prefix lies in any way;
- `framed`: a correct length prefix around random bytes;
- `header`: a request header with a random API key and version, then random bytes;
- `body`: a real API key at a version we serve, and a random body;
- `huge-length` / `negative-length`: length prefixes far over the limit, or below zero;
- `truncated`: a real client's frame cut short (its prefix still promises the rest);
- `mutated`: a real client's frame with fields changed: bytes flipped, an integer (a
  count, a length, an offset, an epoch) overwritten with an extreme value, bytes inserted
  or deleted with the prefix fixed up, two frames spliced, the version bumped;
- `rpc`: random bytes, framed or not, for the inter-broker RPC port.

The real frames are built by kafka-python 3.0's own request classes (imported when first
needed): ApiVersions, Metadata, Produce (with a valid record batch), Fetch, ListOffsets,
InitProducerId, FindCoordinator, JoinGroup, Heartbeat, OffsetFetch. Requests that change
the cluster (CreateTopics, DeleteTopics, ...) are left out on purpose: a mutation that
stays well formed would be a legitimate request, and deleting a topic is not a fault.
"""

from __future__ import annotations

import random
import struct
import warnings
from collections.abc import Iterator

from kafkalite.log.records import encode_batch
from kafkalite.protocol.schema import SUPPORTED_VERSIONS

KINDS = ("random", "framed", "header", "body", "huge-length", "negative-length", "truncated", "mutated", "rpc")
# How often each kind comes up: mostly real frames mutated, as those reach the deepest code.
WEIGHTS = (8, 8, 10, 12, 3, 3, 10, 40, 6)
EXTREMES = (0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, -0x8000, 0xFFFF, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFFFFFFFFFF)


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def real_frames(topic: str, group: str = "fuzz-group") -> list[tuple[str, bytes]]:
    """(name, frame with its length prefix) as kafka-python 3.0 sends them."""
    with warnings.catch_warnings():  # kafka-python's schema loader uses deprecated APIs
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.protocol.consumer.fetch import FetchRequest
        from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest
        from kafka.protocol.consumer.offsets import ListOffsetsRequest
        from kafka.protocol.metadata.api_versions import ApiVersionsRequest
        from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
        from kafka.protocol.metadata.metadata import MetadataRequest
        from kafka.protocol.producer.produce import ProduceRequest
        from kafka.protocol.producer.transaction import InitProducerIdRequest

        batch = encode_batch([(b"key-%d" % i, b"fuzz value %d" % i, ()) for i in range(3)])
        requests = [
            ("ApiVersions", ApiVersionsRequest[2]()),
            ("Metadata", MetadataRequest[5](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                            allow_auto_topic_creation=False)),
            ("Produce", ProduceRequest[7](acks=-1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])),
            ("Fetch", FetchRequest[11](
                replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, rack_id="", topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                    FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                           log_start_offset=-1, partition_max_bytes=1 << 20)])])),
            ("ListOffsets", ListOffsetsRequest[5](replica_id=-1, isolation_level=0, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                    ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                             timestamp=-1)])])),
            ("InitProducerId", InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60000)),
            ("FindCoordinator", FindCoordinatorRequest[2](key=group, key_type=0)),
            ("JoinGroup", JoinGroupRequest[5](
                group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
                protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\0\1")])),
            ("Heartbeat", HeartbeatRequest[3](group_id=group, generation_id=1, member_id="m", group_instance_id=None)),
        ]
        out = []
        for i, (name, request) in enumerate(requests):
            request.with_header(correlation_id=1000 + i, client_id="kafka-python-3.0")
            out.append((name, bytes(request.encode(framed=True, header=True))))
        return out


class FrameFuzzer:
    def __init__(self, seed: int, topic: str = "fuzz-target") -> None:
        self.rng = random.Random(seed)
        self.seeds = real_frames(topic)
        self.api_keys = sorted(int(k) for k in SUPPORTED_VERSIONS)

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        while True:
            yield self.next()

    def next(self) -> tuple[str, bytes]:
        kind = self.rng.choices(KINDS, WEIGHTS)[0]
        return kind, getattr(self, "_" + kind.replace("-", "_"))()

    # ------------------------------------------------------------------ the kinds

    def _bytes(self, n_max: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, n_max))

    def _random(self) -> bytes:
        return self._bytes(300)

    def _framed(self) -> bytes:
        return framed(self._bytes(300))

    def _header(self, api_key: int | None = None, version: int | None = None) -> bytes:
        r = self.rng
        api_key = r.randint(-5, 90) if api_key is None else api_key
        version = r.randint(-3, 20) if version is None else version
        client_id = self._bytes(12)
        length = r.choice((len(client_id), -1, r.randint(-100, 400)))
        return struct.pack(">hhih", api_key, version, r.randint(-(2**31), 2**31 - 1), length) + client_id

    def _body(self) -> bytes:
        api_key = self.rng.choice(self.api_keys)
        low, high = SUPPORTED_VERSIONS[api_key]  # type: ignore[index]
        return framed(self._header(api_key, self.rng.randint(low, high)) + self._bytes(200))

    def _huge_length(self) -> bytes:
        return struct.pack(">i", self.rng.randint(2**20, 2**31 - 1)) + self._bytes(64)

    def _negative_length(self) -> bytes:
        return struct.pack(">i", self.rng.randint(-(2**31), -1)) + self._bytes(16)

    def _truncated(self) -> bytes:
        _, frame = self.rng.choice(self.seeds)
        return frame[: self.rng.randint(1, len(frame) - 1)]

    def _rpc(self) -> bytes:
        return self._framed() if self.rng.random() < 0.5 else self._random()

    def _mutated(self) -> bytes:
        r = self.rng
        _, frame = r.choice(self.seeds)
        body = bytearray(frame[4:])
        for _ in range(r.randint(1, 3)):
            how = r.randrange(6)
            if how == 0 and body:  # flip bits
                for _ in range(r.randint(1, 4)):
                    body[r.randrange(len(body))] ^= 1 << r.randrange(8)
            elif how == 1 and len(body) >= 8:  # an integer field made extreme
                width = r.choice((1, 2, 4, 8))
                at = r.randrange(len(body) - width + 1)
                value = r.choice(EXTREMES) & ((1 << (8 * width)) - 1)
                body[at:at + width] = value.to_bytes(width, "big")
            elif how == 2:  # bytes inserted
                at = r.randrange(len(body) + 1)
                body[at:at] = self._bytes(16)
            elif how == 3 and len(body) > 1:  # bytes deleted
                at = r.randrange(len(body))
                del body[at:at + r.randint(1, 16)]
            elif how == 4:  # another frame's tail spliced on
                _, other = r.choice(self.seeds)
                cut = r.randrange(len(body) + 1)
                body = body[:cut] + bytearray(other[4 + r.randrange(len(other) - 4):])
            elif how == 5 and len(body) >= 4:  # the API version changed
                body[2:4] = struct.pack(">h", r.randint(-2, 20))
        out = framed(bytes(body))
        if r.random() < 0.1:  # and sometimes the prefix lies too
            out = struct.pack(">i", len(body) + r.randint(-8, 8)) + bytes(body)
        return out


__all__ = ["FrameFuzzer", "KINDS", "framed", "real_frames"]
