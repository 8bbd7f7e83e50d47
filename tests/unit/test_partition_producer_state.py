"""A partition's idempotent-producer table around truncation and leadership
(kafkalite.broker.partition), over real logs: the table never answers from records a
truncation removed, even when its rebuild at the leadership fails."""

from __future__ import annotations

import errno

import pytest

from kafkalite.broker.partition import Partition
from kafkalite.core.replica_state import LeaderAndIsrState
from kafkalite.log.config import LogConfig
from kafkalite.log.errors import LogDirError, LogDirFailure
from kafkalite.log.log import Log
from kafkalite.log.records import encode_batch
from kafkalite.protocol.errors import ErrorCode, KafkaliteError

PID = 77


def _batch(seq: int, offset: int = 0, epoch: int = 0) -> bytes:
    return encode_batch([(b"k", b"v%d" % seq, ())], base_offset=offset, partition_leader_epoch=epoch,
                        producer_id=PID, producer_epoch=0, base_sequence=seq)


def _follower(tmp_path) -> Partition:
    plog = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=0)
    part = Partition("t", 0, 2, plog, 0)
    part.make_follower(LeaderAndIsrState(1, 0, (1, 2), 0, (1, 2)), 0)
    return part


def test_a_truncated_batch_retried_at_a_new_leader_is_written_even_if_the_rebuild_failed(tmp_path, monkeypatch, caplog):
    part = _follower(tmp_path)
    for seq in range(4):  # the old leader's offsets 0-3, sequences 0-3
        part.append_as_follower(_batch(seq, offset=seq), 0)
    part.truncate_to(2)  # KIP-101: sequences 2 and 3 were never committed
    assert part.leo == 2
    real = part.log.iter_batch_headers

    def out_of_descriptors():
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(part.log, "iter_batch_headers", out_of_descriptors)
    assert part.make_leader(LeaderAndIsrState(2, 1, (2,), 1, (1, 2)), 0)  # the load fails: logged, not raised
    assert "not loaded at leadership" in caplog.text
    # The producer retries sequence 2: it is not in the log any more, so it must be written,
    # not answered as a duplicate of offsets the truncation removed. While the log cannot
    # be read the append fails (KAFKA_STORAGE_ERROR for the client, which retries)...
    with pytest.raises(LogDirError) as failed:
        part.append_as_leader(_batch(2), now_ms=0)
    assert not isinstance(failed.value, LogDirFailure)  # EMFILE: this request fails, the dir is fine
    assert part.leo == 2
    monkeypatch.setattr(part.log, "iter_batch_headers", real)
    # ...and once it can, the table is rebuilt from what is left and the retry appends.
    result, duplicate_of = part.append_as_leader(_batch(2), now_ms=0)
    assert duplicate_of is None and result.first_offset == 2
    result, duplicate_of = part.append_as_leader(_batch(2), now_ms=0)
    assert result is None and duplicate_of == (2, 2)  # now a true duplicate


def test_two_batches_for_one_partition_are_refused(tmp_path):
    part = _follower(tmp_path)
    part.make_leader(LeaderAndIsrState(2, 1, (2,), 1, (1, 2)), 0)
    with pytest.raises(KafkaliteError) as refused:
        part.append_as_leader(_batch(0) + _batch(1), now_ms=0)
    assert refused.value.code == ErrorCode.INVALID_RECORD
    assert part.leo == 0
