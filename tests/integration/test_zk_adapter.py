"""ZkAdapter against a real ZooKeeper (DESIGN.md section 2): conditional and batched
writes, pipelined reads, broker registration, controller election, producer id blocks."""

from __future__ import annotations

import threading
import time

import pytest

from kafkalite.zk import ZkAdapter, codec, paths
from kafkalite.zk.codec import BrokerRegistration, PartitionState, Reassignment, TopicAssignment
from kafkalite.zk.errors import (
    BrokerIdInUseError,
    ControllerMovedError,
    ReassignmentInProgressError,
    StaleZnodeVersionError,
    TopicAlreadyExistsError,
    UnknownTopicError,
    ZnodeDecodeError,
    ZnodeNotFoundError,
)


@pytest.fixture
def adapter(zk_client) -> ZkAdapter:
    zk = ZkAdapter(zk_client)
    zk.ensure_base_paths()
    return zk


def _registration(broker_id: int) -> BrokerRegistration:
    return BrokerRegistration(
        id=broker_id, host="127.0.0.1", port=9090 + broker_id, inter_broker_port=9190 + broker_id,
        admin_port=9290 + broker_id, rack=None,
    )


def _state(leader: int, leader_epoch: int = 0) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=leader_epoch, isr=[leader], controller_epoch=1)


def test_conditional_set_returns_new_version_and_rejects_a_stale_one(adapter):
    stat = adapter.create("/x", b"a")
    assert adapter.conditional_set("/x", b"b", stat.version) == stat.version + 1
    with pytest.raises(StaleZnodeVersionError) as info:
        adapter.conditional_set("/x", b"c", stat.version)
    assert info.value.path == "/x"
    with pytest.raises(ZnodeNotFoundError):
        adapter.conditional_set("/missing", b"c", 0)


def test_multi_conditional_set_applies_all_but_the_stale_ones(adapter):
    created = adapter.multi_create([(f"/n{i}", b"0") for i in range(50)])
    assert set(created.values()) == {0}
    adapter.conditional_set("/n7", b"moved", 0)  # n7 and n31 now stale for the batch
    adapter.conditional_set("/n31", b"moved", 0)

    results = adapter.multi_conditional_set([(f"/n{i}", b"1", 0) for i in range(50)] + [("/gone", b"1", 0)])

    assert isinstance(results["/n7"], StaleZnodeVersionError)
    assert isinstance(results["/n31"], StaleZnodeVersionError)
    assert isinstance(results["/gone"], ZnodeNotFoundError)
    for i in set(range(50)) - {7, 31}:
        assert results[f"/n{i}"] == 1
        assert adapter.get(f"/n{i}")[0] == b"1"
    assert adapter.get("/n7")[0] == b"moved"


def test_five_thousand_partition_state_writes_with_one_stale_are_split_into_bounded_transactions(adapter):
    topic = "big"
    partitions = range(5000)
    adapter.create_topic_znode(topic, TopicAssignment({p: [1, 2, 3] for p in partitions}))
    created = adapter.create_partition_states({(topic, p): _state(1) for p in partitions})
    assert all(v == 0 for v in created.values())
    adapter.conditional_set(paths.partition_state_path(topic, 4321), codec.encode_partition_state(_state(3)), 0)

    new_state = PartitionState(leader=2, leader_epoch=1, isr=[2, 1, 3], controller_epoch=1)
    before = adapter.writer.transactions_committed
    results = adapter.update_partition_states({(topic, p): (new_state, 0) for p in partitions})
    transactions = adapter.writer.transactions_committed - before

    assert isinstance(results[(topic, 4321)], StaleZnodeVersionError)
    assert sum(1 for v in results.values() if v == 1) == 4999
    # 5 chunks of at most 1000 ops, plus one retry of the chunk holding the stale write.
    assert transactions == 6
    states = adapter.get_partition_states([(topic, p) for p in partitions])
    assert len(states) == 5000
    assert states[(topic, 0)] == (new_state, 1)
    assert states[(topic, 4321)] == (_state(3), 1)


def test_a_batch_larger_than_jute_maxbuffer_is_split_by_bytes(adapter):
    value = b"v" * 4000
    count = 600  # ~2.4 MB in total, few enough ops that only the byte bound splits it
    adapter.multi_create([(f"/b{i}", b"") for i in range(count)])
    before = adapter.writer.transactions_committed
    results = adapter.multi_conditional_set([(f"/b{i}", value, 0) for i in range(count)])
    assert set(results.values()) == {1}
    assert adapter.writer.transactions_committed - before >= 5  # 512 KiB per transaction
    assert adapter.get_many([f"/b{i}" for i in range(count)])["/b599"][0] == value


def test_get_many_pipelines_reads_and_maps_missing_znodes_to_none(zk_client):
    adapter = ZkAdapter(zk_client, reads_in_flight_max=7)
    adapter.multi_create([(f"/r{i}", str(i).encode()) for i in range(20)])
    replies = adapter.get_many([f"/r{i}" for i in range(20)] + ["/nope"])
    assert replies["/nope"] is None
    assert [replies[f"/r{i}"][0] for i in range(20)] == [str(i).encode() for i in range(20)]


def test_get_many_by_multi_read_agrees_with_single_reads(zk_client):
    """Issue 13: a new controller reads 100,000 partition states in multiRead requests."""
    batched = ZkAdapter(zk_client, reads_in_flight_max=700, multi_read_paths_max=300)
    single = ZkAdapter(zk_client, multi_read=False)
    batched.multi_create([(f"/m{i}", str(i).encode() * (i % 5)) for i in range(2500) if i % 7])
    wanted = [f"/m{i}" for i in range(2500)] + ["/nope/deeper"]
    by_multi = batched.get_many(wanted)
    assert batched._multi_read_answered  # the server took multiRead (ZooKeeper 3.6+)
    assert by_multi == single.get_many(wanted)
    assert by_multi["/m7"] is None
    assert by_multi["/nope/deeper"] is None
    assert by_multi["/m8"][0] == b"888"
    assert by_multi["/m5"][0] == b""
    assert by_multi["/m8"][1].version == 0


def test_creating_10000_partition_states_takes_a_few_multis_and_keeps_existing_parents(adapter):
    states = {("big", p): _state(p % 3 + 1) for p in range(10_000)}
    before = adapter.writer.transactions_committed
    results = adapter.create_partition_states(states, None)
    assert set(results.values()) == {0}
    assert adapter.writer.transactions_committed - before <= 25  # 20,000 creates, 1,000 per multi
    # Partitions added later: one of them already has its partitions/<p> znode.
    adapter.create(paths.partition_path("big", 10_001), b"", makepath=True)
    more = {("big", p): _state(1) for p in range(10_000, 10_003)}
    assert set(adapter.create_partition_states(more, None).values()) == {0}
    loaded = adapter.get_partition_states(list(states) + list(more))
    assert len(loaded) == 10_003
    assert loaded[("big", 4)] == (_state(2), 0)
    # What a new controller reads: the same states as plain tuples, with each write's mzxid.
    adapter.conditional_set(paths.partition_state_path("big", 7), codec.encode_partition_state(_state(3)), 0)
    tuples = adapter.get_partition_state_tuples(list(states) + [("big", 10_009)])
    assert len(tuples) == 10_000
    assert tuples[("big", 4)][:2] == ((2, _state(2).leader_epoch, tuple(_state(2).isr), _state(2).controller_epoch), 0)
    assert tuples[("big", 7)][0][0] == 3 and tuples[("big", 7)][1] == 1
    assert tuples[("big", 7)][2] > tuples[("big", 4)][2]  # written later


def test_register_broker_returns_czxid_epoch_and_refuses_a_duplicate_id(adapter, zk_client_factory):
    epoch = adapter.register_broker(_registration(1))
    assert epoch > 0
    assert adapter.register_broker(_registration(1)) == epoch  # same session, same value

    other = ZkAdapter(zk_client_factory())
    with pytest.raises(BrokerIdInUseError, match="broker.id=1"):
        other.register_broker(_registration(1))
    epoch2 = other.register_broker(_registration(2))
    assert epoch2 > epoch

    brokers = adapter.get_brokers()
    assert brokers == {1: (_registration(1), epoch), 2: (_registration(2), epoch2)}


def test_racing_controller_candidates_elect_one_and_bump_the_epoch(zk_client_factory):
    candidates = [ZkAdapter(zk_client_factory()) for _ in range(4)]
    results: dict[int, object] = {}
    barrier = threading.Barrier(len(candidates))

    def run(broker_id: int, adapter: ZkAdapter) -> None:
        barrier.wait()
        results[broker_id] = adapter.try_become_controller(broker_id, now_ms=1000)

    threads = [threading.Thread(target=run, args=(i + 1, a)) for i, a in enumerate(candidates)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    winners = {b: r for b, r in results.items() if r is not None}
    assert len(winners) == 1
    (winner_id, election), = winners.items()
    assert election.epoch == 1
    assert candidates[0].get_controller().broker_id == winner_id
    assert candidates[0].get_controller_epoch()[0].epoch == 1

    # The winner resigns; the next candidate gets epoch 2, and the old fence is dead.
    winner = candidates[winner_id - 1]
    assert winner.resign_controller(winner_id)
    next_id = 1 if winner_id != 1 else 2
    second = candidates[next_id - 1].try_become_controller(next_id)
    assert second.epoch == 2
    assert second.epoch_zk_version == election.epoch_zk_version + 1
    with pytest.raises(ControllerMovedError):
        winner.multi_create([("/fenced", b"")], controller_epoch_zk_version=election.epoch_zk_version)
    assert winner.get("/fenced") is None
    assert candidates[next_id - 1].multi_create(
        [("/allowed", b"")], controller_epoch_zk_version=second.epoch_zk_version
    ) == {"/allowed": 0}


def _racing_reads_of_controller(adapter: ZkAdapter, meanwhile) -> None:
    """`adapter` reads /controller, then `meanwhile()` runs before its answer is used."""
    real_get = adapter.get

    def get(path):
        found = real_get(path)
        if path == paths.controller_path():
            meanwhile()
        return found

    adapter.get = get  # type: ignore[method-assign]


def test_removing_a_gone_controller_never_removes_one_elected_meanwhile(zk_client_factory):
    """Found by review: the delete was "conditional on the version" of /controller, which
    an ephemeral znode always has at 0, so a broker that found controller 3's process gone
    removed the /controller broker 5 had just won. It is fenced on /controller_epoch now."""
    holder_client = zk_client_factory()
    holder, watcher, successor = ZkAdapter(holder_client), ZkAdapter(zk_client_factory()), ZkAdapter(zk_client_factory())
    holder.ensure_base_paths()
    epoch3 = holder.register_broker(_registration(3))
    assert holder.try_become_controller(3) is not None

    def expires_and_another_is_elected() -> None:
        holder_client.stop()  # broker 3's session ends (the expiry the watch raced)
        assert successor.try_become_controller(5) is not None

    _racing_reads_of_controller(watcher, expires_and_another_is_elected)
    assert watcher.remove_gone_controller(3, epoch3) is False
    assert successor.get_controller().broker_id == 5

    # Without a race, a gone controller's /controller is removed, and only that one.
    epoch6 = successor.register_broker(_registration(6))
    assert ZkAdapter(zk_client_factory()).remove_gone_controller(6, epoch6) is False  # 5 holds it, not 6
    epoch5 = successor.register_broker(_registration(5))
    assert ZkAdapter(zk_client_factory()).remove_gone_controller(5, epoch5) is True
    assert successor.get_controller() is None


def test_resigning_never_removes_a_controller_elected_after_the_read(zk_client_factory):
    """Between the resigning controller's read of its own /controller and its delete, that
    znode was removed (a watch found its process gone) and another broker was elected."""
    resigning, other, successor = (ZkAdapter(zk_client_factory()) for _ in range(3))
    resigning.ensure_base_paths()
    assert resigning.try_become_controller(1) is not None

    def removed_and_another_is_elected() -> None:
        other.client.delete(paths.controller_path())
        assert successor.try_become_controller(2) is not None

    _racing_reads_of_controller(resigning, removed_and_another_is_elected)
    assert resigning.resign_controller(1) is False
    assert successor.get_controller().broker_id == 2


def test_controller_znode_goes_with_the_session_and_the_epoch_survives(zk_client_factory):
    first_client = zk_client_factory()
    first = ZkAdapter(first_client)
    assert first.try_become_controller(1).epoch == 1
    first_client.stop()
    second = ZkAdapter(zk_client_factory())
    assert second.get_controller() is None
    assert second.try_become_controller(2) == (2, 1)


def test_producer_id_blocks_from_racing_brokers_never_overlap(zk_client_factory):
    adapters = [ZkAdapter(zk_client_factory()) for _ in range(2)]
    blocks: list[tuple[int, int]] = []
    lock = threading.Lock()

    def run(broker_id: int, adapter: ZkAdapter) -> None:
        for _ in range(25):
            block = adapter.allocate_producer_id_block(broker_id, block_size=100)
            with lock:
                blocks.append(block)

    threads = [threading.Thread(target=run, args=(i + 1, a)) for i, a in enumerate(adapters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    blocks.sort()
    assert len(blocks) == 50
    assert blocks[0] == (0, 99)
    for (_, end), (start, _) in zip(blocks, blocks[1:]):
        assert start == end + 1
    latest = codec.decode_producer_id_block(adapters[0].get(paths.producer_id_block_path())[0], "/p")
    assert latest.block_end == 4999


def test_topics_create_read_and_mark_for_deletion(adapter):
    assignment = TopicAssignment({0: [1, 2], 1: [2, 1]}, {"cleanup.policy": "delete"})
    assert adapter.create_topic_znode("orders", assignment) == 0
    with pytest.raises(TopicAlreadyExistsError):
        adapter.create_topic_znode("orders", assignment)
    assert adapter.get_topics() == ["orders"]
    assert adapter.get_topic_assignment("orders") == (assignment, 0)
    assert adapter.get_topic_assignment("nope") is None

    adapter.mark_topic_for_deletion("orders")
    adapter.mark_topic_for_deletion("orders")  # idempotent
    assert adapter.get_topics_marked_for_deletion() == ["orders"]
    with pytest.raises(UnknownTopicError):
        adapter.mark_topic_for_deletion("nope")

    adapter.create_partition_states({("orders", 0): _state(1)})
    adapter.delete_topic_znodes("orders", None)
    assert adapter.get_topics() == []
    assert adapter.get_topics_marked_for_deletion() == []
    assert adapter.get(paths.config_topic_path("orders")) is None


def test_a_deposed_controllers_deletes_are_fenced_and_take_nothing_its_successor_or_an_admin_made(zk_client_factory):
    """Found by review: a controller whose session expired while it waited on a topic
    deletion (its Resign queued behind that event) went on to delete the topic, which its
    successor had finished deleting and an admin had created again, and admin znodes."""
    deposed, successor = ZkAdapter(zk_client_factory()), ZkAdapter(zk_client_factory())
    deposed.ensure_base_paths()
    first = deposed.try_become_controller(1)
    assert deposed.resign_controller(1)
    second = successor.try_become_controller(2)
    successor.create_topic_znode("t", TopicAssignment({0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"}))
    successor.create_partition_states({("t", 0): _state(1), ("t", 1): _state(2)}, second.epoch_zk_version)
    election = paths.preferred_replica_election_path()
    successor.create(election, b'{"partitions":[["t",0]]}', makepath=True)
    successor.request_partition_changes("add", {("t", 2): [1, 2], ("t", 3): [2, 1]})
    topic_tree = [paths.topic_path("t"), paths.partitions_path("t"), paths.partition_path("t", 0),
                  paths.partition_state_path("t", 0), paths.partition_state_path("t", 1), paths.config_topic_path("t")]
    adds = [paths.admin_partition_request_path("add", "t", 2), paths.admin_partition_request_path("add", "t", 3)]

    with pytest.raises(ControllerMovedError):
        deposed.delete_topic_znodes("t", first.epoch_zk_version)
    with pytest.raises(ControllerMovedError):
        deposed.delete_if_exists(election, first.epoch_zk_version)
    with pytest.raises(ControllerMovedError):
        deposed.delete_partition_admin_requests("add", [("t", 2), ("t", 3)], first.epoch_zk_version)
    for path in [*topic_tree, election, *adds]:
        assert successor.get(path) is not None, path
    assert successor.get_partition_states([("t", 0), ("t", 1)]) == {("t", 0): (_state(1), 0), ("t", 1): (_state(2), 0)}

    # The controller in office: a topic parent goes with its last request, not before.
    successor.delete_partition_admin_requests("add", [("t", 2)], second.epoch_zk_version)
    assert successor.get_partition_admin_requests("add") == {("t", 3): [2, 1]}
    successor.delete_partition_admin_requests("add", [("t", 3)], second.epoch_zk_version)
    assert successor.get(paths.admin_partition_requests_topic_path("add", "t")) is None
    successor.delete_if_exists(election, second.epoch_zk_version)
    successor.delete_if_exists(election, second.epoch_zk_version)  # gone already: fine
    assert successor.get(election) is None
    successor.mark_topic_for_deletion("t")
    successor.delete_topic_znodes("t", second.epoch_zk_version)
    for path in [*topic_tree, paths.admin_delete_topic_path("t")]:
        assert successor.get(path) is None, path
    successor.delete_topic_znodes("t", second.epoch_zk_version)  # nothing left: fine


def test_one_reassignment_at_a_time_and_cancel_deletes_it(adapter, zk_client):
    assert adapter.get_reassignment() is None
    first = Reassignment({("t", 0): (2, 3)}, throttle=codec.reassignment_throttle(1024))
    adapter.create_reassignment(first)
    data, _ = zk_client.get("/admin/reassign_partitions")
    assert data == codec.encode_reassignment(first)
    value, version = adapter.get_reassignment()
    assert (value, version) == (first, 0)
    with pytest.raises(ReassignmentInProgressError):
        adapter.create_reassignment(Reassignment({("t", 1): (1,)}))
    assert adapter.get_reassignment()[0] == first
    assert adapter.delete_reassignment() is True
    assert adapter.get_reassignment() is None
    assert adapter.delete_reassignment() is False


def test_a_garbage_znode_is_reported_with_its_path(adapter):
    adapter.create(paths.controller_path(), b"garbage")
    with pytest.raises(ZnodeDecodeError, match="/controller"):
        adapter.get_controller()


def test_watches_call_back_on_changes(adapter):
    children_seen: list[list[str]] = []
    data_seen: list[bytes | None] = []
    changed = threading.Event()

    def on_children(children):
        children_seen.append(children)
        changed.set()

    adapter.watch_children(paths.brokers_ids_path(), on_children)
    adapter.watch_data(paths.controller_path(), lambda data, stat: data_seen.append(data))
    changed.wait(5)
    changed.clear()
    adapter.register_broker(_registration(5))
    assert changed.wait(5)
    adapter.try_become_controller(5)

    deadline = time.monotonic() + 5
    while (len(data_seen) < 2 or ["5"] not in children_seen) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert children_seen[0] == []
    assert ["5"] in children_seen
    assert data_seen[0] is None
    assert codec.decode_controller_info(data_seen[-1], "/controller").broker_id == 5
