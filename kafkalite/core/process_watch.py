"""What a Ping (or a refused connection) says about a broker's process (issue 13).

The controller watches every live registration (broker id, epoch): it holds a connection to
the broker's inter-broker port and, when that connection ends, connects and asks again at
once. A process killed moments ago leaves evidence at once, long before its ZooKeeper
session expires:
- connecting is refused: nothing listens on its address any more (a registered broker's
  RPC server is up before it registers, and closes only when it stops);
- or another process answers there: a restarted incarnation, not registered yet (epoch -1)
  or registered anew (another epoch), or another broker id.
A timeout is no evidence: a paused process (SIGSTOP, a long stall) or a slow network looks
the same, and must keep its leaderships until its session ends.

The process is recognised by the `incarnation` token its first answer as the watched
registration carried; an answer before that (the broker had not yet stored its epoch when
the controller saw its registration) is neither evidence nor recognition. That answer
carries NOT_REGISTERED from a process that just started, and its previous epoch from one
that registered again after its ZooKeeper session expired: an epoch below the watched one
is the watched registration's own process, not yet caught up with it (epochs are the
registrations' creation zxids, which only grow; a later incarnation registers later, and a
process that still held the address would have kept the new one from binding it). Taking
it for a later incarnation failed a live broker and brought it back 200 ms later (the
netns quorum-loss test, after every session expired at once).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

NOT_REGISTERED = -1  # the epoch a broker answers before its registration is written


@dataclass(frozen=True)
class PingAnswer:
    broker_id: int
    epoch: int
    incarnation: str


class Verdict(Enum):
    ALIVE = "alive"  # the watched process answered
    GONE = "gone"  # evidence that the watched process is gone
    UNKNOWN = "unknown"  # no evidence either way (timeout, or not recognisable yet)


@dataclass
class ProcessWatchState:
    """One watched registration; `judge` each outcome of connecting and pinging."""

    broker_id: int
    epoch: int
    incarnation: str | None = None  # learned from the first answer as this registration

    def judge(self, outcome: PingAnswer | str) -> Verdict:
        """`outcome`: the answer, or "refused" (connecting was refused), or anything else
        for a failure that proves nothing (a timeout, a reset while connecting)."""
        if outcome == "refused":
            return Verdict.GONE
        if not isinstance(outcome, PingAnswer):
            return Verdict.UNKNOWN
        if outcome.broker_id != self.broker_id:
            return Verdict.GONE
        if self.incarnation is not None:
            return Verdict.ALIVE if outcome.incarnation == self.incarnation else Verdict.GONE
        if outcome.epoch == self.epoch:
            self.incarnation = outcome.incarnation
            return Verdict.ALIVE
        if outcome.epoch < self.epoch:  # NOT_REGISTERED, or this process's previous registration
            return Verdict.UNKNOWN  # this registration's process before it stored its epoch, or a restart: wait
        return Verdict.GONE  # registered under a later epoch: a later incarnation
