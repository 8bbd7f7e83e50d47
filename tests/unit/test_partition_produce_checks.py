"""What a leader refuses from a producer before it reaches the log
(kafkalite.broker.partition.append_as_leader over a real log): batches whose records the
log cleaner could not reason about."""

from __future__ import annotations

import pytest

from kafkalite.broker.partition import Partition
from kafkalite.core.replica_state import LeaderAndIsrState
from kafkalite.log.config import POLICY_COMPACT, LogConfig
from kafkalite.log.log import Log
from kafkalite.log.records import Record, encode_batch
from kafkalite.protocol.errors import ErrorCode, KafkaliteError

COMPACTED = LogConfig(cleanup_policy=frozenset({POLICY_COMPACT}))


def _leader(tmp_path, config: LogConfig) -> Partition:
    plog = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    part = Partition("t", 0, 1, plog, 0)
    part.make_leader(LeaderAndIsrState(1, 1, (1,), 1, (1,)), 0)
    return part


def _batch(deltas: list[int], **kwargs) -> bytes:
    return encode_batch([Record(offset=d, timestamp=1_000, key=b"k%d" % i, value=b"v", headers=()) for i, d in enumerate(deltas)],
                        base_offset=0, **kwargs)


@pytest.mark.parametrize("deltas", [[0, 0, 2], [1, 0, 2], [0, 2, 2]])
def test_a_batch_whose_record_offsets_are_not_consecutive_is_refused_on_a_compacted_topic(tmp_path, deltas):
    """Its header passes (record count 3, last offset delta 2), but the cleaner's offset map
    would meet offsets out of order: every pass of the partition failed."""
    part = _leader(tmp_path, COMPACTED)
    with pytest.raises(KafkaliteError) as refused:
        part.append_as_leader(_batch(deltas), now_ms=1_000)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert part.leo == 0
    result, _ = part.append_as_leader(_batch([0, 1, 2]), now_ms=1_000)
    assert (result.first_offset, result.last_offset) == (0, 2)
