"""The process watches of kafkalite.broker.broker_watch (issue 13), driven by a scripted
Ping (no sockets): what they report, and when."""

from __future__ import annotations

import asyncio

import pytest

from kafkalite.broker import broker_watch
from kafkalite.broker.broker_watch import ProcessWatches
from kafkalite.core.process_watch import PingAnswer


@pytest.fixture
def pings(monkeypatch):
    """ProcessWatch._ping answers from the queue this returns, in order (a str outcome or a
    PingAnswer); when it is empty, the call waits for the next entry."""
    monkeypatch.setattr(broker_watch, "RETRY_S", 0.01)
    script: asyncio.Queue = asyncio.Queue()

    async def ping(self):
        return await script.get()

    monkeypatch.setattr(broker_watch.ProcessWatch, "_ping", ping)
    return script


async def _until(condition, tries: int = 200) -> None:
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.01)


async def test_a_fresh_watch_reports_back_on_its_first_answer_and_stands_answering(pings):
    """Found by review: a watch reported "back" only after a GONE of its own. A new
    controller counts gone what its broker's metadata cache found gone, and its fresh watch
    of that registration saw only ALIVE: the controller never heard the broker was back."""
    calls: list[tuple[str, int, int]] = []
    watches = ProcessWatches(2, lambda b, e: calls.append(("gone", b, e)), lambda b, e: calls.append(("back", b, e)))
    watches.sync({1: (10, "127.0.0.1", 1)})
    watch = watches.watches[1]
    pings.put_nowait(PingAnswer(1, 10, "inc-a"))
    await _until(lambda: calls)
    assert calls == [("back", 1, 10)]
    assert watch.answering
    watch._on_drop()  # the connection ends
    assert not watch.answering
    pings.put_nowait("refused")
    await _until(lambda: len(calls) == 2)
    assert calls[1] == ("gone", 1, 10) and not watch.answering
    pings.put_nowait(PingAnswer(1, 10, "inc-a"))  # the same process answers again
    await _until(lambda: len(calls) == 3)
    assert calls[2] == ("back", 1, 10) and watch.answering
    await watches.close()
