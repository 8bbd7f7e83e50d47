"""The Spark job's pure parts, without Spark: parsing values into the Arrow struct the UDF
returns (exactly `validate`'s verdicts), the output topic's key and value of a window row,
a micro-batch's progress line, and `pipeline results` over a Parquet directory laid out as
the job writes it (batch=N/)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

pa = pytest.importorskip("pyarrow")

from kafkalite.pipeline import job  # noqa: E402
from kafkalite.pipeline.events import (  # noqa: E402
    DETAIL_HEADER,
    REASON_HEADER,
    GeneratorConfig,
    Order,
    Rejection,
    generate,
    validate,
)


def test_parse_values_gives_validates_verdict_for_every_record_in_order():
    records = generate(GeneratorConfig(seed=4, bad_fraction=0.3, late_fraction=0.1), 400)
    values = [r.value for r in records] + [None]
    parsed = job.parse_values(values).to_pylist()
    assert len(parsed) == len(values)
    assert parsed[-1]["reason"] == "not_json"  # a null value is rejected as b"" is
    for value, row in zip(values[:-1], parsed):
        verdict = validate(value)
        if isinstance(verdict, Rejection):
            assert (row["reason"], row["detail"]) == (verdict.reason, verdict.detail)
            assert row["event_type"] is None
            assert row["event_time"] is None
            continue
        assert row["reason"] is None
        assert row["event_type"] == verdict.event_type
        assert int(row["event_time"].timestamp() * 1000) == verdict.event_time_ms
        if isinstance(verdict, Order):
            assert (row["currency"], row["amount"]) == (verdict.currency, verdict.amount)
        else:
            assert (row["currency"], row["amount"]) == ("", Decimal(0))


def test_parse_values_holds_the_largest_valid_amount_exactly():
    value = (b'{"type":"order","order_id":"o","customer":"c","amount":999999999999999.99,"currency":"EUR",'
             b'"event_time":"2026-11-24T05:00:01Z"}')
    [row] = job.parse_values([value]).to_pylist()
    assert row["amount"] == Decimal("999999999999999.99")
    assert job.parse_values([value]).type == job.PARSED_ARROW_TYPE
    assert job.parse_values([]).to_pylist() == []


def test_parse_arrow_is_parse_values_over_an_arrow_array():
    values = [r.value for r in generate(GeneratorConfig(seed=1, bad_fraction=0.5), 50)]
    assert job.parse_arrow(pa.array(values, pa.binary())).equals(job.parse_values(values))


def test_window_key_and_record_are_the_output_topics_key_and_value():
    start_ms = 1_795_496_400_000
    assert job.window_key(start_ms, "order", "EUR") == "2026-11-24T05:00:00.000Z|order|EUR"
    assert job.window_key(start_ms, "click", "") == "2026-11-24T05:00:00.000Z|click|"
    record = job.window_record(start_ms, "order", "EUR", 3, Decimal("10.50"))
    assert record == {"window_start": "2026-11-24T05:00:00.000Z", "window_end": "2026-11-24T05:00:10.000Z",
                      "type": "order", "currency": "EUR", "count": 3, "amount_sum": Decimal("10.50")}


def test_headers_are_the_events_modules_names():
    assert (REASON_HEADER, DETAIL_HEADER) == ("error.reason", "error.detail")


def test_progress_line_shows_watermark_and_late_rows_for_the_aggregation():
    plain = {"batchId": 3, "numInputRows": 120, "processedRowsPerSecond": 40.4}
    assert job.progress_line("dead-letters", plain) == "dead-letters batch 3: 120 records (40/s)"
    stateful = {**plain, "eventTime": {"watermark": "2026-11-24T05:00:00.000Z"},
                "stateOperators": [{"numRowsDroppedByWatermark": 2, "numRowsTotal": 5}]}
    assert job.progress_line("aggregates", stateful) == (
        "aggregates batch 3: 120 records (40/s), watermark 2026-11-24T05:00:00.000Z, 2 late rows dropped, 5 open windows")


def test_config_refuses_one_topic_for_two_roles():
    with pytest.raises(AssertionError):
        job.PipelineConfig(bootstrap="b", checkpoint_dir="c", parquet_dir="p", output_topic=job.job_defaults.INPUT_TOPIC)


def test_a_new_checkpoint_refuses_a_parquet_directory_with_results(tmp_path):
    config = job.PipelineConfig(bootstrap="b", checkpoint_dir=str(tmp_path / "ck"), parquet_dir=str(tmp_path / "pq"))
    job.check_directories(config)  # neither exists: fine
    (tmp_path / "pq" / "batch=0").mkdir(parents=True)
    with pytest.raises(job.PipelineError, match="holds results of another run"):
        job.check_directories(config)
    (tmp_path / "ck" / job.AGGREGATES_QUERY).mkdir(parents=True)
    (tmp_path / "ck" / job.AGGREGATES_QUERY / "metadata").write_text("{}")
    job.check_directories(config)  # resuming: the old batches are its own


def _write_batch(directory, batch_id: int, rows: list[dict]) -> None:
    import datetime as dt

    import pyarrow.parquet as pq

    table = pa.table({
        "window_start": pa.array([dt.datetime.fromtimestamp(r["start"], dt.UTC) for r in rows], pa.timestamp("us", tz="UTC")),
        "window_end": pa.array([dt.datetime.fromtimestamp(r["start"] + 10, dt.UTC) for r in rows], pa.timestamp("us", tz="UTC")),
        "type": [r["type"] for r in rows], "currency": [r["currency"] for r in rows],
        "count": pa.array([r["count"] for r in rows], pa.int64()),
        "amount_sum": pa.array([r["amount"] for r in rows], pa.decimal128(27, 2))})
    (directory / f"batch={batch_id}").mkdir(parents=True)
    pq.write_table(table, directory / f"batch={batch_id}" / "part-00000.parquet")
    (directory / f"batch={batch_id}" / "_SUCCESS").write_text("")


def test_results_prints_the_rows_of_every_batch(tmp_path, capsys):
    from kafkalite.cli.main import main

    _write_batch(tmp_path, 0, [{"start": 1_795_496_400, "type": "order", "currency": "EUR", "count": 2, "amount": Decimal("3.50")},
                               {"start": 1_795_496_400, "type": "click", "currency": "", "count": 7, "amount": Decimal(0)}])
    _write_batch(tmp_path, 2, [{"start": 1_795_496_410, "type": "order", "currency": "USD", "count": 1, "amount": Decimal("0.01")}])
    assert main(["pipeline", "results", "--parquet", str(tmp_path), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["window_start"], r["type"], r["currency"], r["count"], r["amount_sum"], r["batch"]) for r in rows] == [
        ("2026-11-24T05:00:00.000Z", "click", "", 7, "0.00", 0),
        ("2026-11-24T05:00:00.000Z", "order", "EUR", 2, "3.50", 0),
        ("2026-11-24T05:00:10.000Z", "order", "USD", 1, "0.01", 2)]
    assert main(["pipeline", "results", "--parquet", str(tmp_path), "--last", "1"]) == 0
    table = capsys.readouterr().out
    assert "USD" in table
    assert "EUR" not in table
    assert main(["pipeline", "results", "--parquet", str(tmp_path)]) == 0
    assert "3.51" in capsys.readouterr().out  # the total


def test_results_of_an_empty_directory_is_a_one_line_error(tmp_path, capsys):
    from kafkalite.cli.main import main

    assert main(["pipeline", "results", "--parquet", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err.strip() == f"kafkalite pipeline results: no pipeline results in {tmp_path / 'none'}"


def test_run_usage_errors_exit_2_before_touching_the_cluster(capsys):
    from kafkalite.cli.main import main

    assert main(["pipeline", "run", "--checkpoint", "c", "--parquet", "p", "--output", "pipeline-input"]) == 2
    assert "three different topics" in capsys.readouterr().err
    assert main(["pipeline", "run", "--checkpoint", "c", "--parquet", "p", "--trigger-seconds", "0"]) == 2


def test_run_against_nothing_listening_is_a_one_line_error(capsys):
    from kafkalite.cli.main import main
    from kafkalite.testing.ports import free_ports

    [port] = free_ports(1)
    assert main(["pipeline", "run", "--checkpoint", "c", "--parquet", "p", "--bootstrap", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kafkalite pipeline run: no broker reachable")
    assert "\n" not in err
