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


async def test_the_controller_watch_follows_a_controller_that_holds_controller_under_a_new_registration(pings):
    """Found by review: the watch was keyed on the broker id only. Broker 1, the controller,
    registered anew (its session expired: epoch 10 -> 20) and won /controller again; follow(1)
    kept the watch of epoch 10, so when broker 1 died the watch asked to remove /controller
    for registration 10, which remove_gone_controller refuses: no early failover."""
    from kafkalite.broker.broker_watch import ControllerWatch

    registrations = {1: (10, "127.0.0.1", 1)}
    removed: list[tuple[int, int]] = []

    async def read(broker_id):
        return registrations.get(broker_id)

    async def remove(broker_id, epoch):
        removed.append((broker_id, epoch))
        return epoch == registrations[broker_id][0]

    cw = ControllerWatch(2, read, remove)
    cw.follow(1)
    await _until(lambda: cw.watch is not None)
    assert cw.watch is not None and cw.watch.state.epoch == 10
    registrations[1] = (20, "127.0.0.1", 1)
    cw.follow(1)  # /controller, created by broker 1's new session
    await _until(lambda: cw.watch is not None and cw.watch.state.epoch == 20)
    assert cw.watch is not None and cw.watch.state.epoch == 20
    pings.put_nowait("refused")  # broker 1 is killed
    await _until(lambda: removed)
    assert removed == [(1, 20)]
    await cw.close()


async def test_the_controller_watch_ends_on_the_latest_controller_whatever_order_registration_reads_end_in(pings):
    """Found by review: /controller moved from 1 to 3 while the read of 1's registration was
    under way; that read ended first and made a watch of broker 1, and the read for 3, which
    found a watch there, kept it: the watch stayed on broker 1, no longer the controller."""
    from kafkalite.broker.broker_watch import ControllerWatch

    registrations = {1: (10, "127.0.0.1", 1), 3: (30, "127.0.0.1", 3)}
    gates = {1: asyncio.Event(), 3: asyncio.Event()}

    async def read(broker_id):
        await gates[broker_id].wait()
        return registrations[broker_id]

    async def remove(broker_id, epoch):
        return False

    for first in (1, 3):
        for gate in gates.values():
            gate.clear()
        cw = ControllerWatch(2, read, remove)
        cw.follow(1)
        await asyncio.sleep(0)
        cw.follow(3)
        gates[first].set()
        await asyncio.sleep(0.02)
        gates[4 - first].set()
        await _until(lambda: cw.watch is not None and cw.watch.state.broker_id == 3)
        await asyncio.sleep(0.02)
        assert cw.watch is not None and cw.watch.state.broker_id == 3, f"the read for {first} ended first"
        await cw.close()
