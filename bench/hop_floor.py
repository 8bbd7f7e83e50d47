"""The floor under small-batch RF 3 acks=all latency on this machine: the same hops with no
broker work at all (issue 13, item 2).

    .venv/bin/python bench/hop_floor.py --rate 5000 --seconds 15

Four Python processes on loopback, each one asyncio (uvloop) event loop as the brokers run:
a client sends 100-byte messages at `--rate`/s (one connection, no limit in flight) to a
"leader", which passes each to two "followers" and answers the client once both have
acknowledged it. That is the acks=all critical path (client -> leader -> both followers ->
leader -> client) without a log, a purgatory, Kafka or msgpack framing, librdkafka or its
threads, or ZooKeeper. The client prints per-message latency percentiles and how long each
process ran against how long it waited for a CPU (Linux schedstat), so a figure can be read
against the machine's load at that moment. Whatever the real cluster does above this floor
is its own cost; whatever this floor is, no broker code can go below it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import struct
import subprocess
import sys
import time

MSG = struct.Struct(">IQ")  # frame length, message id
PAYLOAD = os.urandom(100)
DRAIN_TIMEOUT_S = 10.0  # after the last send, how long answers may still take
PACE_STEP_S = 0.002  # the client sends what is due every 2 ms, as produce_perf.py paces


def schedstat() -> tuple[float, float]:
    """(on a CPU, waiting for one) in seconds, summed over this process's threads."""
    run = wait = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                r, w, _ = f.read().split()
        except (OSError, ValueError):
            continue
        run, wait = run + int(r) / 1e9, wait + int(w) / 1e9
    return run, wait


async def read_messages(reader: asyncio.StreamReader):
    while True:
        try:
            head = await reader.readexactly(MSG.size)
            size, msg_id = MSG.unpack(head)
            await reader.readexactly(size - 8)
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the run is over
        yield msg_id


def frame(msg_id: int) -> bytes:
    return MSG.pack(8 + len(PAYLOAD), msg_id) + PAYLOAD


async def follower(port: int) -> None:
    """Connects to the leader, acknowledges each message it is sent (an 8-byte frame)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"F")
    async for msg_id in read_messages(reader):
        writer.write(MSG.pack(8, msg_id))


async def leader(port: int, ready_path: str) -> None:
    followers: list[asyncio.StreamWriter] = []
    waiting: dict[int, list] = {}  # message id -> [acks missing, client writer]
    joined = asyncio.Event()

    async def on_follower_acks(reader: asyncio.StreamReader) -> None:
        async for msg_id in read_messages(reader):
            entry = waiting.get(msg_id)
            if entry is not None:
                entry[0] -= 1
                if entry[0] == 0:
                    del waiting[msg_id]
                    entry[1].write(frame(msg_id))

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = await reader.readexactly(1)
        if hello == b"F":
            followers.append(writer)
            if len(followers) == 2:
                joined.set()
            await on_follower_acks(reader)
            return
        async for msg_id in read_messages(reader):  # the client
            waiting[msg_id] = [len(followers), writer]
            data = frame(msg_id)
            for f in followers:
                f.write(data)

    server = await asyncio.start_server(on_connection, "127.0.0.1", port)
    os.close(os.open(ready_path, os.O_CREAT | os.O_WRONLY))  # listening: the followers may connect
    async with server:
        await joined.wait()
        await asyncio.Event().wait()


async def client(port: int, rate: float, seconds: float) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"C")
    sent_at: dict[int, float] = {}
    done_sending = False
    latencies: list[float] = []

    async def receive() -> None:
        async for msg_id in read_messages(reader):
            latencies.append(time.perf_counter() - sent_at.pop(msg_id))
            if done_sending and not sent_at:
                all_answered.set()

    receiver = asyncio.create_task(receive())
    all_answered = asyncio.Event()
    sched0 = schedstat()
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * rate)
        while n < due:
            sent_at[n] = time.perf_counter()
            writer.write(frame(n))
            n += 1
        await asyncio.sleep(PACE_STEP_S)
    done_sending = True
    if sent_at:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_answered.wait(), DRAIN_TIMEOUT_S)
    receiver.cancel()
    run, wait = (a - b for a, b in zip(schedstat(), sched0))
    latencies.sort()
    q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000  # noqa: E731
    return {"sent": n, "answered": len(latencies), "p50_ms": q(0.5), "p99_ms": q(0.99), "p999_ms": q(0.999),
            "max_ms": latencies[-1] * 1000, "client_cpu_s": run, "client_cpu_wait_s": wait}


def run_role(argv: list[str]) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    role, port = argv[0], int(argv[1])
    if role == "leader":
        asyncio.run(leader(port, argv[2]))
    elif role == "follower":
        asyncio.run(follower(port))
    else:
        print(json.dumps(asyncio.run(client(port, float(argv[2]), float(argv[3])))))


def proc_sched(pid: int) -> tuple[float, float]:
    run = wait = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            r, w, _ = f.read().split()
        run, wait = run + int(r) / 1e9, wait + int(w) / 1e9
    return run, wait


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=5000, help="messages/s")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        run_role(args.role)
        return 0
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from kafkalite.testing.ports import free_ports

    port = free_ports(1)[0]
    me = [sys.executable, os.path.abspath(__file__), "--role"]
    ready = f"/tmp/hop-floor-{os.getpid()}.ready"
    procs = [subprocess.Popen([*me, "leader", str(port), ready])]
    try:
        while not os.path.exists(ready):
            time.sleep(0.05)
        procs += [subprocess.Popen([*me, "follower", str(port)]) for _ in range(2)]
        # the followers connect, then say who they are: the leader learns them by "F"
        time.sleep(0.5)
        out = subprocess.run([*me, "client", str(port), str(args.rate), str(args.seconds)], capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        sched = [proc_sched(p.pid) for p in procs]
    finally:
        for p in reversed(procs):  # followers first: the leader then sees nothing unexpected
            p.kill()
            p.wait()
        if os.path.exists(ready):
            os.remove(ready)
    load = os.getloadavg()
    print(f"# hop floor: client -> leader -> 2 followers -> leader -> client, {args.rate:.0f} msg/s, {args.seconds:.0f} s, "
          f"load {load[0]:.2f}")
    print(f"answered {result['answered']}/{result['sent']}  p50 {result['p50_ms']:.2f}  p99 {result['p99_ms']:.2f}  "
          f"p999 {result['p999_ms']:.2f}  max {result['max_ms']:.2f} ms")
    print(f"client: {result['client_cpu_s']:.2f} s on a CPU, {result['client_cpu_wait_s']:.2f} s waiting for one; "
          + ", ".join(f"{name}: {r:.2f} s / {w:.2f} s" for name, (r, w) in zip(("leader", "follower", "follower"), sched)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
