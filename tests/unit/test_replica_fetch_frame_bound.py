"""A replica fetch answer always fits in one inter-broker frame: the leader clamps the
follower's max_bytes and partition_max_bytes, whatever it asked (found by review: a
follower asking 300 MiB got answers over the 256 MiB frame bound, refused them, and sent
the same fetch again forever)."""

from __future__ import annotations

from types import SimpleNamespace

from kafkalite.broker.inter_broker import InterBrokerHandlers
from kafkalite.rpc.framing import RECORD_BATCH_BYTES_MAX, REPLICA_FETCH_RESPONSE_BYTES_MAX, RPC_FRAME_BYTES_MAX


class RecordingReplicaManager:
    """What _ReplicaFetch needs of the replica manager; remembers the budgets it was given."""

    def __init__(self) -> None:
        self.budgets: list[tuple[int, int]] = []
        self.fetch_sessions = SimpleNamespace(start=lambda replica_id, changed, now: SimpleNamespace(session_id=5, epoch=1))

    async def fetch_in_session(self, session, to_read, *, max_wait_ms, min_bytes, max_bytes, partition_max_bytes,
                               follower_broker_epoch):
        self.budgets.append((max_bytes, partition_max_bytes))
        return []


def _fetch(max_bytes: int, partition_max_bytes: int) -> dict:
    return {"api": "ReplicaFetch", "correlation_id": 1, "sender": 2, "broker_epoch": 10, "max_wait_ms": 0,
            "min_bytes": 1, "max_bytes": max_bytes, "partition_max_bytes": partition_max_bytes,
            "session": [0, 0], "partitions": [["t", 0, 0, 0, -1, 0]], "forgotten": []}


async def test_the_leader_clamps_a_follower_fetch_budget_so_the_answer_fits_in_a_frame():
    rm = RecordingReplicaManager()
    broker = SimpleNamespace(replica_manager=rm, metadata_cache=SimpleNamespace(brokers={}))
    handlers = InterBrokerHandlers(broker)  # type: ignore[arg-type]
    answer, _ = await handlers.handle(_fetch(300 << 20, 300 << 20), memoryview(b""))
    assert answer["error"] == 0
    answer, _ = await handlers.handle(_fetch(10 << 20, 1 << 20), memoryview(b""))
    assert answer["error"] == 0
    assert rm.budgets == [(REPLICA_FETCH_RESPONSE_BYTES_MAX, REPLICA_FETCH_RESPONSE_BYTES_MAX), (10 << 20, 1 << 20)]
    # Records: the budget plus at most one batch served whole past it; the rest is the header's.
    assert REPLICA_FETCH_RESPONSE_BYTES_MAX + RECORD_BATCH_BYTES_MAX <= RPC_FRAME_BYTES_MAX - (32 << 20)
