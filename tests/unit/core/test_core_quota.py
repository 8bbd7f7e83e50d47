"""The replication throttle (kafkalite.core.quota): only replicas being added, only out of
the ISR, and the long-run rate is the configured one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core.quota import FOLLOWER_RATE, LEADER_RATE, ReplicationQuotas

TP = ("t", 0)


def _quotas(rate: int = 1000) -> ReplicationQuotas:
    q = ReplicationQuotas(broker_id=4)
    q.on_partition(TP, (4,))
    q.set_rates({LEADER_RATE: rate, FOLLOWER_RATE: rate}, now_ms=0)
    return q


def test_only_a_replica_being_added_and_out_of_the_isr_is_throttled():
    q = _quotas()
    q.record_leader(TP, 4, 5000, 0)
    assert q.leader_throttled(TP, 4, False, 0)
    assert not q.leader_throttled(TP, 4, True, 0)  # in the ISR: never throttled (as Kafka)
    assert not q.leader_throttled(TP, 2, False, 0)  # an ordinary follower
    assert not q.leader_throttled(("t", 1), 4, False, 0)  # another partition
    q.on_partition(TP, ())  # the move ended
    assert not q.leader_throttled(TP, 4, False, 0)


def test_no_rates_means_no_throttle():
    q = ReplicationQuotas(broker_id=4)
    q.on_partition(TP, (4,))
    q.set_rates({}, now_ms=0)
    q.record_follower(TP, 10**9, 0)
    assert not q.follower_throttled(TP, False, 0)


@settings(max_examples=30, deadline=None)
@given(rate=st.integers(100, 100_000), chunk=st.integers(1, 50_000), seconds=st.integers(2, 8))
def test_the_long_run_rate_is_the_configured_one(rate, chunk, seconds):
    """Reading `chunk` bytes whenever allowed, every ms: what passes in `seconds` is at most
    rate * (seconds + 1) + one chunk (the bucket's one-second burst and one overdraw)."""
    q = _quotas(rate)
    passed = 0
    for now in range(0, seconds * 1000):
        if not q.follower_throttled(TP, False, now):
            q.record_follower(TP, chunk, now)
            passed += chunk
    assert passed <= rate * (seconds + 1) + chunk
    assert passed >= min(rate, chunk * 1000) * (seconds - 1)  # and it does not starve either
