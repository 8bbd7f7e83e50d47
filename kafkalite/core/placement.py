"""Replica placement for new topics and added partitions (DESIGN 6 "Topics"; seed 002
"副本放置策略"; Kafka's AdminUtils.assignReplicasToBrokers), and for moving existing
partitions (`reassign_replicas`, behind `kafkalite reassign generate`).

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


# --------------------------------------------------------------------------- reassignment

PartitionKey = tuple[str, int]


def reassign_replicas(
    current: Mapping[PartitionKey, Sequence[int]],
    brokers: Sequence[int],
    racks: Mapping[int, str | None] | None = None,
    *,
    rebalance: bool = False,
) -> dict[PartitionKey, list[int]]:
    """A new placement of existing partitions on `brokers` only (`kafkalite reassign
    generate`), moving as few replicas as possible: (topic, partition) -> replicas, for every
    partition of `current`, unchanged ones included.

    - Each partition keeps its replication factor and every current replica that is on an
      allowed broker and does not stand in the way of rack spread; the others are replaced
      by the least-loaded allowed brokers (replica count, then leader count, then id), so a
      placement that already uses allowed brokers only and is rack-valid does not move.
    - Rack spread: rack-aware when every allowed broker has a rack (as at topic creation):
      the replicas of a partition cover min(RF, racks) racks. Otherwise brokers only need
      to be distinct.
    - The current preferred leader stays first if it stays; a partition that loses it gets
      the replica leading the fewest partitions as its new first replica.
    - `rebalance` then also moves replicas from the most to the least loaded brokers until
      replica counts differ by at most one (where racks allow it), preferring replicas this
      plan places anyway, then followers: how a new, empty broker gets its share.

    Loads count the partitions of `current` only.
    """
    allowed = sorted(set(brokers))
    if len(allowed) != len(brokers):
        raise InvalidReplicaAssignmentError(f"duplicate broker ids in {list(brokers)}")
    if not allowed:
        raise InvalidReplicaAssignmentError("no brokers to place replicas on")
    for (topic, partition), replicas in current.items():
        if not replicas or len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"{topic}-{partition} has replicas {list(replicas)}")
        if len(replicas) > len(allowed):
            raise InvalidReplicationFactorError(
                f"{topic}-{partition} has replication factor {len(replicas)}, more than the"
                f" {len(allowed)} brokers given"
            )
    spread = _Spread(allowed, racks)
    load = {b: 0 for b in allowed}
    proposed = _fill(current, allowed, spread, load)
    if rebalance:
        _rebalance(proposed, current, load, spread)
    _put_leaders_first(proposed, current, allowed)
    keys = sorted(current)
    for k in keys:
        assert len(proposed[k]) == len(current[k])
        assert len(set(proposed[k])) == len(proposed[k])
        assert set(proposed[k]) <= set(allowed)
        assert spread.is_valid(proposed[k])
    return proposed


def _fill(
    current: Mapping[PartitionKey, Sequence[int]], allowed: list[int], spread: _Spread, load: dict[int, int]
) -> dict[PartitionKey, list[int]]:
    """Keep what may stay; give each vacated slot the least-loaded broker that keeps the
    spread reachable (replica count, then leaders kept, then id). A replaced replica's slot
    goes to its replacement, so the plan reads "3 -> 4". Fills `load` (replicas per
    allowed broker) as it goes."""
    keys = sorted(current)
    slots = {k: spread.keepable(current[k]) for k in keys}
    kept_leaders = {b: 0 for b in allowed}
    for k in keys:
        for b in slots[k]:
            if b is not None:
                load[b] += 1
        if slots[k][0] is not None:
            kept_leaders[slots[k][0]] += 1
    proposed: dict[PartitionKey, list[int]] = {}
    for k in keys:
        replicas = slots[k]
        for i, b in enumerate(replicas):
            if b is not None:
                continue
            placed = [x for x in replicas if x is not None]
            candidates = [c for c in allowed if spread.can_add(placed, c, len(replicas))]
            assert candidates  # the spread rules leave room for one more (see _Spread)
            chosen = min(candidates, key=lambda c: (load[c], kept_leaders[c], c))
            replicas[i] = chosen
            load[chosen] += 1
        proposed[k] = [b for b in replicas if b is not None]
    return proposed


def _put_leaders_first(
    proposed: dict[PartitionKey, list[int]], current: Mapping[PartitionKey, Sequence[int]], allowed: list[int]
) -> None:
    """Preferred leaders: the current one wherever it stayed (a rebalance may have moved its
    slot away and brought it back elsewhere); else the replica leading the fewest
    partitions so far, earlier slots first."""
    keys = sorted(current)
    leaders = {b: 0 for b in allowed}
    for k in keys:
        if current[k][0] in proposed[k]:
            leaders[current[k][0]] += 1
    for k in keys:
        if current[k][0] in proposed[k]:
            leader = current[k][0]
        else:
            leader = min(proposed[k], key=lambda b: (leaders[b], proposed[k].index(b)))
            leaders[leader] += 1
        proposed[k].remove(leader)
        proposed[k].insert(0, leader)


class _Spread:
    """The rack rule of one placement: a partition of RF replicas must cover
    min(RF, number of racks) racks. Without racks on every broker each broker is its own
    rack, which leaves only "distinct brokers"."""

    def __init__(self, allowed: list[int], racks: Mapping[int, str | None] | None) -> None:
        given = {b: (racks or {}).get(b) for b in allowed}
        if all(r is not None for r in given.values()):
            self.rack_of = {b: f"rack:{r}" for b, r in given.items()}
        else:
            self.rack_of = {b: f"broker:{b}" for b in allowed}
        self.rack_count = len(set(self.rack_of.values()))

    def target(self, replication_factor: int) -> int:
        return min(replication_factor, self.rack_count)

    def racks(self, replicas: Sequence[int]) -> set[str]:
        return {self.rack_of[b] for b in replicas}

    def can_add(self, replicas: Sequence[int], broker: int, replication_factor: int) -> bool:
        """Whether `broker` may join `replicas` with the spread still reachable by the
        slots left. A new rack always may; a rack already used only while the slots left
        after it still cover the racks missing. While fewer than RF replicas are placed,
        some broker always may: a new rack if fewer than the target are covered, else any
        unused broker (there are at least RF allowed brokers)."""
        if broker not in self.rack_of or broker in replicas:
            return False
        used = self.racks(replicas)
        if self.rack_of[broker] not in used:
            return True
        slots_left = replication_factor - len(replicas) - 1
        return slots_left >= self.target(replication_factor) - len(used)

    def keepable(self, replicas: Sequence[int]) -> list[int | None]:
        """`replicas` with None in the slots of those that must go: on a broker not
        allowed, or a rack duplicate beyond what the spread leaves room for (the earlier one
        stays, so a preferred leader on an allowed broker always does)."""
        kept: list[int] = []
        slots: list[int | None] = []
        for b in replicas:
            keep = self.can_add(kept, b, len(replicas))
            if keep:
                kept.append(b)
            slots.append(b if keep else None)
        return slots

    def is_valid(self, replicas: Sequence[int]) -> bool:
        return len(self.racks(replicas)) == self.target(len(replicas))


def _rebalance(
    proposed: dict[PartitionKey, list[int]],
    current: Mapping[PartitionKey, Sequence[int]],
    load: dict[int, int],
    spread: _Spread,
) -> None:
    """Balance replica counts within one where the rack rules allow it.

    First pass, straight to target counts: the `total mod n` most loaded brokers keep one
    above the floor (which moves the fewest replicas), and each broker above its target
    gives its cheapest replicas to brokers below theirs. A broker that rack rules keep
    above its target (say the only broker of a rack) is left as it is and the targets of
    the others are computed again. Second pass, for what is left: one move at a time from
    a most to a least loaded broker; each lowers the sum of squared loads, so it ends."""
    hosting: dict[int, set[PartitionKey]] = {b: set() for b in load}
    for k, replicas in proposed.items():
        for b in replicas:
            hosting[b].add(k)

    def move(k: PartitionKey, source: int, target: int) -> None:
        replicas = proposed[k]
        replicas[replicas.index(source)] = target
        hosting[source].remove(k)
        hosting[target].add(k)
        load[source] -= 1
        load[target] += 1

    active = set(load)
    while len(active) > 1:
        floor, extra = divmod(sum(load[b] for b in active), len(active))
        by_load = sorted(active, key=lambda b: (-load[b], b))
        goal = {b: floor + (1 if i < extra else 0) for i, b in enumerate(by_load)}
        for source in by_load:
            if load[source] <= goal[source]:
                break
            order = sorted(hosting[source], key=lambda k: (int(source in current[k]), int(proposed[k][0] == source), k))
            for k in order:
                if load[source] <= goal[source]:
                    break
                sinks = [b for b in by_load if load[b] < goal[b] and k not in hosting[b]]
                valid = [b for b in sinks if spread.is_valid([b if x == source else x for x in proposed[k]])]
                if valid:
                    move(k, source, min(valid, key=lambda b: (int(b not in current[k]), load[b] - goal[b], b)))
        stuck = {b for b in active if load[b] > goal[b]}
        if not stuck:
            break
        active -= stuck
    while (found := _best_move(proposed, current, load, hosting, spread)) is not None:
        move(*found)


def _best_move(
    proposed: dict[PartitionKey, list[int]],
    current: Mapping[PartitionKey, Sequence[int]],
    load: dict[int, int],
    hosting: dict[int, set[PartitionKey]],
    spread: _Spread,
) -> tuple[PartitionKey, int, int] | None:
    """(partition, from, to) for the most loaded `from` and least loaded `to` that have a
    valid move; among its partitions the cheapest: a replica this plan adds anyway before
    one that exists, a follower before the preferred leader, then by partition."""
    by_load = sorted(load, key=lambda b: (load[b], b))
    for source in reversed(by_load):
        for target in by_load:
            if load[source] - load[target] < 2:
                break
            best = None
            for k in hosting[source] - hosting[target]:
                replicas = proposed[k]
                moved = [target if b == source else b for b in replicas]
                if not spread.is_valid(moved):
                    continue
                cost = (int(source in current[k]) - int(target in current[k]), int(replicas[0] == source), k)
                if best is None or cost < best:
                    best = cost
            if best is not None:
                return best[2], source, target
    return None
