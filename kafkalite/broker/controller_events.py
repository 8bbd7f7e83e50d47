"""The controller's events (DESIGN.md sections 6 and 10): frozen dataclasses, one per thing
that can happen, dispatched by one `match` in kafkalite.broker.controller.

ZooKeeper watches and RPC handlers only build one of these and enqueue it (STYLE habit 3).
Events that a caller waits on carry the future it waits on as `reply`; the controller
answers each exactly once, with a wire-shaped dict.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kafkalite.core.messages import AlterIsrRequest

TP = tuple[str, int]


@dataclass(frozen=True)
class Elect:
    """/controller is gone (or we just registered): try to become the controller."""


@dataclass(frozen=True)
class Resign:
    """Our session expired, or /controller names someone else: stop acting as controller."""


@dataclass(frozen=True)
class BrokerChange:
    """The children of /brokers/ids changed."""


@dataclass(frozen=True)
class ProcessGone:
    """The process watch found the process of this registration gone (broker_watch.py)."""

    broker_id: int
    epoch: int


@dataclass(frozen=True)
class ProcessBack:
    """The process of this registration answers the process watch: back, if the core counts
    it gone (broker/controller.py `_process_answers`, `_backs_answering`)."""

    broker_id: int
    epoch: int


@dataclass(frozen=True)
class TopicChange:
    """The children of /brokers/topics changed."""


@dataclass(frozen=True)
class ConfigChange:
    """Issue 16: the children of /config/changes changed (a config was altered)."""


@dataclass(frozen=True)
class TopicDeletion:
    """Topics were marked under /admin/delete_topics."""


@dataclass(frozen=True)
class PreferredElectionZnode:
    """/admin/preferred_replica_election was written."""


@dataclass(frozen=True)
class ReassignmentChange:
    """/admin/reassign_partitions was created, changed or deleted (a cancel)."""


@dataclass(frozen=True)
class PartitionsAddChange:
    """Something appeared under /admin/partitions_add."""


@dataclass(frozen=True)
class PartitionsRemoveChange:
    """Something appeared under /admin/partitions_remove."""


@dataclass(frozen=True)
class AutoRebalance:
    """leader.imbalance.check.interval.seconds passed."""


@dataclass(frozen=True)
class AlterIsr:
    """A leader's AlterIsr (KIP-497), decoded from the RPC."""

    request: AlterIsrRequest
    reply: asyncio.Future


@dataclass(frozen=True)
class ControlledShutdown:
    broker_id: int
    broker_epoch: int  # -1: the request carried none
    reply: asyncio.Future


@dataclass(frozen=True)
class PreferredElection:
    """From the PreferredElection RPC (ElectLeaders); `partitions` None means all."""

    partitions: list[TP] | None
    reply: asyncio.Future


@dataclass(frozen=True)
class LogDirFailuresChange:
    """The children of /log_dir_failures changed (a broker's log dir failed, KIP-112), or a
    new controller reads them once it is active."""


ControllerEvent = (
    Elect | Resign | BrokerChange | LogDirFailuresChange | TopicChange | TopicDeletion | PreferredElectionZnode | AutoRebalance
    | AlterIsr | ControlledShutdown | PreferredElection | ReassignmentChange | PartitionsAddChange | PartitionsRemoveChange
    | ConfigChange
)
Replying = AlterIsr | ControlledShutdown | PreferredElection


def name_of(event: ControllerEvent) -> str:
    return type(event).__name__
