"""Consumer groups on the simulator (issue 10): the group coordinator core driven by the
simulated brokers (kafkalite.testing.sim.group_driver), offset-committing clients, and
the commit guarantee (an acknowledged offset commit is never lost; checker.py) checked on every
OffsetFetch, and at the end of each run on every group's current coordinator once the
cluster settled. Targeted schedules first, then a sweep of random ones.

GROUP_SIM_SEEDS (default 120) and GROUP_SIM_STEPS (default 2500) size the sweep;
GROUP_SIM_SEED_START shifts it (a soak over other seeds)."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import pytest

from kafkalite.core.codes import ErrorCode
from kafkalite.core.group_messages import OFFSETS_TOPIC, partition_for
from kafkalite.testing.sim import SimConfig, Simulation, SimulationFailure, config_for_seed, run_simulation
from kafkalite.testing.sim.scenario import quiet, settled, zk_state

SEEDS = int(os.environ.get("GROUP_SIM_SEEDS", "120"))
STEPS = int(os.environ.get("GROUP_SIM_STEPS", "2500"))
SEED_START = int(os.environ.get("GROUP_SIM_SEED_START", "0"))
OFFSETS_PARTITIONS = 3
GROUPS = SimConfig(offsets_partitions=OFFSETS_PARTITIONS)
TP0 = ("t", 0)


def start(seed: int, **overrides: object) -> Simulation:
    sim = Simulation(seed, quiet(offsets_partitions=OFFSETS_PARTITIONS, **overrides), random_faults=False)
    sim.run_until(lambda: settled(sim) and not sim.checker.quiesce_problems())
    sim.run_until(lambda: sim.checker.commits_acked >= 10, timeout_ms=2000)
    return sim


def offsets_tp(sim: Simulation, group: str) -> tuple[str, int]:
    return OFFSETS_TOPIC, partition_for(group, sim.cfg.offsets_partitions)


def coordinator_loaded(sim: Simulation, group: str) -> bool:
    tp = offsets_tp(sim, group)
    state = zk_state(sim, tp)
    broker = sim.brokers.get(state["leader"])
    return (broker is not None and broker.running and broker.groups is not None
            and broker.groups.loaded_epoch(tp[1]) == state["leader_epoch"])


def stop_committing(sim: Simulation) -> None:
    gc = sim.group_clients
    assert gc is not None
    gc.committing = False
    sim.run_until(lambda: not any(c.in_flight for c in gc.committers), timeout_ms=2000)


# ------------------------------------------------------------------ targeted schedules


@pytest.mark.parametrize("flush_mode", ["always", "random"])
def test_coordinator_crash_after_acknowledged_commits_loses_none(flush_mode: str) -> None:
    for seed in range(4):
        sim = start(seed, flush_mode=flush_mode)
        gc = sim.group_clients
        assert gc is not None
        old = zk_state(sim, offsets_tp(sim, "g0"))
        acked = sim.checker.commit_acked[("g0", TP0)]
        sim.crash(old["leader"])
        sim.run_until(lambda: zk_state(sim, offsets_tp(sim, "g0"))["leader"] not in (-1, old["leader"]), timeout_ms=2000)
        sim.run_until(lambda: coordinator_loaded(sim, "g0"), timeout_ms=2000)
        # The new coordinator loaded g0's commits and takes new ones.
        sim.run_until(lambda: sim.checker.commit_acked[("g0", TP0)] > acked, timeout_ms=2000)
        sim.restart(old["leader"])
        sim.settle()  # then every group's offsets are fetched and checked (the commit guarantee)
        assert gc.last_fetched[("g0", TP0)] >= sim.checker.commit_acked[("g0", TP0)]


def test_controlled_shutdown_moves_the_coordinator_and_commits_go_on() -> None:
    for seed in range(4):
        sim = start(seed)
        old = zk_state(sim, offsets_tp(sim, "g1"))
        acked = sim.checker.commits_acked
        sim.restart_delay_after_stop[old["leader"]] = 200
        sim.brokers[old["leader"]].begin_controlled_shutdown()
        sim.run_until(lambda: not sim.brokers[old["leader"]].running, timeout_ms=2000)
        moved = zk_state(sim, offsets_tp(sim, "g1"))
        assert moved["leader"] not in (-1, old["leader"])
        assert moved["leader_epoch"] > old["leader_epoch"]
        sim.run_until(lambda: coordinator_loaded(sim, "g1"), timeout_ms=2000)
        sim.run_until(lambda: sim.checker.commits_acked > acked + 10, timeout_ms=2000)
        sim.settle()


def test_moving_an_offsets_partition_away_from_its_coordinator_keeps_its_commits() -> None:
    """A reassignment (issue 9) of g0's offsets partition to replicas without its leader:
    the new leader loads the commits the old one acknowledged."""
    for seed in range(3):
        sim = start(seed, brokers=4)
        otp = offsets_tp(sim, "g0")
        old = zk_state(sim, otp)
        target = tuple(b for b in sorted(sim.brokers) if b != old["leader"])
        acked = sim.checker.commit_acked[("g0", TP0)]
        sim.reassign({otp: target})
        sim.run_until(lambda: set(sim.assignments[otp]) == set(target) and coordinator_loaded(sim, "g0"), timeout_ms=4000)
        assert zk_state(sim, otp)["leader"] != old["leader"]
        sim.run_until(lambda: sim.checker.commit_acked[("g0", TP0)] > acked, timeout_ms=2000)
        sim.settle()


def _commit_in_flight_when_leadership_moves(seed: int, cfg_overrides: dict[str, object]) -> tuple[Simulation, int, list]:
    """g0's coordinator L appends a commit its followers never fetch (their fetches of the
    offsets partition are dropped); then a controlled shutdown moves the leadership to a
    follower, which lacks the record."""
    sim = start(seed, **cfg_overrides)
    gc = sim.group_clients
    assert gc is not None
    stop_committing(sim)
    otp = offsets_tp(sim, "g0")
    leader = zk_state(sim, otp)["leader"]
    before = sim.checker.commit_acked[("g0", TP0)]
    sim.network.drop_if = lambda m: m.kind == "ReplicaFetch" and not m.response and m.body["tp"] == otp
    sim.run_for(2 * sim.cfg.net_delay_ms_max)  # fetches already under way land
    answers: list[ErrorCode] = []
    offset = gc.commit(gc.committer("g0", TP0), answers.append)
    assert offset is not None
    sim.run_until(lambda: sim.brokers[leader].replicas[otp].leo > sim.brokers[leader].replicas[otp].hw, timeout_ms=200)
    sim.restart_delay_after_stop[leader] = 100
    sim.brokers[leader].begin_controlled_shutdown()
    sim.run_until(lambda: bool(answers), timeout_ms=2000)
    sim.network.drop_if = None
    return sim, before, answers


def test_a_commit_in_flight_when_the_coordinator_loses_leadership_is_answered_with_an_error() -> None:
    for seed in range(4):
        sim, before, answers = _commit_in_flight_when_leadership_moves(seed, {})
        assert answers == [ErrorCode.NOT_COORDINATOR], f"seed {seed}: {answers}"
        assert sim.checker.commit_acked[("g0", TP0)] == before
        sim.settle()
        assert sim.group_clients is not None
        assert sim.group_clients.last_fetched[("g0", TP0)] == before  # the unreplicated commit is gone


def test_acknowledging_offset_commits_before_replication_is_caught_by_the_checker() -> None:
    """The checker can fail: a driver that acknowledges commits once the leader wrote them
    (acks=1) loses an acknowledged commit when the leadership moves."""
    with pytest.raises(SimulationFailure, match="commit guarantee"):
        sim, _before, answers = _commit_in_flight_when_leadership_moves(1, {"bug_offsets_acks_leader": True})
        assert answers == [ErrorCode.NONE]
        sim.settle()


# ------------------------------------------------------------------ random schedules


def _run_chunk(seeds: list[int]) -> tuple[list[str], Counter[str]]:
    failures: list[str] = []
    totals: Counter[str] = Counter()
    for seed in seeds:
        try:
            result = run_simulation(seed, STEPS, config_for_seed(seed, GROUPS))
        except SimulationFailure as failure:
            failures.append(str(failure))
            continue
        totals.update({"acked": result.acked, "faults": result.faults, "commits_acked": result.commits_acked,
                       "offset_fetches_checked": result.offset_fetches_checked, "moves": result.moves_finished})
    return failures, totals


def test_random_schedules_never_lose_an_acknowledged_commit() -> None:
    seeds = list(range(SEED_START, SEED_START + SEEDS))
    workers = max(1, min(os.cpu_count() or 1, 2))
    chunks = [seeds[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers) as pool:
        outcomes = list(pool.map(_run_chunk, chunks))
    failures = [f for chunk_failures, _ in outcomes for f in chunk_failures]
    totals: Counter[str] = sum((t for _, t in outcomes), Counter())
    print(f"group sweep of {SEEDS} seeds from {SEED_START}: {dict(totals)}")
    assert not failures, f"{len(failures)} of {SEEDS} seeds failed; first:\n{failures[0]}"
    assert totals["commits_acked"] > 10 * SEEDS
    assert totals["offset_fetches_checked"] > 5 * SEEDS
    assert totals["faults"] > SEEDS


def test_group_replay(sim_seed: int | None, sim_steps: int) -> None:
    """`pytest tests/sim/test_sim_groups.py -k replay --sim-seed N --sim-steps 2500`."""
    if sim_seed is None:
        pytest.skip("pass --sim-seed N to replay a seed")
    result = run_simulation(sim_seed, sim_steps, config_for_seed(sim_seed, GROUPS))
    assert result.steps >= sim_steps


def test_same_seed_same_trace_with_groups() -> None:
    for seed in (5, 6):
        cfg = config_for_seed(seed, dataclasses.replace(GROUPS))
        assert run_simulation(seed, 1500, cfg) == run_simulation(seed, 1500, cfg)
