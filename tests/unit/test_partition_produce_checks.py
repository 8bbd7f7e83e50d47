"""What a leader refuses from a producer before it reaches the log
(kafkalite.broker.partition.append_as_leader over a real log): batches whose records the
log cleaner could not reason about."""

from __future__ import annotations

import pytest

from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for
from kafkalite.broker.partition import Partition
from kafkalite.core.replica_state import LeaderAndIsrState
from kafkalite.log import batch_filter
from kafkalite.log.config import POLICY_COMPACT, LogConfig
from kafkalite.log.log import Log
from kafkalite.log.records import H_RECORD_COUNT, HEADER_STRUCT, Record, encode_batch
from kafkalite.protocol.errors import ErrorCode

COMPACTED = LogConfig(cleanup_policy=frozenset({POLICY_COMPACT}))


def _leader(tmp_path, config: LogConfig) -> Partition:
    plog = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    part = Partition("t", 0, 1, plog, 0)
    part.make_leader(LeaderAndIsrState(1, 1, (1,), 1, (1,)), 0)
    return part


def _refusal(part: Partition, batch: bytes) -> int:
    """The wire code a produce of `batch` is answered with (broker.errors' one table)."""
    with pytest.raises(OPERATING_ERRORS) as refused:
        part.append_as_leader(batch, now_ms=1_000)
    return error_code_for(refused.value)


def _batch(deltas: list[int], **kwargs) -> bytes:
    return encode_batch([Record(offset=d, timestamp=1_000, key=b"k%d" % i, value=b"v", headers=()) for i, d in enumerate(deltas)],
                        base_offset=0, **kwargs)


@pytest.mark.parametrize("deltas", [[0, 0, 2], [1, 0, 2], [0, 2, 2]])
def test_a_batch_whose_record_offsets_are_not_consecutive_is_refused_on_a_compacted_topic(tmp_path, deltas):
    """Its header passes (record count 3, last offset delta 2), but the cleaner's offset map
    would meet offsets out of order: every pass of the partition failed."""
    part = _leader(tmp_path, COMPACTED)
    assert _refusal(part, _batch(deltas)) == ErrorCode.INVALID_RECORD
    assert part.leo == 0
    result, _ = part.append_as_leader(_batch([0, 1, 2]), now_ms=1_000)
    assert (result.first_offset, result.last_offset) == (0, 2)


def _with_delete_horizon(batch: bytes, horizon_ms: int) -> bytes:
    """The batch as a client could send it with attribute bit 6 set (the cleaner's rebuild
    writes it exactly so)."""
    fields = HEADER_STRUCT.unpack_from(batch)
    data = batch_filter.record_data(batch)
    return batch_filter.rebuild_batch(fields, data, batch_filter.record_spans(data, fields[H_RECORD_COUNT]), horizon_ms)


@pytest.mark.parametrize("config", [COMPACTED, LogConfig()])
def test_a_batch_carrying_a_delete_horizon_is_refused(tmp_path, config):
    """The cleaner drops a tombstone once its batch's horizon has passed: a horizon the
    producer set would drop its tombstones at the first cleaning, giving consumers none of
    delete.retention.ms to see them."""
    part = _leader(tmp_path, config)
    tombstones = _with_delete_horizon(encode_batch([(b"a", None, ()), (b"b", None, ())], base_timestamp=1_000), 1)
    assert batch_filter.delete_horizon_ms(HEADER_STRUCT.unpack_from(tombstones)) == 1
    assert _refusal(part, tombstones) == ErrorCode.INVALID_RECORD
    assert part.leo == 0
