"""Replica placement for new topics and added partitions (DESIGN 6 "Topics"; seed 002
"副本放置策略"; Kafka's AdminUtils.assignReplicasToBrokers).

Rack-unaware: brokers sorted by id; partition i's first replica (the preferred leader) on
broker (i + start_index) mod n; the others follow at a shift that grows by one every n
partitions, so followers of consecutive partitions do not pile onto the same brokers.

Rack-aware (every broker has a rack): brokers are first interleaved rack by rack
(rack a's first broker, rack b's first broker, ..., rack a's second broker, ...), then
assigned as above, skipping a broker whose rack already holds a replica while some rack
holds none, and a broker already used while some broker is unused.

Deterministic: the caller draws `start_index` and `replica_shift` (Kafka draws them at
random) and passes them in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafkalite.core.codes import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[int],
    racks: Mapping[int, str | None] | None = None,
    start_index: int = 0,
    replica_shift: int = 0,
    start_partition_id: int = 0,
    enforce_racks: bool = False,
) -> dict[int, list[int]]:
    """Partition id -> replica list (first = preferred leader).

    Rack-aware only when every broker has a rack; when only some do, fall back to
    rack-unaware (Kafka's RackAwareMode.Safe) unless `enforce_racks`, which raises
    (RackAwareMode.Enforced). `start_partition_id` > 0 is for adding partitions.
    """
    if num_partitions <= 0:
        raise InvalidPartitionsError(f"number of partitions must be > 0, got {num_partitions}")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"replication factor must be > 0, got {replication_factor}"
        )
    broker_ids = sorted(set(brokers))
    if len(broker_ids) != len(brokers):
        raise InvalidReplicaAssignmentError(f"duplicate broker ids in {list(brokers)}")
    if replication_factor > len(broker_ids):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} larger than available brokers"
            f" {len(broker_ids)}"
        )
    assert start_index >= 0
    assert replica_shift >= 0
    assert start_partition_id >= 0
    rack_of = {b: (racks or {}).get(b) for b in broker_ids}
    with_rack = [b for b in broker_ids if rack_of[b] is not None]
    if with_rack and len(with_rack) != len(broker_ids) and enforce_racks:
        raise InvalidReplicaAssignmentError("not all brokers have rack information")
    if len(with_rack) == len(broker_ids):
        rack_map = {b: str(rack_of[b]) for b in broker_ids}
        result = _assign_rack_aware(
            num_partitions, replication_factor, rack_map, start_index, replica_shift,
            start_partition_id,
        )
    else:
        result = _assign_rack_unaware(
            num_partitions, replication_factor, broker_ids, start_index, replica_shift,
            start_partition_id,
        )
    for replicas in result.values():
        assert len(replicas) == replication_factor
        assert len(set(replicas)) == replication_factor
    return result


def _replica_index(first_index: int, shift: int, j: int, n: int) -> int:
    """Kafka AdminUtils.replicaIndex: never lands on `first_index` itself."""
    step = 1 + (shift + j) % (n - 1)
    return (first_index + step) % n


def _assign_rack_unaware(
    num_partitions: int,
    replication_factor: int,
    broker_ids: list[int],
    start_index: int,
    replica_shift: int,
    start_partition_id: int,
) -> dict[int, list[int]]:
    n = len(broker_ids)
    result: dict[int, list[int]] = {}
    shift = replica_shift
    partition_id = start_partition_id
    for _ in range(num_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        replicas = [broker_ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(broker_ids[_replica_index(first, shift, j, n)])
        result[partition_id] = replicas
        partition_id += 1
    return result


def rack_alternated_brokers(rack_of: Mapping[int, str]) -> list[int]:
    """Kafka getRackAlternatedBrokerList: racks sorted, brokers sorted within a rack,
    taken one per rack in turn."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(rack_of):
        by_rack.setdefault(rack_of[broker], []).append(broker)
    racks = sorted(by_rack)
    cursors = {rack: 0 for rack in racks}
    result: list[int] = []
    rack_index = 0
    while len(result) < len(rack_of):
        rack = racks[rack_index]
        if cursors[rack] < len(by_rack[rack]):
            result.append(by_rack[rack][cursors[rack]])
            cursors[rack] += 1
        rack_index = (rack_index + 1) % len(racks)
    return result


def _assign_rack_aware(
    num_partitions: int,
    replication_factor: int,
    rack_of: Mapping[int, str],
    start_index: int,
    replica_shift: int,
    start_partition_id: int,
) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(rack_of)
    n = len(arranged)
    num_racks = len(set(rack_of.values()))
    result: dict[int, list[int]] = {}
    shift = replica_shift
    partition_id = start_partition_id
    for _ in range(num_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                # n >= replication_factor >= 2 here, so _replica_index is defined; the loop
                # ends because a step of 1..n-1 visits every other broker within n-1 tries.
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                rack = rack_of[broker]
                k += 1
                rack_ok = rack not in racks_used or len(racks_used) == num_racks
                broker_ok = broker not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        result[partition_id] = replicas
        partition_id += 1
    return result
