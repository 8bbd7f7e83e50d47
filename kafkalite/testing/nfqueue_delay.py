"""Packet delay and loss without the kernel's netem qdisc (issue 14: the VMs the tests run
on have no sch_netem): an iptables NFQUEUE rule hands a namespace's outgoing packets to
this process, which holds each one for `--delay-ms` (and drops `--loss` of them) before
giving the kernel its verdict. It speaks the nfnetlink_queue protocol over a raw netlink
socket (no library needed), and is started inside the namespace by
kafkalite.testing.netns (`ip netns exec NS python -m kafkalite.testing.nfqueue_delay`).
Verdicts keep the packets' order. The iptables rule uses --queue-bypass, so packets flow
undelayed if this process is gone.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _message(msg_type: int, queue: int, attrs: bytes, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs  # nfgenmsg
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg_type, flags, seq, 0) + body


def _packet_ids(data: bytes) -> list[int]:
    """The packet ids of the NFQNL_MSG_PACKET messages in one netlink read."""
    ids, pos = [], 0
    while pos + 16 <= len(data):
        length, msg_type, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, pos)
        if length < 16:
            break
        if msg_type == NLMSG_ERROR:
            code = struct.unpack_from("=i", data, pos + 16)[0]
            if code != 0:
                raise OSError(-code, f"nfnetlink_queue: {os.strerror(-code)}")
        elif msg_type & 0xFF == NFQNL_MSG_PACKET:
            a = pos + 16 + 4  # after the nfgenmsg
            end = pos + length
            while a + 4 <= end:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from(">I", data, a + 4)[0])
                a += (alen + 3) & ~3
        pos += (length + 3) & ~3
    return ids


class Delayer:
    def __init__(self, queue: int, delay_s: float, loss: float, seed: int | None = None) -> None:
        self.queue, self.delay_s, self.loss = queue, delay_s, loss
        self.rng = random.Random(seed)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((0, 0))
        self.seq = 0
        cmd = _attr(NFQA_CFG_CMD, struct.pack("=BxH", NFQNL_CFG_CMD_BIND, socket.htons(socket.AF_INET)))
        self._send(_message(NFQNL_MSG_CONFIG, queue, cmd, self._next(), NLM_F_REQUEST | NLM_F_ACK))
        params = _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))
        self._send(_message(NFQNL_MSG_CONFIG, queue, params, self._next(), NLM_F_REQUEST | NLM_F_ACK))
        self.pending: list[tuple[float, int, int]] = []  # (due, arrival order, packet id)
        self.order = 0
        self.packets = self.dropped = 0

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def _send(self, msg: bytes) -> None:
        self.sock.send(msg)

    def verdict(self, packet_id: int, verdict: int) -> None:
        attrs = _attr(NFQA_VERDICT_HDR, struct.pack(">II", verdict, packet_id))
        self._send(_message(NFQNL_MSG_VERDICT, self.queue, attrs, self._next()))

    def run(self, stop_at: float | None = None) -> None:
        while stop_at is None or time.monotonic() < stop_at:
            timeout = max(0.0, self.pending[0][0] - time.monotonic()) if self.pending else 0.5
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if ready:
                now = time.monotonic()
                for pid in _packet_ids(self.sock.recv(1 << 16)):
                    self.packets += 1
                    self.order += 1
                    heapq.heappush(self.pending, (now + self.delay_s, self.order, pid))
            now = time.monotonic()
            while self.pending and self.pending[0][0] <= now:
                _, _, pid = heapq.heappop(self.pending)
                if self.loss and self.rng.random() < self.loss:
                    self.dropped += 1
                    self.verdict(pid, NF_DROP)
                else:
                    self.verdict(pid, NF_ACCEPT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--loss", type=float, default=0)
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long (default: until SIGTERM)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    delayer = Delayer(args.queue, args.delay_ms / 1000, args.loss)
    print(f"nfqueue_delay: queue {args.queue}, delay {args.delay_ms:g} ms, loss {args.loss:.1%}", flush=True)
    delayer.run(None if args.seconds is None else time.monotonic() + args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
