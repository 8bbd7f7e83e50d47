"""Every controller <-> broker message survives its codec: from_wire(to_wire(m)) == m,
also through msgpack (what the RPC carries), for any content (property test)."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.core import messages as m
from kafkalite.core.controller_sends import merged

ids = st.integers(min_value=-1, max_value=2**31 - 1)
small = st.integers(min_value=0, max_value=1000)
names = st.text(min_size=1, max_size=20)
brokers = st.lists(small, max_size=5).map(tuple)
tps = st.tuples(names, small)
configs = st.dictionaries(names, st.dictionaries(names, st.text(max_size=10), max_size=3), max_size=3)

leaderships = st.builds(m.PartitionLeadership, names, small, ids, ids, brokers, ids, brokers, brokers, brokers)
lai = st.builds(m.LeaderAndIsr, ids, ids, ids, st.lists(leaderships, max_size=4).map(tuple), st.booleans(),
                st.dictionaries(small, st.tuples(names, small), max_size=3), configs,
                st.dictionaries(names, small, max_size=2), st.dictionaries(names, names, max_size=3))
endpoints = st.builds(m.BrokerEndpoint, small, names, small, small, small, st.none() | names, ids)
partition_metadata = st.builds(m.PartitionMetadata, names, small, ids, ids, brokers, brokers, brokers)
um = st.builds(m.UpdateMetadata, ids, ids, ids, st.lists(endpoints, max_size=3).map(tuple),
               st.lists(partition_metadata, max_size=4, unique_by=lambda p: (p.topic, p.partition)).map(tuple),
               st.booleans(), st.lists(names, max_size=3).map(tuple), configs, st.lists(tps, max_size=3).map(tuple))
stop = st.builds(m.StopReplica, ids, ids, ids, st.lists(tps, max_size=4).map(tuple), st.booleans())
alter_isr = st.builds(m.AlterIsrRequest, ids, ids,
                      st.lists(st.builds(m.AlterIsrProposal, names, small, ids, ids, brokers, ids), max_size=4).map(tuple))
alter_isr_response = st.builds(m.AlterIsrResponse, small, st.lists(
    st.builds(m.AlterIsrPartitionResult, names, small, small, ids, ids, brokers, ids), max_size=4).map(tuple))
shutdown = st.builds(m.ControlledShutdownRequest, ids, ids)
shutdown_response = st.builds(m.ControlledShutdownResponse, small, st.lists(tps, max_size=4).map(tuple))
preferred = st.builds(m.PreferredElectionRequest, st.none() | st.lists(tps, max_size=4).map(tuple))
preferred_response = st.builds(m.PreferredElectionResponse, small, st.lists(tps, max_size=4).map(tuple))

every_message = (lai | um | stop | alter_isr | alter_isr_response | shutdown | shutdown_response | preferred
                 | preferred_response)


@settings(max_examples=400, deadline=None)
@given(every_message)
def test_every_message_round_trips_through_its_codec_and_msgpack(message):
    wire = msgpack.unpackb(msgpack.packb(message.to_wire()), strict_map_key=False)
    assert type(message).from_wire(wire) == message


@settings(max_examples=200, deadline=None)
@given(lai, lai)
def test_merged_leader_and_isr_holds_the_latest_state_of_every_partition(a, b):
    b = m.LeaderAndIsr(a.controller_id, a.controller_epoch, a.broker_epoch, b.partitions, False, b.live_leaders, b.topic_configs)
    a = m.LeaderAndIsr(a.controller_id, a.controller_epoch, a.broker_epoch, a.partitions, False, a.live_leaders, a.topic_configs)
    both = merged(a, b)
    assert isinstance(both, m.LeaderAndIsr)
    latest = {p.topic_partition: p for p in a.partitions + b.partitions}
    assert {p.topic_partition: p for p in both.partitions} == latest


def test_merged_leader_and_isr_keeps_the_throttle_of_the_latest_request_that_adds_replicas():
    """Review: the merge kept the second request's throttle, so a move's LeaderAndIsr merged
    with a later one about another partition (no replicas added: no throttle) reached the
    broker unthrottled, and the broker set empty rates from it."""
    rates, newer = {"leader.replication.throttled.rate": 1000}, {"leader.replication.throttled.rate": 5}
    moving = m.LeaderAndIsr(1, 2, 10, (m.PartitionLeadership("t", 0, 1, 1, (1, 2), 1, (1, 2, 4), (4,), (1,)),), throttle=rates)
    other = m.LeaderAndIsr(1, 2, 10, (m.PartitionLeadership("u", 0, 4, 3, (4,), 3, (4,)),))
    assert merged(moving, other).throttle == rates
    assert merged(other, moving).throttle == rates
    again = m.LeaderAndIsr(1, 2, 10, (m.PartitionLeadership("t", 1, 2, 1, (2,), 1, (2, 4), (4,), ()),), throttle=newer)
    assert merged(moving, again).throttle == newer
    unthrottled = m.LeaderAndIsr(1, 2, 10, again.partitions)  # the throttle was cleared since
    assert merged(moving, unthrottled).throttle == {}


def test_leader_and_isr_topic_ids_are_optional_on_the_wire_and_merge():
    """KIP-516: a request carries the ids of its topics that have one; one from a
    controller before topic ids (no "topic_ids" key) decodes with none."""
    p = m.PartitionLeadership("t", 0, 1, 1, (1,), 1, (1,))
    without = m.LeaderAndIsr(1, 2, 10, (p,))
    assert "topic_ids" not in without.to_wire()
    old_wire = {k: v for k, v in m.LeaderAndIsr(1, 2, 10, (p,), topic_ids={"t": "x"}).to_wire().items() if k != "topic_ids"}
    assert m.LeaderAndIsr.from_wire(old_wire) == without
    with_id = m.LeaderAndIsr(1, 2, 10, (p,), topic_ids={"t": "Fo2k4ddTRzq0Tpo4OwCIlw"})
    wire = msgpack.unpackb(msgpack.packb(with_id.to_wire()), strict_map_key=False)
    assert m.LeaderAndIsr.from_wire(wire).topic_ids == {"t": "Fo2k4ddTRzq0Tpo4OwCIlw"}
    other = m.LeaderAndIsr(1, 2, 10, (m.PartitionLeadership("u", 0, 1, 1, (1,), 1, (1,)),), topic_ids={"u": "AAAAAAAAAAAAAAAAAAAAAA"})
    assert merged(with_id, other).topic_ids == {"t": "Fo2k4ddTRzq0Tpo4OwCIlw", "u": "AAAAAAAAAAAAAAAAAAAAAA"}
    assert merged(with_id, without).topic_ids == {"t": "Fo2k4ddTRzq0Tpo4OwCIlw"}


def test_requests_for_different_registrations_or_init_never_merge():
    a = m.LeaderAndIsr(1, 2, 10, ())
    assert merged(a, m.LeaderAndIsr(1, 2, 11, ())) is None
    assert merged(a, m.LeaderAndIsr(1, 2, 10, (), init=True)) is None
    assert merged(a, m.StopReplica(1, 2, 10, (), True)) is None
    full = m.UpdateMetadata(1, 2, 10, (), full=True)
    assert merged(m.UpdateMetadata(1, 2, 10, ()), full) is None


def test_send_queue_one_in_flight_merged_resent_with_backoff_and_dropped_whole():
    from kafkalite.core.controller_sends import SEND_BACKOFF_MAX_MS, SendQueue

    q = SendQueue(2, 10)
    part = m.PartitionLeadership("t", 0, 2, 1, (2, 3), 1, (2, 3))
    q.push(m.LeaderAndIsr(1, 2, 10, (part,)), "a")
    q.push(m.LeaderAndIsr(1, 2, 10, (m.PartitionLeadership("t", 0, 3, 2, (3,), 2, (2, 3)),)), "b")
    q.push(m.LeaderAndIsr(1, 2, 10, (), init=True), "c")
    first = q.next()
    assert isinstance(first, m.LeaderAndIsr) and first.partitions[0].leader_epoch == 2  # a and b, merged: b's state wins
    assert q.next() is None  # one in flight
    assert [q.failed() for _ in range(12)][-1] == SEND_BACKOFF_MAX_MS
    assert q.answered() == ["a", "b"]
    assert q.next().init and q.in_flight_tokens == ["c"]
    q.push(m.UpdateMetadata(1, 2, 10, ()), "d")
    assert q.drop() == ["c", "d"] and not q
