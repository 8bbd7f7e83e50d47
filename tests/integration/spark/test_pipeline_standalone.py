"""The pipeline's Spark job on a real Spark standalone cluster (a master and two workers,
separate executor JVMs and Python workers): the validation UDF, the stateful aggregation
and both sinks run in executors that share nothing with the driver but what Spark ships
them, and the result still equals the plain-Python reference of the query's micro-batches.
The checks are those of test_pipeline_job.py (kafkalite.testing.pipeline_checks)."""

from __future__ import annotations

import pytest

from kafkalite.pipeline.events import generate

pytest.importorskip("pyspark")

from kafkalite.pipeline import job
from kafkalite.testing.pipeline_checks import (
    CONFIG,
    assert_dead_letters_are_exactly_the_rejected,
    consume_all,
    expected_and_check,
    micro_batches,
    produce,
    run_available_now,
    topics,
    window_rows_of_parquet,
    window_rows_of_topic,
)


@pytest.fixture(scope="module")
def standalone_spark(spark_standalone):
    from kafkalite.spark import KafkaliteDataSource
    from kafkalite.testing.spark_cluster import session_builder

    session = (session_builder(spark_standalone, "kafkalite-pipeline-standalone")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", str(job.SHUFFLE_PARTITIONS)).getOrCreate())
    session.dataSource.register(KafkaliteDataSource)
    try:
        yield session
    finally:
        session.stop()


def test_pipeline_on_executors_emits_the_reference_windows(standalone_spark, spark_standalone, boot, tmp_path):
    names = topics(boot, "standalone")
    records = generate(CONFIG, 1200)
    located = produce(boot, names["input_topic"], records, 0)
    config = job.PipelineConfig(bootstrap=boot, checkpoint_dir=str(tmp_path / "ck"), parquet_dir=str(tmp_path / "pq"),
                                available_now=True, max_offsets_per_trigger=400, **names)
    progresses = run_available_now(standalone_spark, config)
    batches = micro_batches(progresses, names["input_topic"], located)
    expected_and_check(batches, window_rows_of_topic(consume_all(boot, names["output_topic"])),
                       window_rows_of_parquet(tmp_path / "pq"), progresses)
    assert_dead_letters_are_exactly_the_rejected(boot, names["dead_letter_topic"], records)
    executors = standalone_spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
    assert executors == spark_standalone.workers
