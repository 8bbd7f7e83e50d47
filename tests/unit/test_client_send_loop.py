"""The client listener's send loop (kafkalite.broker.client_listener): answers leave in
request order, and those already done behind the one awaited leave in the same write."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kafkalite.broker.client_listener import ClientListener


class Writer:
    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []

    def writelines(self, parts: list[bytes]) -> None:
        self.writes.append(list(parts))

    async def drain(self) -> None:
        await asyncio.sleep(0)

    def close(self) -> None:
        self.writes.append(["closed"])


def listener() -> ClientListener:
    lst = ClientListener.__new__(ClientListener)
    lst.broker = SimpleNamespace(metrics=SimpleNamespace(request_total=lambda api, seconds: None))
    return lst


async def answer(body: bytes, after: asyncio.Event | None = None) -> list[bytes]:
    if after is not None:
        await after.wait()
    return [body]


async def test_answers_done_together_leave_in_one_write_in_request_order():
    queue: asyncio.Queue = asyncio.Queue()
    writer = Writer()
    first, third = asyncio.Event(), asyncio.Event()
    jobs = [asyncio.create_task(answer(b"1", first)), asyncio.create_task(answer(b"2")),
            asyncio.create_task(answer(b"3", third)), asyncio.create_task(answer(b"4"))]
    for job in jobs:
        queue.put_nowait((job, "Produce", 0.0))
    loop = asyncio.create_task(listener()._send_loop(queue, writer))
    await asyncio.sleep(0.01)
    assert writer.writes == []  # the first is not done: nothing may overtake it
    first.set()
    await asyncio.sleep(0.01)
    assert writer.writes == [[b"1", b"2"]]  # 2 was done behind it; 3 is not
    third.set()
    await asyncio.sleep(0.01)
    assert writer.writes == [[b"1", b"2"], [b"3", b"4"]]
    queue.put_nowait((asyncio.create_task(answer(b"5")), "Produce", 0.0))
    queue.put_nowait(None)
    await asyncio.wait_for(loop, 1)
    assert writer.writes[-1] == [b"5"]


async def test_an_acks_0_produce_has_no_answer_and_a_failed_handler_closes_after_the_answers_before_it():
    async def fails() -> list[bytes]:
        raise RuntimeError("a bug")

    async def nothing() -> None:
        return None

    queue: asyncio.Queue = asyncio.Queue()
    writer = Writer()
    for job in (answer(b"1"), nothing(), answer(b"2"), fails(), answer(b"3")):
        queue.put_nowait((asyncio.create_task(job), "Produce", 0.0))
    await asyncio.sleep(0.01)
    await asyncio.wait_for(listener()._send_loop(queue, writer), 1)
    assert writer.writes == [[b"1", b"2"], ["closed"]]
