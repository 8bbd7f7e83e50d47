"""Targeted schedules on the simulator (no random faults, no drops), the DESIGN 7
guarantees still checked after every step."""

from __future__ import annotations

import pytest

from kafkalite.testing.sim import SimConfig, Simulation, SimulationFailure
from kafkalite.testing.sim import zk as zkm
from kafkalite.testing.sim.scenario import TP0, quiet, settled, start, start_quiet, zk_state
from kafkalite.testing.sim.world import ZK


def test_leader_killed_during_acks_all_loses_nothing() -> None:
    for seed in range(5):
        sim = start(seed)
        old = zk_state(sim)
        sim.clients.produce(TP0, old["leader"])
        sim.run_for(2)  # the batch is on its way or appended, not yet acknowledged
        sim.crash(old["leader"])
        sim.run_until(lambda: zk_state(sim)["leader_epoch"] > old["leader_epoch"] and zk_state(sim)["leader"] >= 0)
        assert zk_state(sim)["leader"] != old["leader"]
        acks = sim.checker.acks
        sim.run_for(sim.cfg.produce_timeout_ms + 300)  # requests stuck on the dead leader time out
        assert sim.checker.acks > acks  # the new leader takes acks=all writes
        sim.restart(old["leader"])
        sim.run_until(lambda: settled(sim), timeout_ms=3000)


def test_controller_killed_mid_failover_new_controller_finishes() -> None:
    for seed in range(2, 6):
        sim = start(seed)
        controller = sim.zk.controller_id()
        follower = next(b for b in sim.assignments[TP0] if b != zk_state(sim)["leader"] and b != controller)
        epoch = zk_state(sim)["leader_epoch"]
        controller_epoch = sim.zk.get(zkm.CONTROLLER_EPOCH).data["epoch"]
        sim.zk.expire(sim.brokers[follower].sid)
        sim.crash(follower)
        # The controller writes the shrunk ISR (new leader epoch), then dies before its
        # LeaderAndIsr arrive; it led the partitions too.
        sim.run_until(lambda: zk_state(sim)["leader_epoch"] > epoch)
        sim.crash(controller)
        sim.run_until(lambda: sim.zk.controller_id() not in (-1, controller), timeout_ms=2000)
        assert sim.zk.get(zkm.CONTROLLER_EPOCH).data["epoch"] > controller_epoch
        survivor = sim.zk.controller_id()
        sim.run_until(lambda: all(zk_state(sim, t)["leader"] == survivor for t in sim.assignments))
        sim.restart(follower)
        sim.restart(controller)
        sim.run_until(lambda: settled(sim), timeout_ms=3000)


def test_zombie_leader_paused_past_its_session_cannot_ack_and_steps_down() -> None:
    for seed in range(5):
        sim = start(seed)
        zombie = zk_state(sim)["leader"]
        epoch = zk_state(sim)["leader_epoch"]
        sim.pause(zombie)
        sim.run_for(sim.cfg.zk_session_timeout_ms + 200)
        assert zk_state(sim)["leader"] not in (zombie, -1)
        sim.resume(zombie)
        payload = sim.clients.produce(TP0, zombie)  # straight to the zombie, old metadata
        sim.run_until(lambda: sim.brokers[zombie].replicas[TP0].state.leader_epoch > epoch, timeout_ms=2000)
        assert not sim.brokers[zombie].replicas[TP0].state.is_leader
        sim.run_for(300)
        acked_at = [o for o, p in sim.clients.acked_by_client[TP0].items() if p == payload]
        assert not acked_at  # refused or timed out: the zombie never had its followers' fetches


def _kip101_lost_acked_write(seed: int, cfg: SimConfig) -> None:
    """KIP-101 case 1: a follower learns the HW one fetch late; it becomes follower of a
    new epoch (C's death bumps it) and, truncating to its HW, drops an acked write; then
    the leader dies and the follower leads without it."""
    sim = Simulation(seed, cfg, random_faults=False)
    sim.run_until(lambda: settled(sim))
    sim.run_for(100)
    leader = zk_state(sim)["leader"]
    follower_b, follower_c = [b for b in sim.assignments[TP0] if b != leader]
    acks = sim.checker.acks
    sim.run_until(lambda: sim.checker.acks > acks)  # an ack just went out: B's HW lags
    sim.zk.expire(sim.brokers[follower_c].sid)  # the controller notices C at once and
    sim.crash(follower_c)  # shrinks the ISR with a new leader epoch (before the leader would)
    epoch = zk_state(sim)["leader_epoch"]
    sim.run_until(lambda: sim.brokers[follower_b].replicas[TP0].state.leader_epoch > epoch, timeout_ms=2000)
    sim.crash(leader)
    sim.run_for(600)


def test_kip101_lost_acked_write_prevented_by_epoch_truncation() -> None:
    for seed in range(10):
        _kip101_lost_acked_write(seed, quiet())


def test_kip101_lost_acked_write_happens_with_truncate_to_hw() -> None:
    caught = 0
    for seed in range(10):
        try:
            _kip101_lost_acked_write(seed, quiet(bug_truncate_to_hw=True))
        except SimulationFailure as failure:
            assert any("guarantee" in v for v in failure.violations)
            caught += 1
    assert caught > 0


def _kip101_divergence(seed: int, cfg: SimConfig) -> Simulation:
    """KIP-101 case 2: A (leader) and B hold different suffixes after both lose power
    (B had fetched m2 but not flushed it); B comes back first, leads and takes m3 at m2's
    offset; A comes back. Two failures: loss is allowed, divergence below the HW is not."""
    sim = Simulation(seed, cfg, random_faults=False)
    sim.run_until(lambda: settled(sim))
    sim.loss_permitted = True
    a = zk_state(sim)["leader"]
    b, c = [x for x in sim.assignments[TP0] if x != a]
    sim.crash(c)
    sim.run_until(lambda: c not in zk_state(sim)["isr"], timeout_ms=2000)
    acks = sim.checker.acks
    sim.run_until(lambda: sim.checker.acks > acks + 2)
    for broker in (a, b):
        for rep in sim.brokers[broker].replicas.values():
            rep.disk.flushed = rep.leo
            rep.disk.hw_checkpoint = rep.hw  # the HW checkpoint ran just before the crash
    rep_b = sim.brokers[b].replicas[TP0]
    rep_b.disk.flushed = max(rep_b.leo - 1, 0)  # B's last fetched batch was only in memory
    rep_b.disk.hw_checkpoint = min(rep_b.disk.hw_checkpoint, rep_b.disk.flushed)
    sim.crash(a)
    sim.crash(b)
    sim.run_for(sim.cfg.zk_session_timeout_ms + 50)
    sim.restart(b)
    sim.run_until(lambda: zk_state(sim)["leader"] == b, timeout_ms=3000)
    sim.restart(c)  # C catches up and joins the ISR, so B can take acks=all writes...
    leo_a = len(sim.brokers[a].disk[TP0].log)
    # ...at the offsets A still has from before, and past them.
    sim.run_until(lambda: TP0 in sim.brokers[b].replicas and sim.brokers[b].replicas[TP0].leo > leo_a + 1, timeout_ms=3000)
    sim.restart(a)
    sim.run_until(lambda: settled(sim), timeout_ms=3000)
    sim.run_for(300)
    return sim


def test_kip101_divergence_prevented_by_epoch_truncation() -> None:
    for seed in range(10):
        sim = _kip101_divergence(seed, quiet(flush_mode="random", flush_probability_per_tick=0.0))
        leader = zk_state(sim)["leader"]
        logs = {b: sim.brokers[b].replicas[TP0].log for b in sim.assignments[TP0]}
        hw = sim.brokers[leader].replicas[TP0].hw
        assert all(log[:hw] == logs[leader][:hw] for log in logs.values())


def test_kip101_divergence_happens_with_truncate_to_hw() -> None:
    caught = 0
    for seed in range(10):
        try:
            _kip101_divergence(seed, quiet(flush_mode="random", flush_probability_per_tick=0.0, bug_truncate_to_hw=True))
        except SimulationFailure as failure:
            assert any("guarantee 2" in v for v in failure.violations)
            caught += 1
    assert caught > 0


def test_all_replicas_down_unclean_off_partition_offline_nothing_invented() -> None:
    sim = start(4)
    for broker in sorted(sim.brokers):
        sim.crash(broker)
    sim.run_for(sim.cfg.zk_session_timeout_ms + 100)
    assert sim.zk.controller_id() == -1
    assert sim.zk.live_brokers() == {}
    committed = {tp: len(ledger) for tp, ledger in sim.checker.committed.items()}
    # One replica returns that is not in the ISR of t-0 any more? All were: it leads again
    # only because it is an ISR member (clean); nothing acknowledged is lost (checked).
    sim.restart(3)
    sim.run_for(400)
    for tp in sim.assignments:
        state = zk_state(sim, tp)
        assert state["leader"] in (-1, 3)
        assert state["leader"] == -1 or 3 in state["isr"]
    for broker in (1, 2):
        sim.restart(broker)
    sim.run_until(lambda: settled(sim), timeout_ms=3000)
    sim.run_for(300)
    for tp, n in committed.items():
        assert len(sim.checker.committed[tp]) >= n


def test_all_replicas_down_last_isr_member_stays_offline_until_it_returns() -> None:
    sim = start(5)
    leader = zk_state(sim)["leader"]
    others = [b for b in sim.assignments[TP0] if b != leader]
    for broker in others:
        sim.crash(broker)
    sim.run_until(lambda: zk_state(sim)["isr"] == [leader], timeout_ms=2000)
    sim.crash(leader)
    sim.run_for(sim.cfg.zk_session_timeout_ms + 100)
    for broker in others:
        sim.restart(broker)
    sim.run_for(600)
    assert zk_state(sim)["leader"] == -1  # unclean off: nobody but the last ISR member
    assert zk_state(sim)["isr"] == [leader]
    sim.restart(leader)
    sim.run_until(lambda: zk_state(sim)["leader"] == leader, timeout_ms=2000)
    sim.run_until(lambda: settled(sim), timeout_ms=3000)


def test_rolling_restart_with_controlled_shutdown_keeps_acks_flowing() -> None:
    sim = start(6)
    for broker in sorted(sim.brokers):
        sim.restart_delay_after_stop[broker] = 100
        sim.brokers[broker].begin_controlled_shutdown()
        sim.run_until(lambda: not sim.brokers[broker].running, timeout_ms=2000)
        for tp in sim.assignments:
            assert zk_state(sim, tp)["leader"] != broker
        acks = sim.checker.acks
        sim.run_until(lambda: sim.brokers[broker].running and settled(sim), timeout_ms=3000)
        sim.run_for(sim.cfg.produce_timeout_ms + 200)
        assert sim.checker.acks > acks


@pytest.mark.parametrize("seed", [7, 8])
def test_rolling_crash_restarts_lose_nothing(seed: int) -> None:
    sim = start(seed, flush_mode="random")
    for broker in sorted(sim.brokers):
        sim.crash(broker)
        sim.run_for(sim.cfg.zk_session_timeout_ms + 100)
        sim.restart(broker)
        sim.run_until(lambda: settled(sim), timeout_ms=3000)
        sim.run_for(100)


def test_acks_all_pending_across_a_controller_isr_shrink_is_acknowledged_with_its_offset() -> None:
    """Issue 7: a follower dies while an acks=all batch waits for it; the controller drops
    it from the ISR with a new leader epoch, but the leader keeps leading and keeps the
    batch. The batch must be acknowledged (at its offset) once the HW passes it, not failed:
    librdkafka reports a failed batch whose successor succeeds as delivered without an
    offset."""
    for seed in range(5):
        sim = start(seed, replica_lag_time_max_ms=10_000)  # only the controller shrinks the ISR
        sim.clients.producing = False
        sim.run_for(sim.cfg.produce_timeout_ms + 100)  # what was in flight is answered
        before = zk_state(sim)
        controller = sim.zk.controller_id()
        follower = next(b for b in sim.assignments[TP0] if b not in (before["leader"], controller))
        sim.zk.expire(sim.brokers[follower].sid)
        sim.crash(follower)
        payload = sim.clients.produce(TP0, before["leader"])
        sim.run_until(lambda: zk_state(sim)["leader_epoch"] > before["leader_epoch"], timeout_ms=2000)
        assert zk_state(sim)["leader"] == before["leader"]
        sim.run_for(sim.cfg.produce_timeout_ms + 100)
        acked_at = [o for o, p in sim.clients.acked_by_client[TP0].items() if p == payload]
        assert len(acked_at) == 1, f"seed {seed}: the batch was not acknowledged"
        sim.restart(follower)
        sim.run_until(lambda: settled(sim), timeout_ms=3000)


def test_follower_that_led_an_epoch_without_data_rejoins_the_isr() -> None:
    """Issue 7: B becomes leader (epoch e+1) and loses it before anything is appended; its
    epoch cache then holds (e+1, LEO), which the new leader never heard of. Truncating to
    the LEO must drop that entry, or B sends e+1 as its last fetched epoch, the leader
    answers DIVERGING_EPOCH for ever, and B, alive and registered, never rejoins the ISR."""
    tried = 0
    for seed in range(6):
        sim = start_quiet(seed)
        old = zk_state(sim)
        sim.zk.expire(sim.brokers[old["leader"]].sid)
        sim.crash(old["leader"])
        sim.run_until(lambda: zk_state(sim)["leader"] not in (-1, old["leader"]), timeout_ms=2000)
        b = zk_state(sim)["leader"]
        tried += 1
        sim.run_until(lambda: sim.brokers[b].replicas[TP0].state.is_leader, timeout_ms=2000)
        epoch_b = zk_state(sim)["leader_epoch"]
        # B is fenced before it appended anything at epoch_b: its session ends while it cannot
        # reach ZooKeeper. (Its session ending alone is no longer enough when B is the
        # controller: it registers again at once as the same process, logs intact, wins the
        # controller again and keeps its leaderships; only a process back from a crash is
        # fenced at a take-over, seed 684585.)
        sim.network.cut_link(b, ZK)
        sim.zk.expire(sim.brokers[b].sid)
        sim.run_until(lambda: zk_state(sim)["leader"] not in (-1, b), timeout_ms=2000)
        sim.network.heal_link(b, ZK)
        assert zk_state(sim)["leader_epoch"] > epoch_b
        sim.restart(old["leader"])
        sim.run_until(lambda: settled(sim), timeout_ms=4000)
        assert all(e[0] != epoch_b for e in sim.brokers[b].replicas[TP0].disk.epochs)
    assert tried >= 2


def test_controlled_shutdown_then_the_old_leaders_stale_alter_isr_is_fenced() -> None:
    """Issue 8: the old leader's AlterIsr, built at its last leader epoch, reaches the
    controller after a controlled shutdown moved the leadership away. The controller must
    refuse it (stale leader and partition epochs) and change nothing."""
    from kafkalite.core.messages import AlterIsrProposal, AlterIsrRequest
    from kafkalite.testing.sim.world import Message

    for seed in range(4):
        sim = start_quiet(seed)
        before = zk_state(sim)
        old_leader = before["leader"]
        version = sim.zk.get(zkm.state_path(TP0)).version
        stale = AlterIsrProposal(TP0[0], TP0[1], old_leader, before["leader_epoch"], (old_leader,), version)
        sim.restart_delay_after_stop[old_leader] = 10_000
        sim.brokers[old_leader].begin_controlled_shutdown()
        sim.run_until(lambda: zk_state(sim)["leader"] not in (-1, old_leader), timeout_ms=2000)
        moved = zk_state(sim)
        controller = sim.zk.controller_id()
        body = AlterIsrRequest(old_leader, sim.brokers[old_leader].broker_epoch, (stale,))
        sim.network.send(Message(old_leader, controller, "AlterIsr", body, sim.next_id()))
        sim.run_for(300)
        after = zk_state(sim)
        assert after["leader"] == moved["leader"]
        assert after["leader_epoch"] >= moved["leader_epoch"]
        assert after["isr"] != [old_leader]
        if not sim.brokers[old_leader].running:
            sim.restart(old_leader)
        sim.run_until(lambda: settled(sim), timeout_ms=4000)


def test_leader_and_isr_lost_many_times_in_a_row_still_arrives() -> None:
    """Issue 8: every LeaderAndIsr to one broker is lost for a long while (many resends);
    once they get through, the broker has the controller's current state and rejoins the
    ISR. The controller never gives up on a live, registered broker."""
    for seed in range(4):
        sim = start(seed)
        old = zk_state(sim)
        victim = next(b for b in sim.assignments[TP0] if b not in (old["leader"], sim.zk.controller_id()))
        sim.network.drop_if = lambda msg: msg.kind == "LeaderAndIsr" and msg.dst == victim and not msg.response
        sim.zk.expire(sim.brokers[old["leader"]].sid)  # the leader moves: a new epoch the victim must learn
        sim.crash(old["leader"])
        sim.run_until(lambda: zk_state(sim)["leader"] not in (-1, old["leader"]), timeout_ms=2000)
        sim.run_for(20 * sim.cfg.request_timeout_ms)  # many resends, all lost
        assert sim.brokers[victim].replicas[TP0].state.leader_epoch < zk_state(sim)["leader_epoch"]
        dropped = sim.network.dropped
        sim.network.drop_if = None
        sim.restart(old["leader"])
        sim.run_until(lambda: settled(sim), timeout_ms=4000)
        assert sim.network.dropped >= dropped
        assert sim.brokers[victim].replicas[TP0].state.leader_epoch == zk_state(sim)["leader_epoch"]


def test_controller_losing_its_session_in_the_middle_of_its_writes_is_finished_by_the_next() -> None:
    """Issue 8: the controller's ZooKeeper session expires after the first of a batch of
    partition-state writes (a follower of every partition failed, so every ISR shrinks).
    What it wrote stays written, the rest is not; the next controller re-reads and
    finishes, and the broker that lost its session does not write again."""
    for seed in range(3):
        sim = start(seed, partitions=6)
        controller = sim.zk.controller_id()
        isrs = {tp: zk_state(sim, tp)["isr"] for tp in sim.assignments}
        victim = next(b for b in sorted(sim.brokers) if b != controller and all(b in isr for isr in isrs.values()))
        real_write = sim.zk.write_state
        written: list = []

        def write_then_lose_session(tp, data, expected_version, epoch_version, real_write=real_write, written=written,
                                    controller=controller, sim=sim):
            version = real_write(tp, data, expected_version, epoch_version)
            written.append(tp)
            sim.zk.write_state = real_write  # only the first write of the batch gets through
            sim.zk.expire(sim.brokers[controller].sid)
            return version

        old_epoch = sim.zk.get(zkm.CONTROLLER_EPOCH).data["epoch"]
        sim.zk.write_state = write_then_lose_session
        sim.zk.expire(sim.brokers[victim].sid)
        sim.crash(victim)
        sim.run_until(lambda: all(victim not in zk_state(sim, tp)["isr"] for tp in isrs), timeout_ms=3000)
        assert len(written) == 1
        # Everything else was decided and written by a controller elected after the loss.
        assert all(zk_state(sim, tp)["controller_epoch"] > old_epoch for tp in isrs if tp != written[0])
        sim.restart(victim)
        sim.run_until(lambda: settled(sim), timeout_ms=4000)
