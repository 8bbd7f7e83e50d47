"""The pipeline's Spark job (kafkalite.pipeline.job) end to end, against a real 3-broker
cluster and a real local SparkSession: seeded events (with malformed and late ones) in the
input topic; the job's windows, in the output topic and in Parquet, equal the plain-Python
reference computed over the very micro-batches the query ran (their boundaries taken from
the query's progress: each batch's source start and end offsets, mapped back to the
produced records); the dead-letter topic holds exactly the rejected records with their
reasons; a run stopped, fed more input and restarted from its checkpoint loses and repeats
nothing.

One cluster (conftest's `boot`) and one SparkSession for the module: starting either costs
seconds. The checks live in kafkalite.testing.pipeline_checks.
"""

from __future__ import annotations

import pytest

from kafkalite.pipeline.events import Rejection, generate, validate
from kafkalite.pipeline.reference import aggregate

pytest.importorskip("pyspark")

from kafkalite.cli.pipeline_run import read_results
from kafkalite.pipeline import job
from kafkalite.testing.pipeline_checks import (
    CONFIG,
    QUERY_TIMEOUT_S,
    assert_dead_letters_are_exactly_the_rejected,
    consume_all,
    duplicated_keys,
    expected_and_check,
    micro_batches,
    produce,
    run_available_now,
    topics,
    window_rows_of_parquet,
    window_rows_of_topic,
)


@pytest.fixture(scope="module")
def spark():
    """The job's own session (overrides conftest's): what `kafkalite pipeline run` builds."""
    session = job.build_session("local[2]", app_name="kafkalite-pipeline-tests")
    try:
        yield session
    finally:
        session.stop()


# -- tests ---------------------------------------------------------------------------------

def test_batch_read_through_the_jobs_transformations_equals_the_reference(spark, boot, tmp_path):
    """The transformations are DataFrame functions: on a batch read of the input (where the
    watermark does nothing) they give every event in its window, and the foreachBatch sink
    writes those rows to the output topic and to Parquet."""
    names = topics(boot, "batch")
    records = generate(CONFIG, 600)
    produce(boot, names["input_topic"], records, 0)
    source = (spark.read.format("kafkalite").option("kafka.bootstrap.servers", boot)
              .option("subscribe", names["input_topic"]).load())
    windows = job.window_aggregates(job.parsed_events(source))
    config = job.PipelineConfig(bootstrap=boot, checkpoint_dir=str(tmp_path / "ck"), parquet_dir=str(tmp_path / "pq"), **names)
    job.WindowSink(config)(windows, 0)
    events = [e for e in (validate(r.value) for r in records) if not isinstance(e, Rejection)]
    want = {k: (a.count, a.amount_sum) for k, a in aggregate(events).items()}
    assert window_rows_of_parquet(tmp_path / "pq") == want
    assert window_rows_of_topic(consume_all(boot, names["output_topic"])) == want
    (job.dead_letters(source).write.format("kafkalite").option("kafka.bootstrap.servers", boot)
     .option("topic", names["dead_letter_topic"]).mode("append").save())
    assert_dead_letters_are_exactly_the_rejected(boot, names["dead_letter_topic"], records)


def test_available_now_emits_the_reference_windows_of_its_micro_batches(spark, boot, tmp_path):
    names = topics(boot, "once")
    records = generate(CONFIG, 1600)
    located = produce(boot, names["input_topic"], records, 0)
    config = job.PipelineConfig(bootstrap=boot, checkpoint_dir=str(tmp_path / "ck"), parquet_dir=str(tmp_path / "pq"),
                                available_now=True, max_offsets_per_trigger=400, **names)
    progresses = run_available_now(spark, config)
    batches = micro_batches(progresses, names["input_topic"], located)
    assert sum(1 for b in batches if b) >= 4, "several data batches, so late rows are dropped"
    expected_and_check(batches, window_rows_of_topic(consume_all(boot, names["output_topic"])),
                       window_rows_of_parquet(tmp_path / "pq"), progresses)
    assert_dead_letters_are_exactly_the_rejected(boot, names["dead_letter_topic"], records)


def test_stopped_then_fed_then_restarted_from_the_checkpoint_loses_and_repeats_nothing(spark, boot, tmp_path):
    names = topics(boot, "restart")
    records = generate(CONFIG, 1600)
    first, second = records[:800], records[800:]
    config = job.PipelineConfig(bootstrap=boot, checkpoint_dir=str(tmp_path / "ck"), parquet_dir=str(tmp_path / "pq"),
                                available_now=True, max_offsets_per_trigger=400, **names)
    located = produce(boot, names["input_topic"], first, 0)
    progresses = run_available_now(spark, config)
    windows_after_first = window_rows_of_parquet(tmp_path / "pq")
    assert windows_after_first, "the first run emitted windows"

    located.update(produce(boot, names["input_topic"], second, len(first)))
    progresses += run_available_now(spark, config)  # the same checkpoint: resumes after the first run
    batches = micro_batches(progresses, names["input_topic"], located)  # every record read once, across both runs
    got_parquet = window_rows_of_parquet(tmp_path / "pq")
    assert {k: v for k, v in got_parquet.items() if k in windows_after_first} == windows_after_first
    result = expected_and_check(batches, window_rows_of_topic(consume_all(boot, names["output_topic"])), got_parquet,
                                progresses)
    assert_dead_letters_are_exactly_the_rejected(boot, names["dead_letter_topic"], records)
    # nothing lost: every accepted event is in an emitted window, dropped as late, or in a
    # window still open (append mode emits it once a later event moves the watermark past it)
    accepted = sum(len(b) for b in batches)
    assert accepted == sum(c for c, _ in got_parquet.values()) + len(result.dropped_late) + \
        sum(a.count for a in result.open_windows.values())


class FailsOnceAfterWriting(job.WindowSink):
    """Writes micro-batch `batch_id` to Parquet and the output topic, then fails it, once: a
    crash after the sinks' writes and before Spark's commit of the batch."""

    def __init__(self, config: job.PipelineConfig, batch_id: int) -> None:
        super().__init__(config)
        self.batch_id = batch_id
        self.failed = False

    def __call__(self, windows, batch_id: int) -> None:
        super().__call__(windows, batch_id)
        if batch_id == self.batch_id and not self.failed:
            self.failed = True
            raise RuntimeError("injected failure after the batch was written")


def test_a_batch_rerun_after_a_failure_repeats_its_topic_rows_but_not_its_parquet(spark, boot, tmp_path):
    """The at-least-once output topic, counted: the failed batch's rows appear twice (byte
    for byte), every other row once; Parquet, overwritten per batch, has each row once."""
    names = topics(boot, "rerun")
    records = generate(CONFIG, 1600)
    located = produce(boot, names["input_topic"], records, 0)
    config = job.PipelineConfig(bootstrap=boot, checkpoint_dir=str(tmp_path / "ck"), parquet_dir=str(tmp_path / "pq"),
                                available_now=True, max_offsets_per_trigger=400, **names)
    pipeline = job.start(spark, config, FailsOnceAfterWriting(config, batch_id=2))
    try:
        with pytest.raises(Exception, match="injected failure"):
            pipeline.aggregates.awaitTermination(QUERY_TIMEOUT_S)
        assert pipeline.dead_letters.awaitTermination(QUERY_TIMEOUT_S)
    finally:
        pipeline.stop()
    progresses = list(pipeline.aggregates.recentProgress)
    assert max(p["batchId"] for p in progresses) == 1, "batch 2 failed before its commit"
    progresses += run_available_now(spark, config)  # restarts at batch 2, with the same offsets

    messages = consume_all(boot, names["output_topic"])
    rerun_rows = [r for r in read_results(str(tmp_path / "pq")) if r["batch"] == 2]
    assert rerun_rows, "the failed batch emitted windows"
    rerun_keys = {job.window_key(int(r["window_start"].timestamp() * 1000), r["type"], r["currency"]).encode()
                  for r in rerun_rows}
    assert duplicated_keys(messages) == dict.fromkeys(rerun_keys, 2)
    batches = micro_batches(progresses, names["input_topic"], located)
    expected_and_check(batches, window_rows_of_topic(messages, duplicates_allowed=True),
                       window_rows_of_parquet(tmp_path / "pq"), progresses)
    assert_dead_letters_are_exactly_the_rejected(boot, names["dead_letter_topic"], records)

