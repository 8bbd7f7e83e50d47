"""Who serves a consumer's fetch and how far it reads (kafkalite.core.consumer_fetch,
KIP-392 with KIP-320 fencing), and the consumer's OffsetsForLeaderEpoch (KIP-320/392), on
the pure core with a fake clock and an in-memory log."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_core_replica_manager import TP, MemLog, lai, manager

from kafkalite.core.codes import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from kafkalite.core.consumer_fetch import (
    ClusterView,
    ConsumerFetch,
    ConsumerRead,
    ReadSource,
    decide_consumer_read,
    partition_view,
)
from kafkalite.core.replica_manager import UnknownTopicOrPartitionError
from kafkalite.core.replica_selector import ClientMetadata, PartitionView, RackAwareReplicaSelector, ReplicaView
from kafkalite.core.replica_state import LeaderAndIsrState, PartitionReplicaState

RACKS = {1: "a", 2: "b", 3: "c"}
EPOCH = 5


def rack(r: str) -> ClientMetadata:
    return ClientMetadata(rack_id=r, client_id="test", client_address="127.0.0.1")


def leader_state(isr=(1, 2, 3), leo: int = 100, follower_leos: dict[int, int] | None = None, now_ms: int = 1000,
                 follower_log_starts: dict[int, int] | None = None) -> PartitionReplicaState:
    """Broker 1 leads at EPOCH with `leo`; followers have fetched at their given LEOs (and
    log starts, 0 unless given)."""
    state = PartitionReplicaState(*TP, 1)
    state.become_leader(LeaderAndIsrState(1, EPOCH, tuple(isr), 0, (1, 2, 3)), leo, 0, now_ms, 0)
    for replica_id, follower_leo in (follower_leos or {2: leo, 3: leo}).items():
        state.update_follower_fetch(replica_id, follower_leo, leo, now_ms,
                                    follower_log_start=(follower_log_starts or {}).get(replica_id, 0))
    return state


def follower_state(broker_id: int = 2, isr=(1, 2, 3), hw: int = 80, leo: int = 100) -> PartitionReplicaState:
    state = PartitionReplicaState(*TP, broker_id)
    state.become_follower(LeaderAndIsrState(1, EPOCH, tuple(isr), 0, (1, 2, 3)), 0)
    state.follower_update_hw(hw, leo)
    return state


def decide(state: PartitionReplicaState, fetch: ConsumerFetch, *, hw: int, leo: int, log_start: int = 0,
           cluster: ClusterView | None = None, selector=None, now_ms: int = 2000) -> ConsumerRead:
    return decide_consumer_read(TP, state, log_start_offset=log_start, hw=hw, leo=leo, fetch=fetch,
                                cluster=cluster or ClusterView(RACKS, True), selector=selector, now_ms=now_ms)


# ----------------------------------------------------------------- the leader


def test_the_leader_names_the_in_rack_follower_and_reads_nothing():
    state = leader_state()
    read = decide(state, ConsumerFetch(40, EPOCH, rack("b")), hw=100, leo=100, selector=RackAwareReplicaSelector())
    assert read == ConsumerRead(ReadSource.REDIRECT, 100, 2)


def test_a_follower_whose_log_starts_above_the_fetch_offset_is_not_named():
    """Kafka's findPreferredReadReplica: the follower must hold the offset, from its log
    start to its log end. Its own retention deleted offsets below 60 (ours keeps them): a
    consumer from the earliest offset named there got OFFSET_OUT_OF_RANGE, reset to the
    earliest offset and was named there again. Nor is a follower whose log start is not
    known yet."""
    state = leader_state(follower_log_starts={2: 60})
    selector = RackAwareReplicaSelector()
    assert decide(state, ConsumerFetch(0, EPOCH, rack("b")), hw=100, leo=100, selector=selector).preferred_read_replica == -1
    assert decide(state, ConsumerFetch(60, EPOCH, rack("b")), hw=100, leo=100, selector=selector).preferred_read_replica == 2
    unknown = PartitionReplicaState(*TP, 1)
    unknown.become_leader(LeaderAndIsrState(1, EPOCH, (1, 2, 3), 0, (1, 2, 3)), 100, 0, 1000, 0)
    unknown.update_follower_fetch(2, 100, 100, 1000)  # (an older broker: no log start in its fetch)
    assert decide(unknown, ConsumerFetch(40, EPOCH, rack("b")), hw=100, leo=100, selector=selector).preferred_read_replica == -1


def test_the_leader_serves_clients_in_its_rack_without_a_rack_or_before_fetch_v11():
    state = leader_state()
    for client in (rack("a"), rack(""), rack("z"), None):
        read = decide(state, ConsumerFetch(40, EPOCH, client), hw=100, leo=100, selector=RackAwareReplicaSelector())
        assert read == ConsumerRead(ReadSource.LEADER, 100)


@pytest.mark.parametrize("why, state, racks", [
    ("lagging: its LEO is below the fetch offset", leader_state(follower_leos={2: 30, 3: 100}), RACKS),
    ("out of the ISR", leader_state(isr=(1, 3)), RACKS),
    ("not alive in the metadata cache", leader_state(), {1: "a", 3: "c"}),
])
def test_the_leader_never_names_a_follower_that_cannot_serve_the_offset(why, state, racks):
    read = decide(state, ConsumerFetch(40, EPOCH, rack("b")), hw=100, leo=100, cluster=ClusterView(racks, True),
                  selector=RackAwareReplicaSelector())
    assert read.source is ReadSource.LEADER, why


def test_the_view_holds_the_leader_and_the_live_in_sync_followers_with_their_lag():
    state = leader_state(follower_leos={2: 60, 3: 100}, now_ms=1000)
    view = partition_view(state, leader_leo=100, fetch_offset=50, racks=RACKS, now_ms=4000)
    assert view.leader == ReplicaView(1, "a", 100, 0)
    assert [(r.broker_id, r.log_end_offset) for r in view.replicas] == [(1, 100), (2, 60), (3, 100)]
    assert view.replicas[1].time_since_last_caught_up_ms == 3000  # 2 last caught up at its fetch at 1000 ms


class ForeignSelector:
    """A plug-in that names a broker the leader did not offer."""

    def select(self, topic_partition, client_metadata, partition_view: PartitionView):
        return ReplicaView(9, "b", 100, 0)


def test_a_plug_in_naming_a_replica_outside_the_view_is_ignored():
    read = decide(leader_state(), ConsumerFetch(40, EPOCH, rack("b")), hw=100, leo=100, selector=ForeignSelector())
    assert read.source is ReadSource.LEADER


def test_the_leader_fences_epochs_and_out_of_range_offsets():
    state = leader_state()
    with pytest.raises(FencedLeaderEpochError):
        decide(state, ConsumerFetch(40, EPOCH - 1), hw=100, leo=100)
    with pytest.raises(UnknownLeaderEpochError):
        decide(state, ConsumerFetch(40, EPOCH + 1), hw=100, leo=100)
    with pytest.raises(OffsetOutOfRangeError):
        decide(state, ConsumerFetch(101, EPOCH), hw=100, leo=100)
    with pytest.raises(OffsetOutOfRangeError):
        decide(state, ConsumerFetch(9, EPOCH), hw=100, leo=100, log_start=10)
    assert decide(state, ConsumerFetch(100, -1), hw=90, leo=100).upper == 90  # no epoch sent: no fencing


# --------------------------------------------------------------- a follower


def test_a_follower_serves_fetch_v11_below_its_hw():
    read = decide(follower_state(hw=80, leo=100), ConsumerFetch(50, EPOCH, rack("b")), hw=80, leo=100)
    assert read == ConsumerRead(ReadSource.FOLLOWER, 80)


def test_a_follower_ahead_of_its_hw_but_within_its_log_reads_nothing_yet():
    """Kafka's behaviour: the read stops at the HW (the delayed fetch waits for it). A
    consumer at the tail sent here by the leader is briefly ahead of this follower's HW."""
    read = decide(follower_state(hw=80, leo=100), ConsumerFetch(95, EPOCH, rack("b")), hw=80, leo=100)
    assert read == ConsumerRead(ReadSource.FOLLOWER, 80)


def test_a_follower_without_the_offset_answers_offset_not_available():
    with pytest.raises(OffsetNotAvailableError):
        decide(follower_state(hw=80, leo=100), ConsumerFetch(101, EPOCH, rack("b")), hw=80, leo=100)


def test_a_follower_refuses_fetches_before_v11_and_when_out_of_the_isr():
    state = follower_state()
    with pytest.raises(NotLeaderOrFollowerError):
        decide(state, ConsumerFetch(50, EPOCH, None), hw=80, leo=100)
    shrunk = ClusterView(RACKS, True, isr=(1, 3), isr_leader_epoch=EPOCH)  # UpdateMetadata after an AlterIsr
    with pytest.raises(NotLeaderOrFollowerError):
        decide(state, ConsumerFetch(50, EPOCH, rack("b")), hw=80, leo=100, cluster=shrunk)
    stale = ClusterView(RACKS, True, isr=(1, 3), isr_leader_epoch=EPOCH - 1)  # older than our LeaderAndIsr
    assert decide(state, ConsumerFetch(50, EPOCH, rack("b")), hw=80, leo=100, cluster=stale).source is ReadSource.FOLLOWER
    rejoined = ClusterView(RACKS, True, isr=(1, 2, 3), isr_leader_epoch=EPOCH)
    left = follower_state(isr=(1, 3))
    assert decide(left, ConsumerFetch(50, EPOCH, rack("b")), hw=80, leo=100, cluster=rejoined).source is ReadSource.FOLLOWER


def test_a_follower_fences_epochs_like_a_leader_and_a_replica_without_a_role_refuses():
    state = follower_state()
    with pytest.raises(FencedLeaderEpochError):
        decide(state, ConsumerFetch(50, EPOCH - 1, rack("b")), hw=80, leo=100)
    with pytest.raises(UnknownLeaderEpochError):
        decide(state, ConsumerFetch(50, EPOCH + 1, rack("b")), hw=80, leo=100)
    with pytest.raises(NotLeaderOrFollowerError):
        decide(PartitionReplicaState(*TP, 2), ConsumerFetch(0, -1, rack("b")), hw=0, leo=0)


@given(hw=st.integers(0, 60), extra=st.integers(0, 40), log_start=st.integers(0, 60), offset=st.integers(0, 120),
       request_epoch=st.integers(-1, 8), in_isr=st.booleans(), v11=st.booleans())
def test_a_follower_never_serves_at_or_above_its_hw_and_each_refusal_has_its_reason(hw, extra, log_start, offset,
                                                                                     request_epoch, in_isr, v11):
    log_start = min(log_start, hw)
    leo = hw + extra
    state = follower_state(isr=(1, 2, 3) if in_isr else (1, 3), hw=hw, leo=leo)
    fetch = ConsumerFetch(offset, request_epoch, rack("b") if v11 else None)
    try:
        read = decide(state, fetch, hw=hw, leo=leo, log_start=log_start)
    except (FencedLeaderEpochError, UnknownLeaderEpochError):
        assert request_epoch >= 0 and request_epoch != EPOCH
    except OffsetOutOfRangeError:
        assert offset < log_start
    except NotLeaderOrFollowerError:
        assert not v11 or not in_isr
    except OffsetNotAvailableError:
        assert offset > leo
    else:
        assert read.source is ReadSource.FOLLOWER and read.upper == hw
        assert v11 and in_isr and log_start <= offset <= leo


# ------------------------------------------------- the core replica manager


def test_a_partition_not_here_is_not_leader_when_the_cluster_has_it():
    rm, _ = manager()
    with pytest.raises(NotLeaderOrFollowerError):
        rm.consumer_fetch(TP, ConsumerFetch(0), ClusterView({}, True), 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        rm.consumer_fetch(TP, ConsumerFetch(0), ClusterView({}, False), 0)


def test_the_replica_manager_redirects_with_its_configured_selector():
    rm, logs = manager()
    rm.replica_selector = RackAwareReplicaSelector()
    rm.on_leader_and_isr(lai(1, 1), 0)
    logs[TP].append(1, 10)
    for follower in (2, 3):
        rm.follower_fetch(TP, follower, 10, 1, 1, 5, follower_log_start=0)
    replica, read = rm.consumer_fetch(TP, ConsumerFetch(4, 1, rack("c")), ClusterView(RACKS, True), 10)
    assert (replica.hw, read) == (10, ConsumerRead(ReadSource.REDIRECT, 10, 3))


def test_offsets_for_leader_epoch_limits_consumers_to_the_hw():
    rm, logs = manager()
    logs[TP] = MemLog()
    logs[TP].append(0, 5)  # offsets 0..4 at epoch 0
    rm.on_leader_and_isr(lai(1, 1, isr=(1, 2)), 0)
    logs[TP].append(1, 5)  # 5..9 at epoch 1
    rm.replicas[TP].leader_appended()
    rm.follower_fetch(TP, 2, 7, 1, 1, 10)  # 2 holds 0..6: HW 7 >= the epoch's start (5), the true HW is known
    assert rm.offsets_for_leader_epoch(TP, 1, 1).end_offset == 10  # a follower: the LEO
    assert rm.offsets_for_leader_epoch(TP, 1, 1, for_consumer=True).end_offset == 7  # a consumer: the HW
    assert rm.offsets_for_leader_epoch(TP, 1, 0, for_consumer=True).end_offset == 5  # an older epoch ends below it


def test_a_new_leader_that_does_not_know_the_true_hw_answers_offset_not_available():
    rm, logs = manager()
    logs[TP] = MemLog()
    logs[TP].append(0, 5)
    rm.on_leader_and_isr(lai(1, 1, isr=(1, 2)), 0)  # epoch 1 starts at 5; HW known so far: 0
    rm.follower_fetch(TP, 2, 3, 1, 0, 10)  # 2 is at 3: HW 3 < 5
    with pytest.raises(OffsetNotAvailableError):
        rm.offsets_for_leader_epoch(TP, 1, 1, for_consumer=True)
    with pytest.raises(OffsetNotAvailableError):
        rm.offsets_for_leader_epoch(TP, 1, 0, for_consumer=True)  # epoch 0 ends at 5, above the HW too
    assert rm.offsets_for_leader_epoch(TP, 1, 1).end_offset == 5  # followers are answered as before
    rm.follower_fetch(TP, 2, 5, 1, 0, 20)  # HW reaches the epoch's start
    assert rm.offsets_for_leader_epoch(TP, 1, 1, for_consumer=True).end_offset == 5
    rm.on_leader_and_isr(lai(2, 2, isr=(1, 2), version=1), 0)
    with pytest.raises(NotLeaderOrFollowerError):
        rm.offsets_for_leader_epoch(TP, 2, 2, for_consumer=True)  # only leaders answer
