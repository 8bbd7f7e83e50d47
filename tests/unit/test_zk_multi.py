"""Splitting a batch of ZooKeeper writes into transactions that stay under jute.maxbuffer."""

from __future__ import annotations

import pytest

from kafkalite.zk.errors import ZnodeTooLargeError
from kafkalite.zk.multi import JUTE_MAXBUFFER_BYTES, OP_OVERHEAD_BYTES, Op, check_write_size, chunk_ops


def _ops(count: int, data_bytes: int) -> list[Op]:
    return [Op("set", f"/p{i:05d}", b"x" * data_bytes, 0) for i in range(count)]


def test_chunks_respect_the_op_bound_and_keep_order():
    ops = _ops(2500, 10)
    chunks = list(chunk_ops(ops, bytes_max=10**6, ops_max=1000))
    assert [len(c) for c in chunks] == [1000, 1000, 500]
    assert [op for c in chunks for op in c] == ops


def test_chunks_respect_the_byte_bound():
    ops = _ops(100, 1000)
    bytes_max = 10_000
    chunks = list(chunk_ops(ops, bytes_max=bytes_max, ops_max=1000))
    assert all(sum(op.size_bytes for op in c) <= bytes_max for c in chunks)
    per_op = 1000 + len("/p00000") + OP_OVERHEAD_BYTES
    assert len(chunks[0]) == bytes_max // per_op
    assert sum(len(c) for c in chunks) == 100


def test_an_op_larger_than_a_transaction_is_refused():
    with pytest.raises(ZnodeTooLargeError, match="/p00000"):
        list(chunk_ops(_ops(1, JUTE_MAXBUFFER_BYTES), bytes_max=512 * 1024, ops_max=10))


def test_one_write_over_jute_maxbuffer_is_refused_before_it_is_sent():
    check_write_size("/brokers/topics/t", b"x" * (JUTE_MAXBUFFER_BYTES - 1000))
    with pytest.raises(ZnodeTooLargeError, match="/brokers/topics/t"):
        check_write_size("/brokers/topics/t", b"x" * JUTE_MAXBUFFER_BYTES)


def test_empty_batch_has_no_chunks():
    assert list(chunk_ops([], bytes_max=100, ops_max=1)) == []
