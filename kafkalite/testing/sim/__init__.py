"""Seeded, deterministic simulation of a kafkalite cluster (STYLE habit 13, TigerBeetle's
VOPR as the model): several brokers and the controller role over an in-memory network,
disk and ZooKeeper, on a virtual clock, driving the real core state machines, with the
guarantees of DESIGN section 7 checked after every step. Admin actions (reassignments,
their cancellation, partition removal: issue 9) are interleaved with the faults, and a
run ends by healing every fault and checking that everything asked of it finished. With
`SimConfig.offsets_partitions` the brokers also drive the group coordinator core
(group_driver.py) under offset-committing clients (group_clients.py): issue 10."""

from kafkalite.testing.sim.config import SimConfig
from kafkalite.testing.sim.runner import (
    SimResult,
    Simulation,
    SimulationFailure,
    config_for_seed,
    run_simulation,
)

__all__ = ["SimConfig", "SimResult", "Simulation", "SimulationFailure", "config_for_seed", "run_simulation"]
