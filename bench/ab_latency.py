"""Small-batch latency of two (or more) versions of the broker code, run after run (issue 13).

    .venv/bin/python bench/ab_latency.py --rate 5000 --rounds 4 shipped=/tmp/base change=

Each LABEL=DIR is a version: DIR holds its `kafkalite` package (a `git worktree` or a
checkout of another revision); an empty DIR is this tree. Every run is this tree's
`produce_perf.py` on a fresh `--local 3` cluster whose brokers import DIR's code
(PYTHONPATH), RF 3 acks=all min.insync.replicas 2, librdkafka's defaults (`linger.ms=0`,
no idempotence unless `--idempotence`), `--seconds` long at `--rate` records/s.

Why a tool: on this 2-core machine the same code's p99 spreads over 7-12 ms from one run to
the next (bench/README.md, "Tenth pass"), and back-to-back runs drift. So the versions take
turns, the order reversed every round (A B, B A, A B, ...) so drift and order cancel, and
the summary gives each version's median and spread, not one run's figure.

`--one-broker` measures cost instead of latency: one broker, RF 1, acks=1, and the broker's
event-loop CPU per record. At RF 3 and 5,000 records/s the brokers keep both cores busy
whatever a replication round costs (rounds come slower and carry more), so their CPU does not
show a cut; one broker at the same rate is far from saturated, and its CPU per record moves
with what a produce request costs (bench/README.md, "Eighteenth look").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ROUNDS_MAX = 20
RUN_SLACK_S = 120  # a run's set-up and tear-down on top of its --seconds
_CPU = re.compile(r"brokers' event-loop threads: ([\d.]+) s on a CPU, ([\d.]+) s")
_CLIENT = re.compile(r"client's threads: ([\d.]+) s on a CPU")


@dataclass
class Version:
    label: str
    path: str
    runs: list[dict] = field(default_factory=list)


def parse_version(spec: str) -> Version:
    label, sep, path = spec.partition("=")
    if not sep or not label:
        raise ValueError(f"{spec!r}: expected LABEL=DIR (an empty DIR is this tree)")
    path = os.path.abspath(path) if path else ROOT
    if not os.path.isfile(os.path.join(path, "kafkalite", "__init__.py")):
        raise ValueError(f"{spec!r}: {path} holds no kafkalite package")
    return Version(label, path)


def one_run(v: Version, args: argparse.Namespace) -> dict:
    cluster = (["--local", "1", "--acks", "1", "--replication-factor", "1"] if args.one_broker
               else ["--local", "3", "--acks", "all", "--min-insync-replicas", "2"])
    cmd = [sys.executable, os.path.join(HERE, "produce_perf.py"), *cluster,
           "--throughput", str(args.rate), "--linger-ms", "0", "--num-records", str(args.rate * args.seconds),
           "--max-seconds", str(args.seconds), "--json"]
    if not args.idempotence:
        cmd.append("--no-idempotence")
    env = dict(os.environ, PYTHONPATH=v.path)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + RUN_SLACK_S, check=False)
    out = done.stdout + done.stderr
    results = [line for line in done.stdout.splitlines() if line.startswith("[")]
    if done.returncode != 0 or not results:
        raise RuntimeError(f"{v.label}: produce_perf.py failed (exit {done.returncode}):\n{out[-2000:]}")
    r = json.loads(results[-1])[-1]
    cpu, client = _CPU.search(out), _CLIENT.search(out)
    broker_cpu = float(cpu.group(1)) if cpu else float("nan")
    return {"p50": r["p50_ms"], "p99": r["p99_ms"], "p999": r["p999_ms"], "max": r["max_ms"],
            "broker_cpu": broker_cpu, "broker_wait": float(cpu.group(2)) if cpu else float("nan"),
            "client_cpu": float(client.group(1)) if client else float("nan"),
            "cpu_per_record_us": broker_cpu / r["records"] * 1e6 if r.get("records") else float("nan")}


def summary(v: Version, p99_target: float) -> str:
    p99 = [r["p99"] for r in v.runs]
    p999 = [r["p999"] for r in v.runs]
    within = sum(1 for x in p99 if x <= p99_target)
    per_record = [r["cpu_per_record_us"] for r in v.runs if not math.isnan(r["cpu_per_record_us"])] or [math.nan]  # NaN: no CPU figure
    return (f"{v.label:>12}  runs {len(v.runs):>2}  p50 median {statistics.median(r['p50'] for r in v.runs):5.1f}  "
            f"p99 median {statistics.median(p99):5.1f} [{min(p99):.1f}-{max(p99):.1f}]  p999 median {statistics.median(p999):5.1f} "
            f"[{min(p999):.1f}-{max(p999):.1f}]  p99 <= {p99_target:g} ms in {within} of {len(p99)}  "
            f"broker CPU median {statistics.median(r['broker_cpu'] for r in v.runs):.1f} s, "
            f"per record {statistics.median(per_record):.1f} us [{min(per_record):.1f}-{max(per_record):.1f}]")


def main() -> int:
    ap = argparse.ArgumentParser(description="small-batch RF 3 acks=all latency of broker code versions, run after run")
    ap.add_argument("versions", nargs="+", metavar="LABEL=DIR", help="a version of the code (DIR empty: this tree)")
    ap.add_argument("--rate", type=int, default=5000, help="records/s (default 5000)")
    ap.add_argument("--seconds", type=int, default=15, help="length of each run (default 15)")
    ap.add_argument("--rounds", type=int, default=4, help=f"runs per version, in turns (default 4, at most {ROUNDS_MAX})")
    ap.add_argument("--p99-target", type=float, default=10.0, help="ms; the summary counts runs within it (default 10)")
    ap.add_argument("--idempotence", action="store_true", help="librdkafka's idempotent producer (default: not)")
    ap.add_argument("--one-broker", action="store_true",
                    help="one broker, RF 1, acks=1: nothing saturates, so the broker's CPU per record measures what a produce "
                         "request costs (at RF 3 and 5,000/s the brokers keep both cores busy whatever a round costs)")
    args = ap.parse_args()
    try:
        versions = [parse_version(s) for s in args.versions]
    except ValueError as e:
        ap.error(str(e))
    if len({v.label for v in versions}) != len(versions):
        ap.error("labels must differ")
    if not 1 <= args.rounds <= ROUNDS_MAX:
        ap.error(f"--rounds must be 1..{ROUNDS_MAX}")
    if args.rate <= 0 or args.seconds <= 0:
        ap.error("--rate and --seconds must be positive")
    print(f"# {len(versions)} versions x {args.rounds} rounds, {args.rate} records/s for {args.seconds} s each, "
          f"{'one broker, RF 1 acks=1' if args.one_broker else 'RF 3 acks=all'}, "
          f"{'idempotent' if args.idempotence else 'not idempotent'}", flush=True)
    for i in range(args.rounds):
        for v in (versions if i % 2 == 0 else versions[::-1]):
            try:
                r = one_run(v, args)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"kafkalite ab_latency: {e}", file=sys.stderr)
                return 1
            v.runs.append(r)
            load = os.getloadavg()[0]
            print(f"{time.strftime('%H:%M:%S')} load {load:4.2f} {v.label:>12}  p50 {r['p50']:5.1f}  p99 {r['p99']:5.1f}  "
                  f"p999 {r['p999']:5.1f}  max {r['max']:5.1f} ms  brokers {r['broker_cpu']:.1f} s CPU, "
                  f"{r['broker_wait']:.1f} s waiting ({r['cpu_per_record_us']:.1f} us per record); client {r['client_cpu']:.1f} s",
                  flush=True)
    print("# summary")
    for v in versions:
        print(summary(v, args.p99_target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
