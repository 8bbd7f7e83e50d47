"""The controller's process watch (issue 13) on the simulator: a crashed leader is failed
over before its session expires, a paused one is not, and wrong evidence (a running broker
reported gone: a zombie) never costs an acknowledged write."""

from __future__ import annotations

import dataclasses

from kafkalite.testing.sim import SimConfig, config_for_seed, run_simulation
from kafkalite.testing.sim.scenario import settled, start, zk_state

WATCH = {"process_watch": True, "zk_session_timeout_ms": 2000}


def test_a_crashed_leader_is_failed_over_before_its_session_expires() -> None:
    checked = 0
    for seed in range(8):
        sim = start(seed, partitions=6, **WATCH)
        # At start the controller leads everything: bounce it, so that leaderships spread.
        first = sim.zk.controller_id()
        sim.crash(first)
        sim.run_until(lambda: sim.zk.controller_id() not in (-1, first), timeout_ms=5000)
        sim.restart(first)
        sim.run_until(lambda: settled(sim), timeout_ms=5000)
        controller = sim.zk.controller_id()
        tp = next((tp for tp in sorted(sim.assignments) if zk_state(sim, tp)["leader"] != controller), None)
        if tp is None:
            continue  # the controller leads everything; its own death waits for its session
        old = zk_state(sim, tp)
        crashed_at = sim.sched.now_ms
        sim.crash(old["leader"])
        sim.run_until(lambda: zk_state(sim, tp)["leader"] not in (old["leader"], -1), timeout_ms=1500)
        assert sim.sched.now_ms - crashed_at < sim.cfg.zk_session_timeout_ms
        assert old["leader"] in sim.zk.live_brokers()  # still registered
        acks = sim.checker.acks
        sim.run_for(sim.cfg.produce_timeout_ms + 300)
        assert sim.checker.acks > acks
        sim.restart(old["leader"])
        sim.run_until(lambda: settled(sim), timeout_ms=5000)
        checked += 1
    assert checked >= 3


def test_a_paused_leader_keeps_its_leadership_under_the_session() -> None:
    for seed in range(3):
        sim = start(seed, **WATCH)
        old = zk_state(sim)
        sim.pause(old["leader"])
        sim.run_for(sim.cfg.zk_session_timeout_ms // 2)
        assert (zk_state(sim)["leader"], zk_state(sim)["leader_epoch"]) == (old["leader"], old["leader_epoch"])
        sim.resume(old["leader"])
        sim.run_until(lambda: settled(sim), timeout_ms=3000)


def test_wrong_evidence_never_loses_an_acknowledged_write() -> None:
    """Random schedules where the watch often reports running brokers gone: the zombie's
    partitions move at new leader epochs, it cannot acknowledge nor shrink an ISR, and it
    is taken back when it answers. Every guarantee is checked after every step, and the run
    must settle."""
    base = SimConfig(process_watch=True, process_watch_false_evidence=0.02)
    totals = {"acked": 0, "faults": 0}
    for seed in range(40):
        result = run_simulation(seed, 600, dataclasses.replace(config_for_seed(seed, base)))
        totals["acked"] += result.acked
        totals["faults"] += result.faults
    assert totals["acked"] > 40
