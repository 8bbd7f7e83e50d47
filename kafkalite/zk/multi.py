"""Batched ZooKeeper writes with `multi` (DESIGN.md section 2, section 6 "Broker failure").

ZooKeeper's multi is all-or-nothing and one request must fit in `jute.maxbuffer` (1 MiB by
default, for the request and for the reply). So a batch is split into transactions of at
most `transaction_bytes_max` estimated bytes and `transaction_ops_max` operations, and when
a transaction fails because some of its operations failed (a stale version, a missing or
existing znode) those operations are reported and the rest are committed again without
them. Every transaction can be fenced by the controller epoch: a `check` of
/controller_epoch at the version the controller wrote when elected, so a deposed
controller's writes fail as a whole (ControllerMovedError), as in Kafka.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Literal

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData, Transaction
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from kafkalite.zk import paths
from kafkalite.zk.errors import ControllerMovedError, ZkError, ZnodeTooLargeError
from kafkalite.zk.kazoo_errors import calls, translate

# Serialised size of one op beyond its path and data: multi header, op type, version,
# flags, ACL (world:anyone) and length prefixes. Generous on purpose: it is an estimate.
OP_OVERHEAD_BYTES = 64
# ZooKeeper's default jute.maxbuffer. One op bigger than this could never be written.
JUTE_MAXBUFFER_BYTES = 1024 * 1024
TRANSACTION_BYTES_MAX_DEFAULT = 512 * 1024
# Also bounds the reply: a setData result carries a ~70-byte stat per op.
TRANSACTION_OPS_MAX_DEFAULT = 1000

OpKind = Literal["create", "set", "delete"]


@dataclasses.dataclass(frozen=True)
class Op:
    """One write in a batch. `version` -1 means unconditional (create ignores it)."""

    kind: OpKind
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False

    @property
    def size_bytes(self) -> int:
        return write_size_bytes(self.path, self.data)


def write_size_bytes(path: str, data: bytes) -> int:
    """An estimate (generous) of one write's bytes on the wire to ZooKeeper."""
    return len(path.encode("utf-8")) + len(data) + OP_OVERHEAD_BYTES


def check_write_size(path: str, data: bytes) -> None:
    """ZnodeTooLargeError if one write could never be accepted: ZooKeeper closes the
    connection of a client that sends a packet over jute.maxbuffer (measured: a topic of
    3,000,000 partitions cost its broker the connection), so it is refused before."""
    size = write_size_bytes(path, data)
    if size > JUTE_MAXBUFFER_BYTES:
        raise ZnodeTooLargeError(path, size, JUTE_MAXBUFFER_BYTES)


# Per-path outcome: the new znode version (set: stat.version, create: 0), None for a
# delete, or the typed error of that op alone.
OpResult = int | None | ZkError


def chunk_ops(ops: Sequence[Op], bytes_max: int, ops_max: int) -> Iterator[list[Op]]:
    """Consecutive chunks with at most `ops_max` ops and `bytes_max` estimated bytes each."""
    assert bytes_max > 0
    assert ops_max > 0
    chunk: list[Op] = []
    chunk_bytes = 0
    for op in ops:
        size = op.size_bytes
        if size > min(bytes_max, JUTE_MAXBUFFER_BYTES):
            raise ZnodeTooLargeError(op.path, size, min(bytes_max, JUTE_MAXBUFFER_BYTES))
        if chunk and (len(chunk) >= ops_max or chunk_bytes + size > bytes_max):
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk.append(op)
        chunk_bytes += size
    if chunk:
        yield chunk


class BatchWriter:
    """Commits lists of Ops through kazoo transactions, split and retried as described above."""

    def __init__(
        self,
        client: KazooClient,
        *,
        transaction_bytes_max: int = TRANSACTION_BYTES_MAX_DEFAULT,
        transaction_ops_max: int = TRANSACTION_OPS_MAX_DEFAULT,
        request_timeout_s: float = 30.0,
    ) -> None:
        assert 0 < transaction_bytes_max < JUTE_MAXBUFFER_BYTES
        assert transaction_ops_max > 1
        self.client = client
        self.transaction_bytes_max = transaction_bytes_max
        self.transaction_ops_max = transaction_ops_max
        self.request_timeout_s = request_timeout_s
        self.transactions_committed = 0  # for tests and metrics: how many multis were sent

    def run(self, ops: Sequence[Op], controller_epoch_zk_version: int | None = None) -> dict[str, OpResult]:
        """Commit `ops`; per-path results in input order. Raises ControllerMovedError when
        the fence fails (earlier chunks may have committed), ZkConnectionLossError /
        ZkSessionExpiredError when a transaction's outcome is unknown."""
        seen: set[str] = set()
        for op in ops:
            if op.path in seen:
                raise ValueError(f"path {op.path} appears twice in one batch")
            seen.add(op.path)
        results: dict[str, OpResult] = {}
        # One op slot is the fence's.
        ops_max = self.transaction_ops_max - (1 if controller_epoch_zk_version is not None else 0)
        # Pipelined: every chunk's multi is sent before the first answer is awaited (one
        # session's requests are applied in order), so 10,000 partition states cost about
        # one round trip plus the server's work, not 20 sequential round trips. A chunk
        # with a failed op is then retried without it, one multi at a time.
        in_flight = [(chunk, self._submit(chunk, controller_epoch_zk_version))
                     for chunk in chunk_ops(ops, self.transaction_bytes_max, ops_max)]
        for chunk, async_result in in_flight:
            outcome = self._collect(chunk, async_result, controller_epoch_zk_version)
            results.update(self._settle(chunk, outcome, controller_epoch_zk_version))
        return {op.path: results[op.path] for op in ops}

    def _settle(self, chunk: list[Op], outcome: list, fence_version: int | None) -> dict[str, OpResult]:
        results: dict[str, OpResult] = {}
        pending = chunk
        # Each failed round removes at least one op, so this ends within len(chunk) rounds.
        while True:
            failures = {
                index: result
                for index, result in enumerate(outcome)
                if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency))
            }
            if not failures:
                for op, result in zip(pending, outcome):
                    results[op.path] = _success_value(op, result)
                return results
            for index, error in failures.items():
                op = pending[index]
                results[op.path] = translate(error, op.path, op.version)
            pending = [op for index, op in enumerate(pending) if index not in failures]
            if not pending:
                return results
            outcome = self._commit(pending, fence_version)

    def _commit(self, ops: list[Op], fence_version: int | None) -> list:
        """One multi; the results aligned with `ops` (the fence's result removed)."""
        return self._collect(ops, self._submit(ops, fence_version), fence_version)

    def _submit(self, ops: list[Op], fence_version: int | None):
        """Send one multi. Built from kazoo's request types directly rather than through
        `client.transaction()`, whose per-op path normalisation cost more Python time than
        ZooKeeper took to apply 10,000 creates; the paths are ours, absolute and normal."""
        client = self.client
        chroot = client.chroot or ""
        acl = client.default_acl or OPEN_ACL_UNSAFE
        requests: list = []
        if fence_version is not None:
            requests.append(CheckVersion(chroot + paths.controller_epoch_path(), fence_version))
        for op in ops:
            path = chroot + op.path
            if op.kind == "create":
                requests.append(Create(path, op.data, acl, 1 if op.ephemeral else 0))
            elif op.kind == "set":
                requests.append(SetData(path, op.data, op.version))
            else:
                requests.append(Delete(path, op.version))
        with calls(ops[0].path):
            async_result = client.handler.async_result()
            client._call(Transaction(requests), async_result)
            return async_result

    def _collect(self, ops: list[Op], async_result, fence_version: int | None) -> list:
        with calls(ops[0].path):
            outcome = async_result.get(timeout=self.request_timeout_s)
        self.transactions_committed += 1
        if fence_version is not None:
            fence_result, outcome = outcome[0], outcome[1:]
            if isinstance(fence_result, (BadVersionError, NoNodeError)):
                raise ControllerMovedError(fence_version)
        assert len(outcome) == len(ops)
        return outcome


def _success_value(op: Op, result: object) -> int | None:
    if op.kind == "set":
        assert isinstance(result, ZnodeStat)
        return result.version
    if op.kind == "create":
        return 0
    return None


__all__ = [
    "BatchWriter",
    "Op",
    "OpResult",
    "chunk_ops",
]
