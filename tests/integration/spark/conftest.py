"""One 3-broker cluster (in its own ZooKeeper chroot; brokers 1, 2, 3 in racks a, b, c with
the rack-aware replica selector, so `kafka.client.rack` reads from the closest replica) and
one local SparkSession per test module of the Spark data source: starting either costs
seconds."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from kafkalite.testing.fixtures import TEST_BROKER_OVERRIDES, fresh_chroot

pytest.importorskip("pyspark")

BROKER = {"log.retention.check.interval.ms": 500, "replica.selector.class": "RackAwareReplicaSelector"}
RACKS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def spark_kafka(zk_server, tmp_path_factory):
    from kafkalite.testing.cluster import LocalCluster
    from kafkalite.testing.ports import free_ports

    zk_connect = fresh_chroot(zk_server, "spark")
    ports = free_ports(9)
    cluster = LocalCluster(tmp_path_factory.mktemp("spark-cluster"), brokers=3, racks=RACKS,
                           overrides={**TEST_BROKER_OVERRIDES, **BROKER},
                           zk_connect=zk_connect,
                           ports=[(ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(3)])
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


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
