"""The simulation: brokers, controller role, ZooKeeper, network and clients on one virtual
clock and one seeded random.Random; the guarantees checked after every step.

    result = run_simulation(seed=7, steps=300, config=SimConfig())

On a violation `SimulationFailure` is raised with the seed, the violations, the last
events and the command that replays the run exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from kafkalite.testing.sim.broker import SimBroker
from kafkalite.testing.sim.checker import Checker
from kafkalite.testing.sim.clients import Clients
from kafkalite.testing.sim.config import SimConfig
from kafkalite.testing.sim.faults import FaultInjector
from kafkalite.testing.sim.world import CLIENT, Message, Network, Scheduler, Trace
from kafkalite.testing.sim.zk import ZkModel

TOPIC = "t"
ZK_EXPIRY_CHECK_MS = 10


class SimulationFailure(AssertionError):
    def __init__(self, seed: int, step: int, violations: list[str], recent: list[str]) -> None:
        self.seed = seed
        self.step = step
        self.violations = list(violations)
        lines = [
            f"simulation seed {seed} violated the guarantees at step {step}:",
            *[f"  - {v}" for v in violations[:10]],
            f"last {len(recent)} events:",
            *[f"    {line}" for line in recent],
            f"replay: pytest tests/sim -k replay --sim-seed {seed}",
        ]
        super().__init__("\n".join(lines))


@dataclass
class SimResult:
    seed: int
    steps: int
    virtual_ms: int
    trace_digest: int
    trace_events: int
    produced: int
    acked: int
    consumed: int
    faults: int
    committed: dict[tuple[str, int], int] = field(default_factory=dict)


class Simulation:
    def __init__(self, seed: int, cfg: SimConfig | None = None, *, random_faults: bool = True) -> None:
        self.seed = seed
        self.cfg = cfg or SimConfig()
        self.rng = random.Random(seed)
        self.sched = Scheduler()
        self.trace = Trace()
        self.network = Network(self, self.rng)
        self.zk = ZkModel(self.cfg.zk_session_timeout_ms)
        n, rf = self.cfg.brokers, self.cfg.replication_factor
        self.assignments = {
            (TOPIC, p): tuple((p + j) % n + 1 for j in range(rf)) for p in range(self.cfg.partitions)
        }
        self.brokers = {b: SimBroker(self, b) for b in range(1, n + 1)}
        self.checker = Checker(self)
        self.clients = Clients(self)
        self.faults = FaultInjector(self)
        self.random_faults = random_faults
        self.loss_permitted = False
        self.restart_delay_after_stop: dict[int, int] = {}
        self.steps = 0
        self._ids = 0
        for broker in self.brokers.values():
            broker.start()
        self.clients.start()
        self.sched.after(ZK_EXPIRY_CHECK_MS, "zk expiry", self._zk_expiry)

    # ------------------------------------------------------------ plumbing

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def trace_note(self, text: str) -> None:
        self.trace.add(self.sched.now_ms, "  " + text)

    def incarnation_of(self, node: int) -> int:
        return self.brokers[node].incarnation if node in self.brokers else 0

    def running_brokers(self) -> list[SimBroker]:
        return [b for _, b in sorted(self.brokers.items()) if b.running]

    def node_after(self, broker_id: int, delay_ms: int, label: str, fn: Callable[[], None]) -> None:
        """A timer owned by one broker incarnation: dropped if it crashed, held while paused."""
        broker = self.brokers[broker_id]
        incarnation = broker.incarnation

        def run() -> None:
            if broker.incarnation != incarnation or not broker.running:
                return
            if broker.paused:
                broker.deferred.append((label, run))
                return
            fn()

        self.sched.after(delay_ms, f"b{broker_id} {label}", run)

    def deliver(self, msg: Message, dst_incarnation: int) -> None:
        if msg.dst == CLIENT:
            self.clients.on_message(msg)
            return
        broker = self.brokers[msg.dst]
        if broker.incarnation != dst_incarnation or not broker.running:
            return
        if broker.paused:
            broker.deferred.append((f"deliver {msg.kind}", lambda: self.deliver(msg, dst_incarnation)))
            return
        broker.on_message(msg)

    def _zk_expiry(self) -> None:
        for session in self.zk.expire_due(self.sched.now_ms):
            self.trace_note(f"ZK expired session {session.sid} of b{session.broker}")
        self.sched.after(ZK_EXPIRY_CHECK_MS, "zk expiry", self._zk_expiry)

    # ------------------------------------------------------------ faults

    def crash(self, broker_id: int) -> None:
        self.trace_note(f"CRASH b{broker_id}")
        self.brokers[broker_id].crash()

    def restart(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.running:
            return
        self.trace_note(f"RESTART b{broker_id}")
        broker.incarnation += 1
        broker.start()

    def pause(self, broker_id: int) -> None:
        self.trace_note(f"PAUSE b{broker_id}")
        self.brokers[broker_id].paused = True

    def resume(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if not broker.running or not broker.paused:
            return
        self.trace_note(f"RESUME b{broker_id} ({len(broker.deferred)} deferred events)")
        broker.paused = False
        deferred, broker.deferred = broker.deferred, []
        for label, run in deferred:
            self.sched.after(0, f"b{broker_id} {label} (after pause)", run)

    def on_broker_stopped(self, broker: SimBroker) -> None:
        delay = self.restart_delay_after_stop.pop(broker.id, None)
        if delay is None:
            return

        def back() -> None:
            self.faults.on_stopped_restarted(broker.id)
            self.restart(broker.id)

        self.sched.after(delay, f"restart b{broker.id} after shutdown", back)

    # ------------------------------------------------------------ running

    def step(self) -> None:
        if self.random_faults:
            self.faults.maybe_inject()
        popped = self.sched.pop()
        assert popped is not None  # ticks keep the heap non-empty
        label, fn = popped
        self.trace.add(self.sched.now_ms, label)
        fn()
        self.steps += 1
        self.checker.check_step()
        if self.checker.violations:
            raise SimulationFailure(self.seed, self.steps, self.checker.violations, list(self.trace.recent))

    def run(self, steps: int) -> Simulation:
        for _ in range(steps):
            self.step()
        return self

    def run_for(self, duration_ms: int) -> Simulation:
        until = self.sched.now_ms + duration_ms
        while self.sched.now_ms < until:
            self.step()
        return self

    def run_until(self, condition: Callable[[], bool], timeout_ms: int = 5_000) -> Simulation:
        until = self.sched.now_ms + timeout_ms
        while not condition():
            if self.sched.now_ms >= until:
                raise AssertionError(f"seed {self.seed}: condition not reached within {timeout_ms} ms")
            self.step()
        return self

    def result(self) -> SimResult:
        return SimResult(
            seed=self.seed, steps=self.steps, virtual_ms=self.sched.now_ms,
            trace_digest=self.trace.digest, trace_events=self.trace.count,
            produced=self.clients.next_payload - 1, acked=self.checker.acks,
            consumed=self.checker.consumed, faults=self.faults.injected,
            committed={tp: len(ledger) for tp, ledger in self.checker.committed.items()},
        )


def run_simulation(seed: int, steps: int, config: SimConfig | None = None) -> SimResult:
    """Run `steps` events of a random schedule; raise SimulationFailure on a violation."""
    return Simulation(seed, config).run(steps).result()


def config_for_seed(seed: int, base: SimConfig | None = None) -> SimConfig:
    """The sweep's configuration of a seed: odd seeds use random flush points (crash loses
    the unflushed suffix, within the failure budget), even seeds fsync every append."""
    import dataclasses

    base = base or SimConfig()
    return dataclasses.replace(base, flush_mode="random" if seed % 2 else "always")
