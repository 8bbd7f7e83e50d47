"""Incremental replica fetch sessions, on the leader (in the spirit of Kafka's KIP-227).

A follower fetches every partition it follows from one leader in one ReplicaFetch. Without
sessions each request lists all of them and the leader reads all of them, twice per fetch
(before and after its wait): with 10,000 idle partitions, RF 3 on 3 brokers, each broker
spent half a core doing nothing (issue 13).

With a session the leader remembers, per follower broker, the fetch state of every
partition in it. The follower's first request is full and opens the session; every later
one carries only what changed since its previous request (a new fetch offset or epoch, a
partition added) and what it no longer fetches (`forgotten`). The leader reads only those
and the partitions that changed on its side since it last answered (`dirty`: an append, a
HW, log start or role change, marked by the driver); an idle partition costs nothing per
fetch. The driver wakes a waiting fetch for every mark but a HW moved by a follower's
fetch, which answers no follower (Kafka since KAFKA-9952): it is read, and rides, with the
next answer.

What a fetch did for an idle partition that is no longer read each time, keeping the
follower caught up for the ISR (Kafka's lastCaughtUpTime), the driver does from
`idle_caught_up()` before each ISR-shrink check: a partition in a session, not dirty,
whose fetch offset is the leader's LEO, was caught up when the session's last request
came. A follower that stops fetching stops refreshing it, so it still leaves the ISR after
replica.lag.time.max.ms.

Sessions are numbered per leader process; a follower whose session the leader does not
have (the leader restarted, or the follower opened a newer one) or whose request is out of
sequence gets FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH and starts a new
full session. Pure: time comes in as `now_ms`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from kafkalite.core.codes import CoreError, ErrorCode

TP = tuple[str, int]


class FetchSessionIdNotFoundError(CoreError):
    code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND


class InvalidFetchSessionEpochError(CoreError):
    code = ErrorCode.INVALID_FETCH_SESSION_EPOCH


class SessionPartition(NamedTuple):
    """What the follower asked of one partition: where it fetches, at which leader epoch,
    the epoch of its last fetched batch (KIP-320), and its own log start (DeleteRecords'
    low watermark; -1 from a follower that does not say). A NamedTuple, not a frozen
    dataclass (as kafkalite.core.messages.PartitionLeadership): a follower builds one per
    changed partition for every fetch and the leader decodes one, and a frozen dataclass
    costs more than twice as much to make; its wire form is its fields in order."""

    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int = -1


class FetchSession:
    def __init__(self, session_id: int, replica_id: int, now_ms: int) -> None:
        assert session_id > 0
        self.session_id = session_id
        self.replica_id = replica_id
        self.epoch = 1  # the epoch the next incremental request must carry
        self.partitions: dict[TP, SessionPartition] = {}
        self.dirty: set[TP] = set()
        self.last_request_ms = now_ms

    def apply(self, changed: dict[TP, SessionPartition], forgotten: Iterable[TP], now_ms: int) -> list[TP]:
        """One request's changes; returns the partitions to read for it: the changed ones
        and those marked dirty since the last answer (which are clean again)."""
        for tp in forgotten:
            self.partitions.pop(tp, None)
            self.dirty.discard(tp)
        self.partitions.update(changed)
        to_read = set(changed) | self.dirty
        self.dirty.clear()
        self.last_request_ms = max(self.last_request_ms, now_ms)
        self.epoch += 1
        self.check_invariants()
        return sorted(to_read)

    def request_one(self, tp: TP, asked: SessionPartition, now_ms: int) -> bool:
        """For a driver whose requests carry one partition each (the simulator): whether
        `tp` must be read (it changed on either side since it was last read); the session
        holds `asked` from now on either way."""
        must_read = self.partitions.get(tp) != asked or tp in self.dirty
        self.partitions[tp] = asked
        self.dirty.discard(tp)
        self.last_request_ms = max(self.last_request_ms, now_ms)
        return must_read

    def read_again(self, tp: TP) -> None:
        """`tp` was read without everything it has (a byte budget or a throttle held records
        back): read it at the next request although neither side changes it."""
        if tp in self.partitions:
            self.dirty.add(tp)

    def take_dirty(self) -> list[TP]:
        """The partitions that changed while the request waited (read and answered now)."""
        out = sorted(self.dirty)
        self.dirty.clear()
        return out

    def check_invariants(self) -> None:
        assert self.epoch >= 1
        assert self.dirty <= self.partitions.keys()
        assert all(sp.fetch_offset >= 0 for sp in self.partitions.values())


class FetchSessions:
    """The leader's sessions: at most one per follower broker (its one fetcher for us)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._by_replica: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._by_replica)

    def __iter__(self) -> Iterator[FetchSession]:
        return iter(list(self._by_replica.values()))

    def start(self, replica_id: int, partitions: dict[TP, SessionPartition], now_ms: int) -> FetchSession:
        """A full request: a new session (any older one of this follower is dropped)."""
        session = FetchSession(next(self._ids), replica_id, now_ms)
        session.partitions.update(partitions)
        self._by_replica[replica_id] = session
        return session

    def get(self, replica_id: int, session_id: int, epoch: int) -> FetchSession:
        session = self._by_replica.get(replica_id)
        if session is None or session.session_id != session_id:
            raise FetchSessionIdNotFoundError(f"no fetch session {session_id} of broker {replica_id}")
        if epoch != session.epoch:
            # The follower lost track (a request or answer lost on the way): start over.
            del self._by_replica[replica_id]
            raise InvalidFetchSessionEpochError(f"fetch session {session_id} of broker {replica_id} is at epoch "
                                                f"{session.epoch}, the request at {epoch}")
        return session

    def of(self, replica_id: int, now_ms: int) -> FetchSession:
        """The simulator's driver: the follower's session, started empty on first contact."""
        session = self._by_replica.get(replica_id)
        return session if session is not None else self.start(replica_id, {}, now_ms)

    def close(self, replica_id: int) -> None:
        self._by_replica.pop(replica_id, None)

    def mark(self, tp: TP) -> list[FetchSession]:
        """`tp` changed here (append, HW, log start, role): every session holding it reads it
        at its next read. Returns those sessions (the driver wakes their waiting fetch,
        unless a follower's fetch only moved the HW)."""
        marked = []
        for session in self._by_replica.values():
            if tp in session.partitions:
                session.dirty.add(tp)
                marked.append(session)
        return marked

    def idle_caught_up(self) -> Iterator[tuple[int, TP, int, int]]:
        """(follower, partition, fetch offset, as-of ms) for every session partition that is
        not dirty: the driver confirms the follower is still at the leader's LEO and
        counts it caught up as of the session's last request."""
        for session in self._by_replica.values():
            for tp, sp in session.partitions.items():
                if tp not in session.dirty:
                    yield session.replica_id, tp, sp.fetch_offset, session.last_request_ms
