"""Helpers for targeted simulator schedules (tests/sim): a quiet configuration (no random
faults, no drops or duplicates), a cluster started and settled, the state znode of a
partition."""

from __future__ import annotations

import dataclasses

from kafkalite.testing.sim import zk as zkm
from kafkalite.testing.sim.config import SimConfig
from kafkalite.testing.sim.runner import Simulation

TP0 = ("t", 0)


def quiet(**overrides: object) -> SimConfig:
    return dataclasses.replace(
        SimConfig(fault_probability=0.0, net_drop_probability=0.0, net_duplicate_probability=0.0),
        **overrides,
    )


def zk_state(sim: Simulation, tp=TP0) -> dict:
    node = sim.zk.get(zkm.state_path(tp))
    assert node is not None
    return node.data


def settled(sim: Simulation) -> bool:
    for tp in sim.assignments:
        node = sim.zk.get(zkm.state_path(tp))
        if node is None or node.data["leader"] < 0 or len(node.data["isr"]) < sim.cfg.replication_factor:
            return False
        leader = sim.brokers[node.data["leader"]]
        rep = leader.replicas.get(tp) if leader.running else None
        if rep is None or not rep.state.is_leader or rep.state.leader_epoch != node.data["leader_epoch"]:
            return False
    return True


def start(seed: int = 1, **overrides: object) -> Simulation:
    sim = Simulation(seed, quiet(**overrides), random_faults=False)
    sim.run_until(lambda: settled(sim))
    sim.run_for(150)
    assert sim.checker.acks > 0
    return sim


def start_quiet(seed: int) -> Simulation:
    """Settled, with the producer stopped and everything it had in flight answered."""
    sim = start(seed)
    sim.clients.producing = False
    sim.run_for(sim.cfg.produce_timeout_ms + 100)
    sim.run_until(lambda: settled(sim), timeout_ms=3000)
    return sim
