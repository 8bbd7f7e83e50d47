"""A real Spark standalone cluster (master + two workers, separate JVMs) runs PySpark tasks
in executor Python workers that can import kafkalite, and leaves no process behind."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("pyspark")

from kafkalite.testing.cluster import pid_alive
from kafkalite.testing.spark_cluster import SparkStandaloneCluster, session_builder, task_location

TASKS = 8
EXECUTORS_WAIT_S = 60


def test_tasks_run_in_executor_python_workers_on_both_workers_and_nothing_is_left(tmp_path):
    import kafkalite

    cluster = SparkStandaloneCluster(tmp_path / "spark", workers=2)
    spark = None
    try:
        cluster.start()
        print(f"\nspark standalone: master + 2 workers ALIVE in {cluster.start_s:.1f} s")
        began = time.monotonic()
        spark = session_builder(cluster, "kafkalite-standalone-smoke").getOrCreate()
        session_s = time.monotonic() - began
        sc = spark.sparkContext
        # Wait until both executors registered, so the job is spread over two JVMs.
        deadline = time.monotonic() + EXECUTORS_WAIT_S
        while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # 2 executors + the driver
            assert time.monotonic() < deadline, "two executors did not register in time"
            time.sleep(0.2)
        executors_s = time.monotonic() - began
        job_began = time.monotonic()
        rows = sc.parallelize(range(TASKS), TASKS).flatMap(task_location).collect()
        job_s = time.monotonic() - job_began
        print(f"session {session_s:.1f} s, two executors {executors_s:.1f} s, first job {job_s:.1f} s; "
              f"hosts {sorted({row[1] for row in rows})}")
        assert len(rows) == TASKS
        pids = {row[0] for row in rows}
        assert os.getpid() not in pids
        assert {row[2] for row in rows} == {kafkalite.__file__}
        assert {row[3] for row in rows} == {cluster.python}  # the venv's interpreter
        # Python workers forked by executor JVMs, which the worker daemons launched: each
        # task's process descends from a worker, not from this driver, and both are used.
        assert len(pids) >= 2
        workers = {cluster.worker_of(pid) for pid in pids}
        assert workers == {"worker-0", "worker-1"}, f"tasks ran under {workers}"
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
    assert cluster.leftover_pids() == []
    assert not any(pid_alive(pid) for pid in cluster.pids)
    print(f"stopped in {cluster.stop_s:.1f} s")


def test_validate_runs_in_executor_python_workers_and_agrees_with_the_driver(spark_standalone):
    from kafkalite.pipeline.events import GeneratorConfig, generate, validate

    records = generate(GeneratorConfig(seed=9, bad_fraction=0.3, late_fraction=0.1), 400)
    spark = session_builder(spark_standalone, "kafkalite-validate-on-executors").getOrCreate()
    try:
        got = spark.sparkContext.parallelize([r.value for r in records], 4).map(validate).collect()
    finally:
        spark.stop()
    assert got == [validate(r.value) for r in records]
