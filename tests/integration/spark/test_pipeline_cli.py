"""`kafkalite pipeline run | results` as a user runs them (subprocesses) against
a real cluster: `run --available-now` creates its topics, processes the input and exits 0
with one line per micro-batch; `results` prints what the reference says the job emits; a
new checkpoint over an old Parquet directory is a one-line error, not a traceback."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from kafkalite.pipeline.events import Rejection, generate, validate
from kafkalite.pipeline.reference import append_mode_output
from kafkalite.testing.cli_runner import failed_with, ok, run_cli
from kafkalite.testing.pipeline_checks import CONFIG, produce

pytest.importorskip("pyspark")

RECORDS = 1200
RUN_TIMEOUT_S = 300


def test_run_available_now_then_results_from_the_command_line(boot, tmp_path):
    ok("topics", "create", "cli-in", "--partitions", "3", "--replication-factor", "3", boot=boot)
    records = generate(CONFIG, RECORDS)  # 48 s of event time (`pipeline generate` would take that long to pace it)
    produce(boot, "cli-in", records, 0)
    topics = ("--input", "cli-in", "--output", "cli-windows", "--dead-letters", "cli-dead")
    r = run_cli("pipeline", "run", *topics, "--checkpoint", str(tmp_path / "ck"), "--parquet", str(tmp_path / "pq"),
                "--available-now", boot=boot, timeout_s=RUN_TIMEOUT_S)
    assert r.returncode == 0, f"rc {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    assert "Traceback" not in r.stderr
    out = r.stdout.splitlines()
    assert "created topic cli-windows" in out
    assert "created topic cli-dead" in out
    assert any(line.startswith(f"aggregates batch 0: {RECORDS} records") for line in out), out
    assert any(line.startswith(f"dead-letters batch 0: {RECORDS} records") for line in out), out
    assert out[-1] == "done: every record available at the start was processed"

    # One data micro-batch (no --max-offsets-per-trigger), then the no-data batch that emits.
    events = [e for e in (validate(r.value) for r in records) if not isinstance(e, Rejection)]
    want = append_mode_output([events]).emitted
    assert len({k.window_start_ms for k in want}) >= 3, "on-time windows closed, and the late events' ones"
    rows = [json.loads(line) for line in ok("pipeline", "results", "--parquet", str(tmp_path / "pq"), "--json").splitlines()]
    got = {(row["window_start"], row["type"], row["currency"]): (row["count"], Decimal(row["amount_sum"])) for row in rows}
    assert got == {(_iso(k.window_start_ms), k.event_type, k.currency): (a.count, a.amount_sum) for k, a in want.items()}
    table = ok("pipeline", "results", "--parquet", str(tmp_path / "pq"))
    assert f"{sum(a.count for a in want.values())}" in table

    failed_with("holds results of another run", "pipeline", "run", *topics, "--checkpoint", str(tmp_path / "new-ck"),
                "--parquet", str(tmp_path / "pq"), "--available-now", boot=boot)


def _iso(ms: int) -> str:
    from kafkalite.pipeline.events import format_event_time

    return format_event_time(ms)
