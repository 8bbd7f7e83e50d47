"""Random fault schedule: crashes (kill -9), restarts, pauses (SIGSTOP past the session
timeout, then resume as a zombie), network partitions (broker pairs, broker <-> ZK, full
isolation), ZK session expiry, controlled shutdowns, controller kills.

Admin actions (issue 9) are drawn with their own probability per step, interleaved with
the faults: "reassign" (a random partition to a random RF-sized set of brokers, written to
/admin/reassign_partitions when no reassignment is in progress, as the CLI refuses a
second), "cancel_reassignment" (the admin znode deleted) and "remove_partition" (the
highest-numbered partition, never the last one, through /admin/partitions_remove); with
`admin_add_partition`, also "add_partition" (the next number, up to one more than the topic
started with, through /admin/partitions_add: a removed number comes back as a new
partition; off by default, see SimConfig). They are not failures: they do not count as a
broker down and are drawn even while a crash victim recovers.

At most `down_brokers_max` brokers are down (crashed, paused, stopped, isolated) at once.
In flush mode "random" a crash loses unflushed data, so a broker is only crashed when every
other replica of its partitions is running and in the ISR and no earlier crash victim is
still catching up, and nothing else fails until it is back in every ISR: the failure
budget of DESIGN 7.1 (min.insync.replicas - 1 = 1 at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkalite.testing.sim import zk as zkm
from kafkalite.testing.sim.world import ZK

if TYPE_CHECKING:
    from kafkalite.testing.sim.runner import Simulation

KINDS = (
    "crash", "pause", "isolate", "cut_pair", "cut_zk", "expire_session",
    "controlled_shutdown", "crash_controller", "pause_controller",
)
# Weighted by repetition: mostly moves, a cancel now and then, a removal about once a run.
ADMIN_KINDS = ("reassign",) * 6 + ("cancel_reassignment",) * 3 + ("remove_partition",)
ADMIN_KINDS_WITH_ADD = ADMIN_KINDS + ("add_partition",)


class FaultInjector:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.down: set[int] = set()  # brokers currently under a "down" fault
        self.recovering: set[int] = set()  # crashed with data loss, not yet back in every ISR
        self.injected = 0
        self.admin_kinds = ADMIN_KINDS_WITH_ADD if self.cfg.admin_add_partition else ADMIN_KINDS
        self.admin_actions: dict[str, int] = {kind: 0 for kind in self.admin_kinds}

    def maybe_inject(self) -> None:
        rng = self.sim.rng
        self._update_recovering()
        if self.cfg.admin_probability and rng.random() < self.cfg.admin_probability:
            getattr(self, f"_{rng.choice(self.admin_kinds)}")()
        if rng.random() >= self.cfg.fault_probability:
            return
        kind = rng.choice(KINDS)
        if self.recovering:
            return  # flush mode "random": a crash victim may lack acked data; no 2nd failure
        brokers = sorted(self.sim.brokers)
        if kind in ("crash_controller", "pause_controller"):
            controller = self.sim.zk.controller_id()
            if controller < 0:
                return
            target = controller
            kind = kind.split("_")[0]
        else:
            target = rng.choice(brokers)
        duration = rng.randint(30, self.cfg.fault_duration_ms_max)
        getattr(self, f"_{kind}")(target, duration)

    def _can_go_down(self, broker: int) -> bool:
        return broker not in self.down and len(self.down) < self.cfg.down_brokers_max

    def _down_for(self, broker: int, duration: int, label: str, recover: callable) -> None:
        self.injected += 1
        self.down.add(broker)
        self.sim.trace_note(f"FAULT {label} b{broker} for {duration} ms")

        def up() -> None:
            self.down.discard(broker)
            self.sim.trace_note(f"RECOVER {label} b{broker}")
            recover()

        self.sim.sched.after(duration, f"recover {label} b{broker}", up)

    # ------------------------------------------------------------ kinds

    def _crash(self, broker: int, duration: int) -> None:
        if not self._can_go_down(broker) or not self.sim.brokers[broker].running:
            return
        if self.cfg.flush_mode == "random" and not self._crash_within_budget(broker):
            return
        self.sim.crash(broker)
        if self.cfg.flush_mode == "random":
            self.recovering.add(broker)
        self._down_for(broker, duration, "crash", lambda: self.sim.restart(broker))

    def _pause(self, broker: int, duration: int) -> None:
        if not self._can_go_down(broker) or not self.sim.brokers[broker].running:
            return
        self.sim.pause(broker)
        self._down_for(broker, duration, "pause", lambda: self.sim.resume(broker))

    def _isolate(self, broker: int, duration: int) -> None:
        if not self._can_go_down(broker):
            return
        others = [b for b in self.sim.brokers if b != broker] + [ZK]
        for other in others:
            self.sim.network.cut_link(broker, other)

        def heal() -> None:
            for other in others:
                self.sim.network.heal_link(broker, other)

        self._down_for(broker, duration, "isolate", heal)

    def _cut_pair(self, broker: int, duration: int) -> None:
        others = [b for b in sorted(self.sim.brokers) if b != broker]
        other = self.sim.rng.choice(others)
        self.injected += 1
        self.sim.network.cut_link(broker, other)
        self.sim.trace_note(f"FAULT cut b{broker}<->b{other} for {duration} ms")
        self.sim.sched.after(duration, f"heal b{broker}<->b{other}", lambda: self.sim.network.heal_link(broker, other))

    def _cut_zk(self, broker: int, duration: int) -> None:
        if not self._can_go_down(broker):
            return
        self.sim.network.cut_link(broker, ZK)
        self._down_for(broker, duration, "cut-zk", lambda: self.sim.network.heal_link(broker, ZK))

    def _expire_session(self, broker: int, duration: int) -> None:
        sid = self.sim.brokers[broker].sid
        if sid is None or not self.sim.zk.session_alive(sid):
            return
        self.injected += 1
        self.sim.trace_note(f"FAULT expire ZK session of b{broker}")
        self.sim.zk.expire(sid)

    def _controlled_shutdown(self, broker: int, duration: int) -> None:
        b = self.sim.brokers[broker]
        if not self._can_go_down(broker) or not b.running or b.shutdown_attempts:
            return
        self.injected += 1
        self.down.add(broker)
        self.sim.trace_note(f"FAULT controlled shutdown b{broker}, restart {duration} ms after it stops")
        self.sim.restart_delay_after_stop[broker] = duration
        b.begin_controlled_shutdown()

    def on_stopped_restarted(self, broker: int) -> None:
        self.down.discard(broker)

    # ------------------------------------------------------------ admin actions

    def _reassign(self) -> None:
        rng, zk = self.sim.rng, self.sim.zk
        tp = rng.choice(sorted(self.sim.assignments))
        target = rng.sample(sorted(self.sim.brokers), self.cfg.replication_factor)
        if zk.get(zkm.REASSIGN) is not None:
            return  # "a partition reassignment is already in progress"
        self.admin_actions["reassign"] += 1
        self.sim.reassign({tp: tuple(target)})

    def _cancel_reassignment(self) -> None:
        if self.sim.zk.get(zkm.REASSIGN) is None:
            return
        self.admin_actions["cancel_reassignment"] += 1
        self.sim.cancel_reassignment()

    def _remove_partition(self) -> None:
        partitions = self.sim.data_partitions  # never __consumer_offsets
        if len(partitions) < 2:
            return  # a topic keeps at least one partition
        self.admin_actions["remove_partition"] += 1
        self.sim.remove_partition(partitions[-1])

    def _add_partition(self) -> None:
        partitions = self.sim.data_partitions
        if len(partitions) > self.cfg.partitions:
            return
        t, p = partitions[-1][0], partitions[-1][1] + 1
        n = self.cfg.brokers
        self.admin_actions["add_partition"] += 1
        self.sim.add_partition((t, p), tuple((p + j) % n + 1 for j in range(self.cfg.replication_factor)))

    # ------------------------------------------------------------ failure budget

    def _crash_within_budget(self, broker: int) -> bool:
        """Every other replica of its partitions running and in the ISR; a replica being
        added by a reassignment holds nothing acknowledged until it joins the ISR, so it
        does not count."""
        if self.recovering - {broker}:
            return False
        adding = {(t, p): a for t in self.sim.zk.topics() for p, (a, _) in self.sim.zk.moving(t).items()}
        for tp, replicas in self.sim.assignments.items():
            if broker not in replicas:
                continue
            node = self.sim.zk.get(zkm.state_path(tp))
            isr = node.data["isr"] if node is not None else []
            for other in replicas:
                ob = self.sim.brokers[other]
                if other in adding.get(tp, ()) and other not in isr:
                    continue
                if other != broker and (other not in isr or not ob.running or ob.paused):
                    return False
        return True

    def _update_recovering(self) -> None:
        for broker in sorted(self.recovering):
            b = self.sim.brokers[broker]
            if not b.running:
                continue
            back = True
            for tp, replicas in self.sim.assignments.items():
                node = self.sim.zk.get(zkm.state_path(tp))
                if broker not in replicas:
                    continue
                rep = b.replicas.get(tp)
                if node is None or broker not in node.data["isr"] or rep is None:
                    back = False
                elif rep.state.leader_epoch != node.data["leader_epoch"]:
                    back = False  # the ISR entry predates the crash; no LeaderAndIsr yet
            if back and b.broker_epoch >= 0:
                self.recovering.discard(broker)
