"""`kafkalite pipeline run` and `kafkalite pipeline results`: the Spark streaming job
(kafkalite.pipeline.job) from the command line, and a table of what it wrote to Parquet.

    kafkalite pipeline run --checkpoint DIR --parquet DIR [--input T] [--output T]
                           [--dead-letters T] [--trigger-seconds S] [--available-now]
                           [--max-offsets-per-trigger N] [--master URL] [--partitions N]
    kafkalite pipeline results --parquet DIR [--last N] [--json]

`run` first makes sure the three topics exist (creating missing ones with --partitions and
a replication factor of min(3, brokers)), then starts the job's two queries and prints one
line per micro-batch. With --available-now it processes what the input holds and exits;
otherwise it runs until Ctrl-C, which stops both queries (a later run resumes from the
checkpoint). The Spark job is imported here, lazily, so the rest of the CLI needs no
pyspark. Exit codes: 0 ok, 1 failed (cluster unreachable, a query failed, no pyspark; one
line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from decimal import Decimal
from pathlib import Path

from kafkalite.cli.admin_client import AdminClient, AdminError, console_for_tables, fail, resolve_bootstrap

REPLICATION_FACTOR_MAX = 3
TOPIC_READY_TIMEOUT_S = 30.0
PROGRESS_POLL_S = 1.0
SPARK_EXTRA = "pip install 'kafkalite[spark]'"


def ensure_topics(bootstrap: str, topics: list[str], partitions: int) -> list[str]:
    """Create those of `topics` that do not exist; return the ones created. Waits (bounded)
    until every partition of each has a leader, so the job's first metadata read finds them."""
    created = []
    with AdminClient(bootstrap) as admin:
        meta = admin.metadata(None)
        replication_factor = min(REPLICATION_FACTOR_MAX, len(meta.brokers))
        for topic in topics:
            if topic in meta.topics:
                continue
            try:
                admin.create_topic(topic, partitions, replication_factor)
                created.append(topic)
            except AdminError as e:
                if "already exists" not in str(e):  # another client won the race: fine
                    raise
        deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
        while True:
            try:
                ready = admin.metadata(topics).topics
            except AdminError:  # a just-created topic may not be in every broker's cache yet
                ready = {}
            if all(t in ready and ready[t].partitions and not any(p.offline for p in ready[t].partitions)
                   for t in topics):
                return created
            if time.monotonic() > deadline:
                raise AdminError(f"topics {topics} have no leader for every partition after {TOPIC_READY_TIMEOUT_S:.0f} s")
            time.sleep(0.2)


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.trigger_seconds <= 0:
        return "--trigger-seconds must be > 0"
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger <= 0:
        return "--max-offsets-per-trigger must be > 0"
    if args.partitions <= 0:
        return "--partitions must be > 0"
    if len({args.input, args.output, args.dead_letters}) != 3:
        return "--input, --output and --dead-letters must be three different topics"
    return None


def run_pipeline(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem:
        return fail("pipeline run", problem, 2)
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
        return fail("pipeline run", f"pyspark and pyarrow are not installed: {SPARK_EXTRA}")
    bootstrap = resolve_bootstrap(args.bootstrap)
    try:
        created = ensure_topics(bootstrap, [args.input, args.output, args.dead_letters], args.partitions)
    except AdminError as e:
        return fail("pipeline run", str(e))
    for topic in created:
        print(f"created topic {topic}")

    from pyspark.errors import PySparkException

    from kafkalite.pipeline import job

    config = job.PipelineConfig(
        bootstrap=bootstrap, checkpoint_dir=str(Path(args.checkpoint).resolve()),
        parquet_dir=str(Path(args.parquet).resolve()), input_topic=args.input, output_topic=args.output,
        dead_letter_topic=args.dead_letters, trigger_interval_s=args.trigger_seconds,
        available_now=args.available_now, max_offsets_per_trigger=args.max_offsets_per_trigger)
    try:
        job.check_directories(config)
    except job.PipelineError as e:
        return fail("pipeline run", str(e))
    print(f"starting Spark ({args.master}) ...", flush=True)
    try:
        spark = job.build_session(args.master)
    except PySparkException as e:
        return fail("pipeline run", f"could not start Spark: {_first_line(e)}")
    spark.sparkContext.setLogLevel("ERROR")  # the progress lines below say what happens
    try:
        return _drive(job, spark, config)
    finally:
        spark.stop()


def _drive(job, spark, config) -> int:
    from pyspark.errors import PySparkException

    try:
        pipeline = job.start(spark, config)
    except (PySparkException, job.PipelineError) as e:
        return fail("pipeline run", _first_line(e))
    print(f"running: {config.input_topic} -> {config.output_topic} + {config.parquet_dir}, "
          f"bad records -> {config.dead_letter_topic}; checkpoint {config.checkpoint_dir}"
          + ("" if config.available_now else " (Ctrl-C stops)"), flush=True)
    seen: dict[str, int] = {}
    try:
        while not all(not q.isActive for q in pipeline.queries):
            for query in pipeline.queries:
                if not query.isActive and query.exception() is not None:
                    pipeline.stop()
                    return fail("pipeline run", f"query {query.name} failed: {_first_line(query.exception())}")
            for name, progress in pipeline.new_progress(seen):
                print(job.progress_line(name, progress), flush=True)
            pipeline.aggregates.awaitTermination(PROGRESS_POLL_S)
        for name, progress in pipeline.new_progress(seen):
            print(job.progress_line(name, progress), flush=True)
        for query in pipeline.queries:
            if query.exception() is not None:
                return fail("pipeline run", f"query {query.name} failed: {_first_line(query.exception())}")
    except KeyboardInterrupt:
        print("stopping (a later run resumes from the checkpoint) ...", flush=True)
        pipeline.stop()
        return 0
    except PySparkException as e:
        pipeline.stop()
        return fail("pipeline run", _first_line(e))
    print("done: every record available at the start was processed")
    return 0


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# -- results -------------------------------------------------------------------------------

def read_results(parquet_dir: str) -> list[dict]:
    """Every window row in the pipeline's Parquet directory, sorted by window, type, currency."""
    import pyarrow.dataset as ds

    table = ds.dataset(parquet_dir, format="parquet", partitioning="hive").to_table()
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: (r["window_start"], r["type"], r["currency"]))


def run_results(args: argparse.Namespace) -> int:
    if args.last is not None and args.last <= 0:
        return fail("pipeline results", "--last must be > 0", 2)
    if importlib.util.find_spec("pyarrow") is None:
        return fail("pipeline results", f"pyarrow is not installed: {SPARK_EXTRA}")
    directory = Path(args.parquet)
    if not directory.is_dir() or not any(p.name.startswith("batch=") for p in directory.iterdir()):
        return fail("pipeline results", f"no pipeline results in {args.parquet}")
    rows = read_results(str(directory))
    if not rows:
        return fail("pipeline results", f"no window rows in {args.parquet}")
    if args.last is not None:
        starts = sorted({r["window_start"] for r in rows})[-args.last:]
        rows = [r for r in rows if r["window_start"] >= starts[0]]
    if args.json:
        for r in rows:
            print(json.dumps({**r, "window_start": _iso(r["window_start"]), "window_end": _iso(r["window_end"]),
                              "amount_sum": str(r["amount_sum"])}))
        return 0
    from rich.table import Table

    table = Table("window (UTC)", "type", "currency", "count", "amount", title=f"pipeline results: {args.parquet}")
    for r in rows:
        table.add_row(f"{_iso(r['window_start'])[:19]} +10s", r["type"], r["currency"] or "-", str(r["count"]),
                      f"{r['amount_sum']:.2f}" if r["type"] == "order" else "-")
    total = sum(r["count"] for r in rows)
    amount = sum((r["amount_sum"] for r in rows), Decimal(0))
    table.add_section()
    table.add_row(f"{len({r['window_start'] for r in rows})} windows", "", "", str(total), f"{amount:.2f}")
    console_for_tables().print(table)
    return 0


def _iso(t) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
