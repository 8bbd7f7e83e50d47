"""`kafkalite pipeline generate`: the streaming pipeline's event generator (issue 11).
(`pipeline run` and `pipeline results` live in kafkalite.cli.pipeline_run.)

    kafkalite pipeline generate --rate N --seconds S [--topic T] [--bad-fraction F]
                                [--late-fraction F] [--seed N] [--start-ms MS] [--json]

Writes N * S JSON order/click events (kafkalite.pipeline.events) to topic T (default
"pipeline-input", which must exist), paced at N records/s of wall-clock time, through
confluent-kafka with acks=all. Event times start at --start-ms (default: now) and advance
1000/N ms per record, so a given (--seed, --start-ms, --rate, fractions) always yields the
same records. A fraction F of them are malformed (one of six kinds), another fraction are
late (valid, event time 60 s in the past). Bounded in count and time: it gives up when the
last delivery report has not arrived 30 s after the last send.

Prints what was written: total, good (and how many of those late), bad per kind; with
--json one JSON object instead. Exit codes: 0 ok, 1 failed (a delivery failed or the topic
is missing; one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from kafkalite.cli import client_security
from kafkalite.cli.admin_client import AdminClient, AdminError, add_bootstrap_argument, fail, resolve_bootstrap
from kafkalite.pipeline.events import BAD_KINDS, GOOD, LATE, GeneratorConfig, generate

DEFAULT_TOPIC = "pipeline-input"
MESSAGE_TIMEOUT_MS = 30000
FLUSH_GRACE_S = 5.0
RECORDS_MAX = 10_000_000  # rate * seconds; everything is generated up front
_QUIET = {"log_level": 0}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline", help="the Spark streaming pipeline's tools")
    psub = p.add_subparsers(dest="pipeline_command", required=True)
    g = psub.add_parser("generate", help="write JSON order/click events, some malformed, to a topic")
    g.add_argument("--rate", type=int, required=True, metavar="N", help="records per second")
    g.add_argument("--seconds", type=float, required=True, metavar="S", help="how long to generate")
    g.add_argument("--topic", default=DEFAULT_TOPIC, help=f"default {DEFAULT_TOPIC}")
    g.add_argument("--bad-fraction", type=float, default=0.05, metavar="F", help="malformed records (default 0.05)")
    g.add_argument("--late-fraction", type=float, default=0.02, metavar="F", help="late valid records (default 0.02)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--start-ms", type=int, metavar="MS", help="first event time, epoch ms (default now)")
    g.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    add_bootstrap_argument(g)
    g.set_defaults(func=run_generate)

    from kafkalite.cli import pipeline_run
    from kafkalite.pipeline import job_defaults as d

    r = psub.add_parser("run", help="run the Spark streaming job: dead letters, windowed aggregates to a topic and Parquet")
    r.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint directory (a restart resumes from it)")
    r.add_argument("--parquet", required=True, metavar="DIR", help="where the window rows go as Parquet")
    r.add_argument("--input", default=d.INPUT_TOPIC, metavar="TOPIC", help=f"default {d.INPUT_TOPIC}")
    r.add_argument("--output", default=d.OUTPUT_TOPIC, metavar="TOPIC", help=f"default {d.OUTPUT_TOPIC}")
    r.add_argument("--dead-letters", default=d.DEAD_LETTER_TOPIC, metavar="TOPIC", help=f"default {d.DEAD_LETTER_TOPIC}")
    r.add_argument("--trigger-seconds", type=float, default=d.TRIGGER_INTERVAL_S, metavar="S",
                   help=f"micro-batch interval (default {d.TRIGGER_INTERVAL_S:g})")
    r.add_argument("--available-now", action="store_true", help="process what the input holds now, then stop")
    r.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help="records per micro-batch at most")
    r.add_argument("--master", default=d.MASTER, help=f"Spark master (default {d.MASTER})")
    r.add_argument("--partitions", type=int, default=3, metavar="N", help="partitions of topics it creates (default 3)")
    add_bootstrap_argument(r)
    r.set_defaults(func=pipeline_run.run_pipeline)

    res = psub.add_parser("results", help="print the window rows the pipeline wrote to Parquet")
    res.add_argument("--parquet", required=True, metavar="DIR")
    res.add_argument("--last", type=int, metavar="N", help="only the last N windows")
    res.add_argument("--json", action="store_true", help="one JSON object per row")
    res.set_defaults(func=pipeline_run.run_results)


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.rate <= 0:
        return "--rate must be > 0"
    if args.seconds <= 0:
        return "--seconds must be > 0"
    if not 0 <= args.bad_fraction <= 1 or not 0 <= args.late_fraction <= 1:
        return "fractions must be between 0 and 1"
    if args.bad_fraction + args.late_fraction > 1:
        return "--bad-fraction + --late-fraction must be <= 1"
    if round(args.rate * args.seconds) > RECORDS_MAX:
        return f"--rate * --seconds must be <= {RECORDS_MAX}"
    return None


def summary(kinds: Counter, topic: str) -> dict:
    total = sum(kinds.values())
    bad = {kind: kinds[kind] for kind in BAD_KINDS}
    return {"topic": topic, "records": total, "good": kinds[GOOD] + kinds[LATE], "late": kinds[LATE],
            "bad": sum(bad.values()), "bad_by_kind": bad}


def run_generate(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, Producer

    problem = _usage_problem(args)
    if problem:
        return fail("pipeline generate", problem, 2)
    bootstrap = resolve_bootstrap(args.bootstrap)
    try:
        with AdminClient(bootstrap) as admin:
            admin.metadata([args.topic])  # raises AdminError if the topic is missing
    except AdminError as e:
        return fail("pipeline generate", str(e))
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    config = GeneratorConfig(seed=args.seed, start_ms=start_ms, rate_per_s=args.rate,
                             bad_fraction=args.bad_fraction, late_fraction=args.late_fraction)
    records = generate(config, round(args.rate * args.seconds))
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(err.str())

    try:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                             "enable.idempotence": False, "message.timeout.ms": MESSAGE_TIMEOUT_MS, **_QUIET,
                             **client_security.librdkafka_config()})
    except KafkaException as e:
        return fail("pipeline generate", str(e.args[0]))
    began = time.monotonic()
    for i, record in enumerate(records):
        delay_s = began + i / args.rate - time.monotonic()
        if delay_s > 0:
            producer.poll(delay_s)  # pace to --rate, serving delivery reports meanwhile
        while True:
            try:
                producer.produce(args.topic, key=record.key, value=record.value, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        producer.poll(0)
    undelivered = producer.flush(MESSAGE_TIMEOUT_MS / 1000 + FLUSH_GRACE_S)
    failed = len(failures) + undelivered
    if failed:
        reason = failures[0] if failures else "not delivered in time"
        return fail("pipeline generate", f"{failed} of {len(records)} records failed: {reason}")
    result = summary(Counter(r.kind for r in records), args.topic)
    result["seconds"] = round(time.monotonic() - began, 3)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"wrote {result['records']} records to {args.topic} in {result['seconds']:.1f} s: "
              f"{result['good']} good ({result['late']} late), {result['bad']} bad")
        for kind, n in result["bad_by_kind"].items():
            print(f"  {kind}: {n}")
    return 0
