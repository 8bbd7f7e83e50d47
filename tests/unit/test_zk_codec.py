"""Znode codecs: every value round-trips, and garbage is a ZnodeDecodeError naming the path."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.zk import codec
from kafkalite.zk.codec import (
    BrokerRegistration,
    ControllerEpoch,
    ControllerInfo,
    PartitionState,
    PreferredReplicaElection,
    ProducerIdBlock,
    Reassignment,
    ReplicaList,
    TopicAssignment,
)
from kafkalite.zk.errors import ZnodeDecodeError

ROUND_TRIPS = [
    (
        BrokerRegistration(id=3, host="127.0.0.1", port=9094, inter_broker_port=9194, admin_port=9294, rack="r1"),
        codec.encode_broker_registration,
        codec.decode_broker_registration,
        "/brokers/ids/3",
    ),
    (
        BrokerRegistration(id=1, host="h", port=1, inter_broker_port=2, admin_port=3, rack=None),
        codec.encode_broker_registration,
        codec.decode_broker_registration,
        "/brokers/ids/1",
    ),
    (  # its process came back from a crash: written only then
        BrokerRegistration(id=2, host="h", port=1, inter_broker_port=2, admin_port=3, rack=None, unclean_start=True),
        codec.encode_broker_registration,
        codec.decode_broker_registration,
        "/brokers/ids/2",
    ),
    (
        TopicAssignment(partitions={0: [1, 2, 3], 1: [2, 3, 1], 10: [3]}, config={"retention.ms": "1000"}),
        codec.encode_topic_assignment,
        codec.decode_topic_assignment,
        "/brokers/topics/t",
    ),
    (
        PartitionState(leader=2, leader_epoch=7, isr=[2, 1], controller_epoch=4),
        codec.encode_partition_state,
        codec.decode_partition_state,
        "/brokers/topics/t/partitions/0/state",
    ),
    (
        PartitionState(leader=-1, leader_epoch=8, isr=[2], controller_epoch=5),
        codec.encode_partition_state,
        codec.decode_partition_state,
        "/brokers/topics/t/partitions/0/state",
    ),
    (ControllerInfo(broker_id=2, timestamp=1_700_000_000_000), codec.encode_controller_info, codec.decode_controller_info, "/controller"),
    (ControllerEpoch(epoch=12), codec.encode_controller_epoch, codec.decode_controller_epoch, "/controller_epoch"),
    (
        ProducerIdBlock(broker_id=1, block_start=1000, block_end=1999),
        codec.encode_producer_id_block,
        codec.decode_producer_id_block,
        "/latest_producer_id_block",
    ),
    (
        TopicAssignment(partitions={0: [2, 3, 4, 1], 1: [1, 2, 3]}, config={},
                        adding_replicas={0: [4]}, removing_replicas={0: [1]}),
        codec.encode_topic_assignment,
        codec.decode_topic_assignment,
        "/brokers/topics/t",
    ),
    (
        Reassignment(partitions={("a", 0): (2, 3, 4), ("b", 7): (1,)}, throttle=codec.reassignment_throttle(1_000_000)),
        codec.encode_reassignment,
        codec.decode_reassignment,
        "/admin/reassign_partitions",
    ),
    (Reassignment(partitions={("a", 0): (5,)}), codec.encode_reassignment, codec.decode_reassignment, "/admin/reassign_partitions"),
    (ReplicaList(replicas=[4, 5, 6]), codec.encode_replica_list, codec.decode_replica_list, "/admin/partitions_reassigned/t/0"),
    (
        PreferredReplicaElection(partitions=[("a", 0), ("b", 3)]),
        codec.encode_preferred_replica_election,
        codec.decode_preferred_replica_election,
        "/admin/preferred_replica_election",
    ),
]


@pytest.mark.parametrize("value, encode, decode, path", ROUND_TRIPS)
def test_value_round_trips_through_utf8_json(value, encode, decode, path):
    data = encode(value)
    assert isinstance(json.loads(data.decode("utf-8")), dict)
    assert decode(data, path) == value


def test_wire_layouts_match_the_design_table():
    assert json.loads(codec.encode_controller_info(ControllerInfo(1, 5))) == {"brokerid": 1, "timestamp": 5}
    assert json.loads(codec.encode_topic_assignment(TopicAssignment({0: [1, 2]}, {}))) == {
        "partitions": {"0": [1, 2]},
        "config": {},
    }
    assert json.loads(codec.encode_producer_id_block(ProducerIdBlock(1, 0, 999))) == {
        "version": 1,
        "broker": 1,
        "block_start": 0,
        "block_end": 999,
    }
    assert set(json.loads(codec.encode_broker_registration(ROUND_TRIPS[0][0]))) == {
        "host",
        "port",
        "inter_broker_port",
        "admin_port",
        "rack",
    }


def test_unknown_fields_are_ignored_for_forward_compatibility():
    data = b'{"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1,"future":true}'
    assert codec.decode_partition_state(data, "/p").leader == 1


GARBAGE = [
    (codec.decode_partition_state, None),
    (codec.decode_partition_state, b""),
    (codec.decode_partition_state, b"\xff\xfe"),
    (codec.decode_partition_state, b"not json"),
    (codec.decode_partition_state, b"[1,2]"),
    (codec.decode_partition_state, b'{"leader":1,"leader_epoch":0,"isr":[1]}'),
    (codec.decode_partition_state, b'{"leader":true,"leader_epoch":0,"isr":[1],"controller_epoch":1}'),
    (codec.decode_partition_state, b'{"leader":-2,"leader_epoch":0,"isr":[1],"controller_epoch":1}'),
    (codec.decode_partition_state, b'{"leader":1,"leader_epoch":0,"isr":[1,1],"controller_epoch":1}'),
    (codec.decode_partition_state, b'{"leader":1,"leader_epoch":0,"isr":"1","controller_epoch":1}'),
    (codec.decode_topic_assignment, b'{"partitions":{"x":[1]}}'),
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1,"2"]}}'),
    (codec.decode_topic_assignment, b'{"partitions":[[1]]}'),
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1]},"config":{"a":1}}'),
    (codec.decode_controller_info, b'{"brokerid":"1","timestamp":1}'),
    (codec.decode_controller_epoch, b'{"epoch":1.5}'),
    (codec.decode_producer_id_block, b'{"version":2,"broker":1,"block_start":0,"block_end":9}'),
    (codec.decode_producer_id_block, b'{"version":1,"broker":1,"block_start":10,"block_end":9}'),
    (codec.decode_broker_registration, b'{"host":"h","port":1,"inter_broker_port":2,"admin_port":3,"rack":7}'),
    (codec.decode_broker_registration, b'{"port":1,"inter_broker_port":2,"admin_port":3}'),
    (codec.decode_preferred_replica_election, b'{"partitions":[["t"]]}'),
    (codec.decode_replica_list, b'{"replicas":null}'),
    # KIP-455 moving replicas: partition numbers, subsets of the replicas, disjoint
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1,2]},"adding_replicas":{"x":[2]}}'),
    (codec.decode_topic_assignment, '{"partitions":{"²":[1,2]}}'.encode()),  # isdigit() but not int(): was ValueError
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1,2]},"adding_replicas":{"1":[2]}}'),
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1,2]},"adding_replicas":{"0":[3]}}'),
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1,2]},"adding_replicas":[[2]]}'),
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1,2]},"removing_replicas":{"0":[1,2]}}'),
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1,2,3]},"adding_replicas":{"0":[3]},"removing_replicas":{"0":[3]}}'),
    (codec.decode_topic_assignment, b'{"partitions":{"0":[1,2]},"removing_replicas":{"0":[true]}}'),
    # /admin/reassign_partitions
    (codec.decode_reassignment, b'{"partitions":[]}'),
    (codec.decode_reassignment, b'{"version":2,"partitions":[]}'),
    (codec.decode_reassignment, b'{"version":1}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":{"t":[1]}}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[["t",0,[1]]]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"t","partition":0}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"t","replicas":[1]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":5,"partition":0,"replicas":[1]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"a/b","partition":0,"replicas":[1]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[-1]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
                                b'{"topic":"t","partition":0,"replicas":[2]}]}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[],"throttle":5}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[],"throttle":{"leader.replication.throttled.rate":0}}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[],"throttle":{"leader.replication.throttled.rate":"5"}}'),
    (codec.decode_reassignment, b'{"version":1,"partitions":[],"throttle":{"replication.throttled.rate":5}}'),
]


@pytest.mark.parametrize("decode, data", GARBAGE)
def test_garbage_raises_a_decode_error_naming_the_path(decode, data):
    path = "/brokers/ids/9"
    with pytest.raises(ZnodeDecodeError) as info:
        decode(data, path)
    assert info.value.path == path
    assert path in str(info.value)


def test_broker_registration_whose_znode_name_is_not_an_id_is_rejected():
    data = codec.encode_broker_registration(ROUND_TRIPS[0][0])
    for name in ("abc", "²"):  # "²": isdigit() but not int(), which raised ValueError
        with pytest.raises(ZnodeDecodeError, match=f"/brokers/ids/{name}"):
            codec.decode_broker_registration(data, f"/brokers/ids/{name}")


def test_znode_children_that_are_not_ascii_numbers_are_skipped():
    """ZooKeeper lists a /brokers/ids/², /log_dir_failures/² or /admin/partitions_add/t/²
    written by hand: isdigit() let it through to int(), whose ValueError broke the reader."""
    from types import SimpleNamespace

    from kafkalite.zk.client import ZkAdapter

    registration = ROUND_TRIPS[0][0]
    zk = object.__new__(ZkAdapter)
    children = {"/brokers/ids": [str(registration.id), "²"], "/log_dir_failures": ["²"],
                "/admin/partitions_add": ["t"], "/admin/partitions_add/t": ["²", "0"]}
    zk.get_children = lambda path: children.get(path)
    zk.get = lambda path: (codec.encode_replica_list(codec.ReplicaList([1])) if path.endswith("/0") else b'{"broker_epoch":1,"partitions":[]}',
                           SimpleNamespace(czxid=5))
    zk.get_many = lambda paths: {p: (codec.encode_broker_registration(registration), SimpleNamespace(czxid=5)) for p in paths}
    assert list(zk.get_brokers()) == [registration.id]
    assert zk.get_log_dir_failures() == {}
    assert zk.get_partition_admin_requests("add") == {("t", 0): [1]}


def test_topic_assignment_at_rest_keeps_its_layout_and_moving_partitions_add_kip455_maps():
    at_rest = TopicAssignment({0: [1, 2, 3]}, {}, adding_replicas={0: []}, removing_replicas={})
    assert json.loads(codec.encode_topic_assignment(at_rest)) == {"partitions": {"0": [1, 2, 3]}, "config": {}}
    moving = TopicAssignment({0: [2, 3, 4, 1], 1: [1, 2, 3]}, {}, adding_replicas={0: [4]}, removing_replicas={0: [1]})
    assert json.loads(codec.encode_topic_assignment(moving)) == {
        "partitions": {"0": [2, 3, 4, 1], "1": [1, 2, 3]},
        "config": {},
        "adding_replicas": {"0": [4]},
        "removing_replicas": {"0": [1]},
    }


def test_topic_assignment_without_moving_maps_decodes_as_at_rest():
    value = codec.decode_topic_assignment(b'{"partitions":{"0":[1,2]},"config":{}}', "/brokers/topics/t")
    assert value.adding_replicas == {} and value.removing_replicas == {}
    assert not value.is_moving(0)
    assert value.original_replicas(0) == value.target_replicas(0) == [1, 2]
    # empty lists mean "nothing moves" and are dropped
    value = codec.decode_topic_assignment(b'{"partitions":{"0":[1,2]},"adding_replicas":{"0":[]}}', "/brokers/topics/t")
    assert value.adding_replicas == {}


def test_topic_id_round_trips_and_a_topic_created_before_ids_has_none():
    """KIP-516: "topic_id" is written when the topic has one and is optional when read."""
    topic_id = codec.new_topic_id()
    assert len(topic_id) == 22 and not topic_id.startswith("-") and "=" not in topic_id
    with_id = TopicAssignment({0: [1, 2]}, {"retention.ms": "5"}, adding_replicas={0: [2]}, topic_id=topic_id)
    data = codec.encode_topic_assignment(with_id)
    assert json.loads(data)["topic_id"] == topic_id
    assert codec.decode_topic_assignment(data, "/brokers/topics/t") == with_id
    without = TopicAssignment({0: [1, 2]}, {})
    assert "topic_id" not in json.loads(codec.encode_topic_assignment(without))
    assert codec.decode_topic_assignment(codec.encode_topic_assignment(without), "/brokers/topics/t").topic_id is None
    # Kafka's own znode layout (version 2 with "topic_id") reads too
    kafka = b'{"version":2,"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{},"topic_id":"Fo2k4ddTRzq0Tpo4OwCIlw"}'
    assert codec.decode_topic_assignment(kafka, "/brokers/topics/t").topic_id == "Fo2k4ddTRzq0Tpo4OwCIlw"
    assert codec.new_topic_id() != codec.new_topic_id()


@pytest.mark.parametrize("bad", [b'1', b'"short"', b'"Fo2k4ddTRzq0Tpo4OwCIl="', rb'"Fo2k4ddTRzq0Tpo4OwCIl\u00e9"'])
def test_a_topic_id_that_is_not_a_uuid_is_a_decode_error(bad):
    with pytest.raises(ZnodeDecodeError, match="topic_id"):
        codec.decode_topic_assignment(b'{"partitions":{"0":[1]},"topic_id":' + bad + b"}", "/brokers/topics/t")


def test_moving_partition_original_and_target_replicas():
    moving = TopicAssignment({0: [2, 3, 4, 1]}, {}, adding_replicas={0: [4]}, removing_replicas={0: [1]})
    assert moving.is_moving(0)
    assert moving.original_replicas(0) == [2, 3, 1]
    assert moving.target_replicas(0) == [2, 3, 4]


def test_reassignment_wire_layout_is_kafkas():
    value = Reassignment({("t", 0): (2, 3, 4)}, throttle=codec.reassignment_throttle(500))
    assert json.loads(codec.encode_reassignment(value)) == {
        "version": 1,
        "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}],
        "throttle": {"leader.replication.throttled.rate": 500, "follower.replication.throttled.rate": 500},
    }
    assert "throttle" not in json.loads(codec.encode_reassignment(Reassignment({("t", 0): (1,)})))


def test_reassignment_plan_from_kafkas_tool_with_log_dirs_decodes():
    data = (b'{"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[1,2],"log_dirs":["any","any"]},'
            b'{"topic":"bar","partition":0,"replicas":[3]}]}')
    value = codec.decode_reassignment(data, "plan.json")
    assert value.partitions == {("bar", 0): (3,), ("foo", 1): (1, 2)}
    assert value.throttle == {}


@given(st.integers(-1, 2**31 - 1), st.integers(0, 2**31 - 1), st.lists(st.integers(0, 2**31 - 1), max_size=6, unique=True), st.integers(0, 2**31 - 1))
def test_partition_state_bytes_are_compact_json_from_either_state_type(leader, leader_epoch, isr, controller_epoch):
    """encode_partition_state formats the JSON itself (the controller writes tens of
    thousands in a take-over): the same bytes json.dumps gives, read back equal, and the
    controller core's own PartitionState encodes the same."""
    from kafkalite.core.controller import PartitionState as CoreState

    state = PartitionState(leader, leader_epoch, isr, controller_epoch)
    data = codec.encode_partition_state(state)
    assert data == json.dumps({"leader": leader, "leader_epoch": leader_epoch, "isr": isr, "controller_epoch": controller_epoch},
                              separators=(",", ":")).encode()
    assert codec.decode_partition_state(data, "/brokers/topics/t/partitions/0/state") == state
    assert codec.encode_partition_state(CoreState(leader, leader_epoch, tuple(isr), 3, controller_epoch)) == data


_state_value = st.one_of(st.integers(-2, 3), st.integers(-2, 3), st.integers(0, 2**31), st.just("1"))


@given(st.fixed_dictionaries({"leader": _state_value, "leader_epoch": _state_value, "controller_epoch": _state_value,
                              "isr": st.lists(_state_value, max_size=4)}),
       st.sampled_from(["own", "own", "own", "kafka", "spaced", "missing epoch", "trailing"]))
def test_the_take_over_state_decoder_agrees_with_the_general_one(fields, layout):
    """decode_partition_state_tuple matches exactly the bytes the controller writes and
    hands everything else to decode_partition_state: for any input both give the same
    state, or both refuse it (negative values, duplicate ISR members, strings, Kafka's
    layout with "version", other spacing, trailing bytes)."""
    order = ("leader", "leader_epoch", "isr", "controller_epoch")  # the controller's own
    fields = {k: fields[k] for k in order}
    if layout == "kafka":
        fields = {"controller_epoch": fields["controller_epoch"], "version": 1, **fields}
    elif layout == "missing epoch":
        del fields["leader_epoch"]
    data = json.dumps(fields, separators=(", ", ": ") if layout == "spaced" else (",", ":")).encode()
    _same_verdict(data + (b"0" if layout == "trailing" else b""))


@pytest.mark.parametrize("data", [
    b'{"leader":01,"leader_epoch":2,"isr":[1],"controller_epoch":4}',
    b'{"leader":1,"leader_epoch":2,"isr":[01],"controller_epoch":4}',
    b'{"leader":1,"leader_epoch":02,"isr":[1],"controller_epoch":4}',
    b'{"leader":1,"leader_epoch":2,"isr":[1],"controller_epoch":00}',
    b'{"leader":1,"leader_epoch":2,"isr":[1,],"controller_epoch":4}',
    b'{"leader":1,"leader_epoch":-0,"isr":[1],"controller_epoch":4}',
    b'{"leader":-2,"leader_epoch":2,"isr":[1],"controller_epoch":4}',
    b'{"leader":1,"leader_epoch":2,"isr":[2,1,2],"controller_epoch":4}',
    b'{"leader":1,"leader_epoch":2,"isr":[],"controller_epoch":4}\n',
    b'{"leader":1,"leader_epoch":2,"isr":[\xd9\xa1],"controller_epoch":4}',
])
def test_the_take_over_state_decoder_refuses_or_agrees_on_near_misses(data):
    _same_verdict(data)


def _same_verdict(data: bytes) -> None:
    path = "/brokers/topics/t/partitions/0/state"
    try:
        general = codec.decode_partition_state(data, path)
    except ZnodeDecodeError:
        with pytest.raises(ZnodeDecodeError):
            codec.decode_partition_state_tuple(data, path)
        return
    assert codec.decode_partition_state_tuple(data, path) == (general.leader, general.leader_epoch, tuple(general.isr),
                                                              general.controller_epoch)


@given(st.integers(-1, 2**31 - 1), st.integers(0, 2**31 - 1), st.lists(st.integers(0, 2**31 - 1), max_size=6, unique=True), st.integers(0, 2**31 - 1))
def test_the_take_over_state_decoder_reads_what_the_controller_writes(leader, leader_epoch, isr, controller_epoch):
    data = codec.encode_partition_state(PartitionState(leader, leader_epoch, isr, controller_epoch))
    assert codec._OWN_STATE.match(data)  # the fast path, not the fallback
    assert codec.decode_partition_state_tuple(data, "p") == (leader, leader_epoch, tuple(isr), controller_epoch)
