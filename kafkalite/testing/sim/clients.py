"""Producer and consumer clients (node 0). Metadata (who leads) is read straight from the
ZooKeeper model: clients in the real system learn it from UpdateMetadata with a delay,
which only adds NOT_LEADER retries, not new safety cases.

The partitions are those the topic znode lists (`sim.assignments`): a removed partition is
no longer picked. An UNKNOWN_TOPIC_OR_PARTITION answer makes a client look again (a
metadata refresh): if the partition is gone from the topic, the client forgets it (its
consumer position goes); if it is still listed (the broker asked had just lost its replica
to a reassignment), it is an ordinary retriable error."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalite.core.codes import ErrorCode
from kafkalite.testing.sim import zk as zkm
from kafkalite.testing.sim.world import CLIENT, Message

if TYPE_CHECKING:
    from kafkalite.testing.sim.runner import Simulation

TP = tuple[str, int]


class Clients:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.next_payload = 1
        self.produce_inflight = 0
        self.positions: dict[TP, int] = {tp: 0 for tp in sim.data_partitions}
        self.pending: dict[int, Callable[[dict[str, Any] | None], None]] = {}
        self.acked_by_client: dict[TP, dict[int, int]] = {tp: {} for tp in sim.data_partitions}
        self.answers: dict[int, int] = {}  # payload -> error code of its produce answer (-1: none came)
        self.gone: dict[TP, int] = {}  # partitions found removed -> UNKNOWN_TOPIC_OR_PARTITION answers then
        self.producing = True
        self.consuming = True

    def start(self) -> None:
        self.sim.sched.after(1, "client produce", self._produce_tick)
        self.sim.sched.after(1, "client consume", self._consume_tick)

    def _leader(self, tp: TP) -> int:
        node = self.sim.zk.get(zkm.state_path(tp))
        return -1 if node is None else node.data["leader"]

    def rpc(self, dst: int, kind: str, body: dict[str, Any], timeout_ms: int,
             on_response: Callable[[dict[str, Any] | None], None]) -> None:
        rpc_id = self.sim.next_id()
        self.pending[rpc_id] = on_response
        self.sim.network.send(Message(CLIENT, dst, kind, body, rpc_id))

        def expire() -> None:
            callback = self.pending.pop(rpc_id, None)
            if callback is not None:
                callback(None)

        self.sim.sched.after(timeout_ms, f"client timeout {kind}", expire)

    def on_message(self, msg: Message) -> None:
        callback = self.pending.pop(msg.rpc_id, None)
        if callback is not None:
            callback(msg.body)

    # ------------------------------------------------------------ producer

    def _produce_tick(self) -> None:
        rng = self.sim.rng
        if self.producing and self.produce_inflight < self.cfg.produce_inflight_max:
            tp = rng.choice(self.sim.data_partitions)
            leader = self._leader(tp)
            if leader >= 0:
                self.produce(tp, leader)
        self.sim.sched.after(rng.randint(1, self.cfg.produce_interval_ms_max), "client produce", self._produce_tick)

    def produce(self, tp: TP, leader: int) -> int:
        payload = self.next_payload
        self.next_payload += 1
        self.produce_inflight += 1
        self.sim.checker.on_produce_sent(tp, payload)

        def on_response(resp: dict[str, Any] | None) -> None:
            self.produce_inflight -= 1
            self.answers[payload] = -1 if resp is None else resp["error"]
            if resp is not None and resp["error"] == 0:
                self.acked_by_client.setdefault(tp, {})[resp["offset"]] = payload
            elif resp is not None and resp["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._maybe_gone(tp)

        timeout = self.cfg.produce_timeout_ms + 4 * self.cfg.net_delay_ms_max
        self.rpc(leader, "Produce", {"tp": tp, "payload": payload, "acks": -1}, timeout, on_response)
        return payload

    # ------------------------------------------------------------ consumer

    def _consume_tick(self) -> None:
        rng = self.sim.rng
        for tp in [tp for tp in self.positions if tp not in self.sim.assignments]:
            del self.positions[tp]  # removed: metadata no longer lists it
        if self.consuming:
            tp = rng.choice(self.sim.data_partitions)
            leader = self._leader(tp)
            if leader >= 0:
                self._fetch(tp, leader)
        self.sim.sched.after(rng.randint(1, self.cfg.consume_interval_ms_max), "client consume", self._consume_tick)

    def _fetch(self, tp: TP, leader: int) -> None:
        position = self.positions.setdefault(tp, 0)

        def on_response(resp: dict[str, Any] | None) -> None:
            if resp is None or self.positions.get(tp) != position:
                return
            if resp["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._maybe_gone(tp)
                return
            if resp["error"] == ErrorCode.OFFSET_OUT_OF_RANGE:
                self.sim.checker.on_consumer_out_of_range(tp, position, leader, resp["leo"])
                return
            if resp["error"] != 0:
                return
            records = resp["records"]
            self.sim.checker.on_consumed(tp, position, records)
            self.positions[tp] = position + len(records)

        self.rpc(leader, "Fetch", {"tp": tp, "offset": position}, self.cfg.request_timeout_ms, on_response)

    def _maybe_gone(self, tp: TP) -> None:
        """UNKNOWN_TOPIC_OR_PARTITION: gone if the topic no longer lists it (a metadata
        refresh), else retriable."""
        if tp in self.sim.assignments:
            return
        self.gone[tp] = self.gone.get(tp, 0) + 1
        self.positions.pop(tp, None)
