"""What one inter-broker RPC round trip costs in CPU, next to this machine's floor (issue 13).

    .venv/bin/python bench/rpc_round_trip.py [--calls 20000]

Two processes on loopback, one uvloop event loop each. `rpc`: kafkalite's RpcClient calls an
RpcServer whose handler answers at once, with a header the size of a follower's ReplicaFetch
and of its answer, one call after the other. `floor`: the same sizes through a bare uvloop
Protocol echo (no framing, no msgpack, no task, no future per call). Each prints the CPU per
round trip of the calling and the answering process (/proc/<pid>/stat) and the wall time.
The difference is the transport's own Python; the floor is the system calls and wake-ups a
message costs here. No secret, no TLS: the shipped RPC between brokers of one cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import uvloop

from kafkalite.rpc.transport import RpcClient, RpcServer
from kafkalite.testing.ports import free_port

REQUEST = {"broker_epoch": 5, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 10 << 20, "partition_max_bytes": 1 << 20,
           "partitions": [["lat", 1, 1234, 3, 3, 0]], "session": [5, 77], "forgotten": []}
ANSWER = {"error": 0, "session": [5, 78], "partitions": [["lat", 1, 0, 1000, 0, 1001, 0, 0, None, None]]}
RAW = b"x" * 180  # about a framed REQUEST
WARMUP = 500


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class _Caller(asyncio.Protocol):
    def __init__(self) -> None:
        self.answer: asyncio.Future | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(data)


async def _serve(kind: str, port: int) -> None:
    if kind == "rpc":
        async def handler(_header, _payload):
            return dict(ANSWER), b""
        server = RpcServer(handler)
        await server.start("127.0.0.1", port)
    else:
        await asyncio.get_running_loop().create_server(_Echo, "127.0.0.1", port)
    await asyncio.sleep(600)  # the caller kills this process when done


async def _call(kind: str, port: int, calls: int, server_pid: int) -> tuple[float, float, float]:
    loop = asyncio.get_running_loop()
    if kind == "rpc":
        client = RpcClient("127.0.0.1", port, sender=2)

        async def one() -> None:
            await client.call("ReplicaFetch", REQUEST)
    else:
        transport, caller = await loop.create_connection(_Caller, "127.0.0.1", port)

        async def one() -> None:
            caller.answer = loop.create_future()
            transport.write(RAW)
            await caller.answer
    try:
        for _ in range(WARMUP):
            await one()
        s0, c0, w0 = cpu_s(server_pid), time.process_time(), time.perf_counter()
        for _ in range(calls):
            await one()
        s1, c1, w1 = cpu_s(server_pid), time.process_time(), time.perf_counter()
    finally:
        if kind == "rpc":
            await client.close()
        else:
            transport.close()
    return (c1 - c0) / calls * 1e6, (s1 - s0) / calls * 1e6, (w1 - w0) / calls * 1e6


def _wait_listening(port: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"the answering process did not listen on {port} within {deadline_s:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--serve", choices=("rpc", "floor"), help=argparse.SUPPRESS)  # the answering process
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    uvloop.install()
    if args.serve:
        asyncio.run(_serve(args.serve, args.port))
        return 0
    if not 1 <= args.calls <= 1_000_000:
        ap.error("--calls 1..1000000")
    for kind in ("rpc", "floor"):
        port = free_port()
        server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", kind, "--port", str(port)])
        try:
            _wait_listening(port, 30)
            client_us, server_us, wall_us = asyncio.run(_call(kind, port, args.calls, server.pid))
        finally:
            server.kill()
            server.wait()
        print(f"{kind:5s}  {args.calls} round trips: CPU per round trip {client_us:.1f} us calling, "
              f"{server_us:.1f} us answering; wall {wall_us:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
