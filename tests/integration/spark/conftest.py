"""One 3-broker cluster (in its own ZooKeeper chroot; brokers 1, 2, 3 in racks a, b, c with
the rack-aware replica selector, so `kafka.client.rack` reads from the closest replica) and
one local SparkSession per test module of the Spark data source: starting either costs
seconds."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from kafkalite.testing.fixtures import module_cluster

pytest.importorskip("pyspark")

BROKER = {"log.retention.check.interval.ms": 500, "replica.selector.class": "RackAwareReplicaSelector"}
RACKS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def spark_kafka(zk_server, tmp_path_factory):
    with module_cluster(zk_server, tmp_path_factory, "spark", overrides=BROKER, racks=RACKS) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def boot(spark_kafka) -> str:
    return spark_kafka.status()["bootstrap"]


@pytest.fixture(scope="module")
def spark() -> Iterator:
    from pyspark.sql import SparkSession

    from kafkalite.spark import KafkaliteDataSource

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (SparkSession.builder.master("local[2]").appName("kafkalite-spark-tests")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.dataSource.register(KafkaliteDataSource)
    try:
        yield session
    finally:
        session.stop()
