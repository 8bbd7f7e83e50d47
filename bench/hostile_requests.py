"""Well-formed requests with hostile values at a live broker: every request API and version
we serve, bodies drawn from the schema table (the protocol tests' Hypothesis strategies)
with integers biased to 0, -1, 1, 2, the type's bounds, 100 and 1000, and names biased to
real ones ("__consumer_offsets", a topic, a group). Where fuzz_soak.py sends malformed
frames, this sends frames the codec accepts, so every value reaches the handlers: a zero
timeout, a negative count, 2^31-1 partitions, a rebalance timeout of 0.

Each request goes on its own connection (answered or not within 2 s, then closed); after
each, a fresh connection must get an ApiVersions answer within 5 s, or the request is
printed, and if the broker still does not answer 5 s later the run fails (exit 1). At the
end it counts tracebacks and ERROR lines in the brokers' logs (a programmer error, never
a user's mistake, may leave a traceback).

    bin/cluster up --dir /tmp/hv --base-port 29092 --zk-port 29181
    .venv/bin/python bench/hostile_requests.py --dir /tmp/hv --per-version 15 --max-seconds 600

Bounded by `--per-version` (requests per API version) and `--max-seconds`.
"""

from __future__ import annotations

import argparse
import glob
import os
import socket
import struct
import sys
import time
import warnings

from hypothesis import strategies as st
from hypothesis.errors import NonInteractiveExampleWarning

from kafkalite.protocol.codec import encode_request
from kafkalite.protocol.schema import REQUEST, SCHEMAS, ApiKey
from kafkalite.testing.cluster import LocalCluster

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "unit", "protocol"))
import protocol_strategies  # the schema-derived strategies of the protocol tests

PING_TIMEOUT_S = 5.0
ANSWER_WAIT_S = 2.0
SKIPPED = {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}  # plaintext listener: a handshake state machine


def _hostile_primitive(type_name: str, plain=protocol_strategies._primitive) -> st.SearchStrategy:
    if type_name in protocol_strategies._INT_BOUNDS:
        low, high = protocol_strategies._INT_BOUNDS[type_name]
        return st.sampled_from([0, -1, 1, 2, low, high, 100, 1000]) | st.integers(low, high)
    if type_name == "string":
        return st.sampled_from(["hv", "g", "__consumer_offsets", ""]) | st.text(max_size=4)
    return plain(type_name)


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PING_TIMEOUT_S) as s:
            s.sendall(encode_request(ApiKey.API_VERSIONS, 0, 1, "hostile", {}))
            return len(s.recv(65536)) > 4
    except OSError:
        return False


def send(port: int, frame: bytes) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WAIT_S) as s:
            s.sendall(frame)
            s.recv(65536)
    except OSError:
        pass  # no answer in time (a fetch waiting, a join parked), or closed: both fine


def run(port: int, per_version: int, max_seconds: float) -> tuple[int, list[str]]:
    protocol_strategies._primitive = _hostile_primitive
    deadline = time.monotonic() + max_seconds
    sent, slow = 0, []
    for (api, kind), message in sorted(SCHEMAS.items(), key=lambda kv: int(kv[0][0])):
        if kind != REQUEST or api in SKIPPED:
            continue
        for version in range(message.min_version, message.max_version + 1):
            bodies = protocol_strategies.body_strategy(message.fields, version)
            for _ in range(per_version):
                if time.monotonic() > deadline:
                    return sent, slow
                body = bodies.example()
                try:
                    frame = encode_request(api, version, 7, "hostile", body)
                except (ValueError, TypeError, OverflowError, struct.error):  # a value the encoder refuses
                    continue
                send(port, frame)
                sent += 1
                if not answers(port):
                    slow.append(f"{api.name} v{version} {body!r}")
                    print(f"no answer within {PING_TIMEOUT_S:.0f} s after {slow[-1]}", flush=True)
                    time.sleep(PING_TIMEOUT_S)
                    if not answers(port):
                        raise SystemExit(f"BROKER STUCK after {api.name} v{version} {body!r}")
    return sent, slow


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="a running bin/cluster directory")
    parser.add_argument("--broker", type=int, default=1)
    parser.add_argument("--per-version", type=int, default=15)
    parser.add_argument("--max-seconds", type=float, default=600)
    args = parser.parse_args()
    warnings.simplefilter("ignore", NonInteractiveExampleWarning)
    cluster = LocalCluster.load(args.dir)
    broker = next(b for b in cluster.status()["brokers"] if b["id"] == args.broker)
    started = time.monotonic()
    sent, slow = run(int(broker["port"]), args.per_version, args.max_seconds)
    logs = glob.glob(os.path.join(args.dir, "broker-*", "broker.log"))
    tracebacks = sum(open(p, errors="replace").read().count("Traceback") for p in logs)
    errors = sum(open(p, errors="replace").read().count(" ERROR ") for p in logs)
    print(f"hostile requests: {sent} sent to broker {args.broker} in {time.monotonic() - started:.0f} s; "
          f"{len(slow)} without a prompt ApiVersions answer after them; brokers' logs: {tracebacks} tracebacks, "
          f"{errors} ERROR lines")
    return 0 if not slow and tracebacks == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
