"""A broker whose ZooKeeper session expired registers again for as long as it takes
(kafkalite.broker.server.Broker._reregister): it gave up after 600 attempts (about five
minutes of ZooKeeper outage) and stayed alive but unregistered, out of every ISR. A session
lost again while registering registers again. The broker is a stand-in with the method's
few attributes; time does not pass (sleep is a no-op)."""

from __future__ import annotations

from types import SimpleNamespace

from kafkalite.broker import server
from kafkalite.zk.errors import ZkError


class Stand:
    def __init__(self, failures: int, lose_on_first: bool = False) -> None:
        self.stopping = False
        self._sessions_lost = 1
        self.calls = 0
        self.failures = failures
        self.lose_on_first = lose_on_first
        self.elected: list[object] = []
        self.controller = SimpleNamespace(enqueue=self.elected.append)

    async def _register(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise ZkError("connection loss")
        if self.lose_on_first and self.calls == self.failures + 1:
            self._sessions_lost += 1  # expired again while this registration was made


async def _no_sleep(_s: float) -> None:
    return None  # no time passes


async def test_re_registration_outlasts_a_long_outage(monkeypatch):
    monkeypatch.setattr(server.asyncio, "sleep", _no_sleep)
    stand = Stand(failures=1000)
    await server.Broker._reregister(stand)
    assert stand.calls == 1001 and len(stand.elected) == 1


async def test_a_session_lost_while_registering_registers_again(monkeypatch):
    monkeypatch.setattr(server.asyncio, "sleep", _no_sleep)
    stand = Stand(failures=0, lose_on_first=True)
    await server.Broker._reregister(stand)
    assert stand.calls == 2 and len(stand.elected) == 1


async def test_a_stopping_broker_stops_trying(monkeypatch):
    monkeypatch.setattr(server.asyncio, "sleep", _no_sleep)
    stand = Stand(failures=10**9)
    original = stand._register

    async def stop_after_three() -> None:
        if stand.calls == 3:
            stand.stopping = True
        await original()

    stand._register = stop_after_three
    await server.Broker._reregister(stand)
    assert stand.calls == 4 and stand.elected == []
