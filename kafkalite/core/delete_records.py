"""DeleteRecords (KIP-107): the leader's decision and the delayed operation behind its acks.

Kafka's ReplicaManager.deleteRecords and DelayedDeleteRecords, kept pure:
- `decide_log_start` turns a request's offset into the log start the leader moves to, or
  raises the typed error the partition is answered with;
- `DelayedDeleteRecords` completes a partition once its low watermark (the least log start
  over the ISR, the leader's included: PartitionReplicaState.low_watermark) has reached that
  log start, i.e. every in-sync follower followed it through the replica fetch and deleted
  what lies below; a partition that loses its leadership or its replica meanwhile gets the
  error Kafka answers; expiry (the request's timeout_ms) answers REQUEST_TIMED_OUT with the
  low watermark reached so far.
The shell moves the log start, parks the operation in a kafkalite.core.purgatory.Purgatory
and wakes it when a follower's log start or a role changes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kafkalite.core.codes import ErrorCode, NotLeaderOrFollowerError, OffsetOutOfRangeError, PolicyViolationError

HIGH_WATERMARK = -1  # a request's offset -1 means "everything below the HW" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK)
LOW_WATERMARK_UNKNOWN = -1


def decide_log_start(tp: tuple[str, int], requested_offset: int, *, is_leader: bool, hw: int, deletion_allowed: bool = True) -> int:
    """The log start a DeleteRecords asks of this replica: the request's offset, or the HW for
    -1. Only the leader moves it (followers follow it); never above the HW, whose records
    some replica may not hold yet; never on a topic whose cleanup.policy lacks "delete"
    (`deletion_allowed` False: POLICY_VIOLATION, as Kafka's deleteRecordsOnLeader). An
    offset at or below the current log start asks for nothing new and succeeds once the
    low watermark is there (as Kafka answers it)."""
    assert hw >= 0
    if not is_leader:
        raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]}: this broker does not lead it; DeleteRecords goes to the leader")
    if not deletion_allowed:
        raise PolicyViolationError(f"{tp[0]}-{tp[1]}: records cannot be deleted under cleanup.policy=compact")
    target = hw if requested_offset == HIGH_WATERMARK else requested_offset
    if target < 0:
        raise OffsetOutOfRangeError(f"{tp[0]}-{tp[1]}: offset {requested_offset} is not valid (-1 means the high watermark)")
    if target > hw:
        raise OffsetOutOfRangeError(f"{tp[0]}-{tp[1]}: offset {target} is above the high watermark {hw}")
    return target


class LowWatermarkLookup(Protocol):
    """What DelayedDeleteRecords needs of a local replica."""

    @property
    def is_leader(self) -> bool: ...

    def low_watermark(self) -> int: ...


@dataclass
class DeleteRecordsPartitionStatus:
    required_offset: int  # the log start decide_log_start returned
    done: bool = False
    error: ErrorCode = ErrorCode.NONE
    low_watermark: int = LOW_WATERMARK_UNKNOWN


class DelayedDeleteRecords:
    """Kafka's DelayedDeleteRecords.tryComplete: each partition is done when its low
    watermark reaches `required_offset`, or with NOT_LEADER_OR_FOLLOWER /
    UNKNOWN_TOPIC_OR_PARTITION when this broker no longer leads it or no longer holds it.
    The operation is complete when every partition is done."""

    def __init__(self, partitions: Mapping[Hashable, DeleteRecordsPartitionStatus]) -> None:
        assert partitions
        for status in partitions.values():
            assert status.required_offset >= 0
        self.partitions = dict(partitions)

    def try_complete(self, lookup: Callable[[Hashable], LowWatermarkLookup | None]) -> bool:
        for key, status in self.partitions.items():
            if status.done:
                continue
            replica = lookup(key)
            if replica is None:
                self._finish(status, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, LOW_WATERMARK_UNKNOWN)
            elif not replica.is_leader:
                self._finish(status, ErrorCode.NOT_LEADER_OR_FOLLOWER, LOW_WATERMARK_UNKNOWN)
            else:
                low = replica.low_watermark()
                status.low_watermark = low
                if low >= status.required_offset:
                    self._finish(status, ErrorCode.NONE, low)
        return all(s.done for s in self.partitions.values())

    def on_expiration(self) -> None:
        for status in self.partitions.values():
            if not status.done:
                self._finish(status, ErrorCode.REQUEST_TIMED_OUT, status.low_watermark)

    def result(self) -> dict[Hashable, tuple[ErrorCode, int]]:
        """Per partition: the error and the low watermark to answer with."""
        assert all(s.done for s in self.partitions.values())
        return {key: (s.error, s.low_watermark) for key, s in self.partitions.items()}

    @staticmethod
    def _finish(status: DeleteRecordsPartitionStatus, error: ErrorCode, low_watermark: int) -> None:
        assert not status.done
        status.done = True
        status.error = error
        status.low_watermark = low_watermark
