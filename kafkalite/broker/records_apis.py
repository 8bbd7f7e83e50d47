"""DeleteRecords (KIP-107) and DescribeLogDirs (KIP-113) for Kafka clients.

The handlers are registered in kafkalite.broker.kafka_apis' table; the decisions are
elsewhere: which log start a DeleteRecords moves to and when its acks are done in
kafkalite.core.delete_records (driven by ReplicaManager.delete_records), and what a
DescribeLogDirs answer holds in `describe_log_dirs` below, a pure function of a snapshot of
the log dirs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkalite.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kafkalite.broker.kafka_apis import KafkaApis
    from kafkalite.protocol.codec import RequestHeader

TP = tuple[str, int]


@dataclass(frozen=True)
class ReplicaOnDisk:
    """One partition replica in a log dir, as DescribeLogDirs reports it."""

    topic: str
    partition: int
    size_bytes: int
    offset_lag: int


def describe_log_dirs(log_dirs: Iterable[str], offline_dirs: Iterable[str], replicas: Mapping[str, list[ReplicaOnDisk]],
                      requested: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The `results` of a DescribeLogDirs answer: every log dir of the broker, an offline one
    (KIP-112) with KAFKA_STORAGE_ERROR and no topics; `requested` None means every topic,
    else the topics and partitions named (a name this broker does not hold is left out, as
    Kafka does). No replica is a future one: kafkalite never moves a replica between its
    own log dirs."""
    wanted: dict[str, set[int]] | None = None
    if requested is not None:
        wanted = {}
        for t in requested:
            wanted.setdefault(t["topic"], set()).update(t["partitions"])
    offline = set(offline_dirs)
    results = []
    for log_dir in log_dirs:
        if log_dir in offline:
            results.append({"error_code": int(ErrorCode.KAFKA_STORAGE_ERROR), "log_dir": log_dir, "topics": []})
            continue
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in sorted(replicas.get(log_dir, []), key=lambda r: (r.topic, r.partition)):
            if wanted is not None and r.partition not in wanted.get(r.topic, ()):
                continue
            assert r.size_bytes >= 0
            assert r.offset_lag >= 0
            by_topic.setdefault(r.topic, []).append({"partition_index": r.partition, "partition_size": r.size_bytes,
                                                     "offset_lag": r.offset_lag, "is_future_key": False})
        results.append({"error_code": 0, "log_dir": log_dir,
                        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]})
    return results


async def describe_log_dirs_handler(apis: KafkaApis, header: RequestHeader, body: dict) -> dict:
    logs = apis.broker.logs
    rm = apis.rm
    replicas: dict[str, list[ReplicaOnDisk]] = {}
    for (topic, p), plog in logs.logs().items():
        part = rm.partitions.get((topic, p))
        # offset_lag: a follower's lag behind the leader's LEO as its last fetch showed it
        # (Kafka reports max(HW - LEO, 0), which is always 0 for a current replica).
        lag = part.lag_behind_leader if part is not None and part.state.is_follower else 0
        replicas.setdefault(logs.dir_of(topic, p) or "", []).append(ReplicaOnDisk(topic, p, plog.size_bytes, lag))
    results = describe_log_dirs(logs.log_dirs, logs.offline_dirs, replicas, body.get("topics"))
    return {"throttle_time_ms": 0, "results": results}


def parse_delete_records(topics: list[dict[str, Any]]) -> tuple[dict[TP, int], list[TP]]:
    """The request's partitions: (offset per partition, partitions named more than once,
    which are answered INVALID_REQUEST rather than applied twice)."""
    offsets: dict[TP, int] = {}
    duplicates: list[TP] = []
    for t in topics:
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            if tp in offsets:
                duplicates.append(tp)
            offsets[tp] = p["offset"]
    for tp in duplicates:
        offsets.pop(tp, None)
    return offsets, duplicates


async def delete_records_handler(apis: KafkaApis, header: RequestHeader, body: dict) -> dict:
    offsets, duplicates = parse_delete_records(body["topics"])
    cache = apis.cache
    answers: dict[TP, tuple[int, int]] = {tp: (int(ErrorCode.INVALID_REQUEST), -1) for tp in duplicates}
    known = {tp: o for tp, o in offsets.items() if cache.partition(*tp) is not None}
    answers.update({tp: (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1) for tp in offsets if tp not in known})
    if known:
        timeout_ms = max(int(body["timeout_ms"]), 0)
        answers.update(await apis.rm.delete_records(known, timeout_ms, lambda tp: cache.partition(*tp) is not None))
    topics: dict[str, list[dict[str, Any]]] = {}
    for t in body["topics"]:
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            error, low = answers[tp]
            topics.setdefault(t["name"], []).append({"partition_index": tp[1], "low_watermark": low, "error_code": error})
    return {"throttle_time_ms": 0, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
