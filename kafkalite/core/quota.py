"""Replication throttle for moving replicas (Kafka's ReplicationQuotaManager, KIP-73).

A reassignment can set `leader.replication.throttled.rate` and
`follower.replication.throttled.rate` (bytes/s). Only replicas being added are throttled
(Kafka's `*.replication.throttled.replicas` as its reassignment tool sets them): on the
leader, the bytes it serves to a follower that is being added; on such a follower, the
bytes it fetches for that partition. As in Kafka, a replica is throttled only while it
is out of the ISR, and ordinary replication never is, so a big move does not starve
produce traffic (acks=all waits only on ISR members).

Pure and synchronous: time comes in as `now_ms`. Each rate is a token bucket holding at
most one second of bytes; a read may overdraw it (a fetch is not split), which delays the
next one until the debt is repaid, so the long-run rate is the configured one.
"""

from __future__ import annotations

from collections.abc import Mapping

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


RATE_UNLIMITED = (1 << 63) - 1  # Kafka's default rate, Long.MAX_VALUE: no throttle


def _rates(rates: Mapping[str, int]) -> dict[str, int]:
    return {k: int(v) for k, v in rates.items() if k in (LEADER_RATE, FOLLOWER_RATE) and 0 < int(v) < RATE_UNLIMITED}


class ByteRate:
    def __init__(self, bytes_per_s: int, now_ms: int) -> None:
        assert bytes_per_s > 0
        self.bytes_per_s = bytes_per_s
        self.tokens = float(bytes_per_s)
        self.at_ms = now_ms

    def _refill(self, now_ms: int) -> None:
        if now_ms > self.at_ms:
            self.tokens = min(float(self.bytes_per_s), self.tokens + (now_ms - self.at_ms) * self.bytes_per_s / 1000)
            self.at_ms = now_ms

    def exceeded(self, now_ms: int) -> bool:
        self._refill(now_ms)
        return self.tokens <= 0

    def record(self, n: int, now_ms: int) -> None:
        self._refill(now_ms)
        self.tokens -= n


class ReplicationQuotas:
    """One broker's view: which replicas are being added per partition (from LeaderAndIsr)
    and the two rates of the reassignment that adds them."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.adding: dict[tuple[str, int], tuple[int, ...]] = {}
        self.rates: dict[str, int] = {}  # in force: the broker's own rates over the reassignment's
        self.reassignment_rates: dict[str, int] = {}
        self.broker_rates: dict[str, int] = {}
        self._buckets: dict[str, ByteRate] = {}
        self.throttled_bytes = {LEADER_RATE: 0, FOLLOWER_RATE: 0}  # bytes that counted against a rate

    def on_partition(self, tp: tuple[str, int], adding: tuple[int, ...]) -> None:
        if adding:
            self.adding[tp] = tuple(adding)
        else:
            self.adding.pop(tp, None)

    def set_rates(self, rates: Mapping[str, int], now_ms: int) -> None:
        """The rates a LeaderAndIsr with moving partitions carried (empty: unthrottled)."""
        self.reassignment_rates = _rates(rates)
        self._update(now_ms)

    def set_broker_rates(self, rates: Mapping[str, int], now_ms: int) -> None:
        """The broker's own dynamic rates (issue 16, /config/brokers): they win over a
        reassignment's; Long.MAX_VALUE (Kafka's default) means none."""
        self.broker_rates = _rates(rates)
        self._update(now_ms)

    def _update(self, now_ms: int) -> None:
        wanted = {**self.reassignment_rates, **self.broker_rates}
        if wanted == self.rates:
            return
        self.rates = wanted
        self._buckets = {k: ByteRate(v, now_ms) for k, v in wanted.items()}

    def _bucket(self, key: str, tp: tuple[str, int], replica_id: int) -> ByteRate | None:
        if replica_id not in self.adding.get(tp, ()):
            return None
        return self._buckets.get(key)

    # -- leader: bytes served to a replica being added
    def leader_throttled(self, tp: tuple[str, int], follower_id: int, in_sync: bool, now_ms: int) -> bool:
        bucket = self._bucket(LEADER_RATE, tp, follower_id)
        return bucket is not None and not in_sync and bucket.exceeded(now_ms)

    def record_leader(self, tp: tuple[str, int], follower_id: int, n: int, now_ms: int) -> None:
        bucket = self._bucket(LEADER_RATE, tp, follower_id)
        if bucket is not None and n:
            bucket.record(n, now_ms)
            self.throttled_bytes[LEADER_RATE] += n

    # -- follower: bytes this broker fetches for a partition it is being added to
    def follower_throttled(self, tp: tuple[str, int], in_sync: bool, now_ms: int) -> bool:
        bucket = self._bucket(FOLLOWER_RATE, tp, self.broker_id)
        return bucket is not None and not in_sync and bucket.exceeded(now_ms)

    def record_follower(self, tp: tuple[str, int], n: int, now_ms: int) -> None:
        bucket = self._bucket(FOLLOWER_RATE, tp, self.broker_id)
        if bucket is not None and n:
            bucket.record(n, now_ms)
            self.throttled_bytes[FOLLOWER_RATE] += n
