"""pytest plugin: real-ZooKeeper fixtures shared by every test layer.

Loaded by tests/conftest.py (`pytest_plugins = ["kafkalite.testing.fixtures"]`).

- `zk_server`: one standalone server for the whole session (tick 500 ms, so a 1 s session
  expires in about a second), stopped at session end even when tests fail.
- `zk_connect`: a connect string with a fresh chroot per test ("127.0.0.1:port/t-<hex>"),
  so tests sharing the server never see each other's znodes.
- `zk_client`: a started KazooClient on that chroot, stopped after the test.
- `zk_client_factory`: makes more clients on the same chroot (racing controllers, ...).
- `zk_ensemble`: a fresh three-member ensemble per test, for quorum-loss scenarios.

Chroots are not deleted after a test: the session server and its data dir are thrown away
at the end, and deleting thousands of znodes one by one would only cost time. Leaked JVMs
are impossible by construction: every fixture stops its servers in `finally`, and
kafkalite.testing.zookeeper kills any server this process started at interpreter exit.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from kazoo.client import KazooClient

from kafkalite.testing.zookeeper import ZooKeeperEnsemble, ZooKeeperServer

if TYPE_CHECKING:
    from kafkalite.testing.cluster import LocalCluster

TEST_TICK_TIME_MS = 500
# The smallest session timeout the server accepts at this tick (2 ticks).
TEST_SESSION_TIMEOUT_S = 2 * TEST_TICK_TIME_MS / 1000
CLIENT_START_TIMEOUT_S = 15.0
# Clients in tests use a few-second session: long enough not to flap on a loaded machine,
# short enough that an expiry test using its own client can pick 1 s instead.
CLIENT_SESSION_TIMEOUT_S = 6.0


def start_client(connect: str, *, session_timeout_s: float = CLIENT_SESSION_TIMEOUT_S, **kwargs) -> KazooClient:
    """A started KazooClient; stopped and closed again if it cannot connect."""
    client = KazooClient(hosts=connect, timeout=session_timeout_s, **kwargs)
    try:
        client.start(timeout=CLIENT_START_TIMEOUT_S)
    except BaseException:
        stop_client(client)
        raise
    return client


def stop_client(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), tick_time_ms=TEST_TICK_TIME_MS)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def fresh_chroot(zk_server: ZooKeeperServer, prefix: str) -> str:
    """A connect string to a new, empty chroot `/<prefix>-<hex>` of the server."""
    chroot = f"/{prefix}-{uuid.uuid4().hex}"
    client = start_client(zk_server.connect_string)
    try:
        client.create(chroot)
    finally:
        stop_client(client)
    return zk_server.connect_string + chroot


@pytest.fixture
def zk_connect(zk_server: ZooKeeperServer) -> str:
    return fresh_chroot(zk_server, "t")


@pytest.fixture
def zk_client_factory(zk_connect: str) -> Iterator[Callable[..., KazooClient]]:
    """`make(**kazoo_kwargs)` -> a started client on this test's chroot; all stopped after."""
    clients: list[KazooClient] = []

    def make(**kwargs) -> KazooClient:
        client = start_client(zk_connect, **kwargs)
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in clients:
            stop_client(client)


@pytest.fixture
def zk_client(zk_client_factory: Callable[..., KazooClient]) -> KazooClient:
    return zk_client_factory()


@pytest.fixture
def zk_ensemble(tmp_path) -> Iterator[ZooKeeperEnsemble]:
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble", n=3, tick_time_ms=TEST_TICK_TIME_MS)
    try:
        ensemble.start()
        yield ensemble
    finally:
        ensemble.stop()


# -- real broker clusters ------------------------------------------------------------------

# Broker settings for tests: short enough that failures are noticed within seconds on a
# loaded 2-core machine, long enough not to flap.
TEST_BROKER_OVERRIDES = {
    "zookeeper.session.timeout.ms": 3000,
    "replica.lag.time.max.ms": 4000,
    "replica.fetch.wait.max.ms": 200,
    "controlled.shutdown.retry.backoff.ms": 200,
    "leader.imbalance.check.interval.seconds": 3600,
    "log.level": "INFO",
}


@pytest.fixture
def cluster_factory(zk_connect: str, tmp_path) -> Iterator[Callable[..., LocalCluster]]:
    """`make(brokers=3, overrides={...}, racks=None)` -> a started LocalCluster of real broker
    processes on free loopback ports, sharing the session ZooKeeper under this test's chroot.
    Every process it started is stopped after the test, pass or fail."""
    from kafkalite.testing.cluster import LocalCluster
    from kafkalite.testing.ports import free_ports

    clusters: list[LocalCluster] = []

    def make(brokers: int = 3, overrides: dict | None = None, racks: list[str] | None = None, name: str = "cluster") -> LocalCluster:
        ports = free_ports(3 * brokers)
        triples = [(ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(brokers)]
        merged = dict(TEST_BROKER_OVERRIDES)
        merged.update(overrides or {})
        chroot = zk_connect
        if clusters:  # a second cluster in one test gets its own chroot below the test's
            chroot = f"{zk_connect}/{name}-{len(clusters)}"
            client = start_client(zk_connect)
            try:
                client.ensure_path(f"/{name}-{len(clusters)}")
            finally:
                stop_client(client)
        c = LocalCluster(tmp_path / f"{name}-{len(clusters)}", brokers=brokers, racks=racks, overrides=merged, zk_connect=chroot, ports=triples)
        clusters.append(c)
        c.up()
        return c

    try:
        yield make
    finally:
        for c in clusters:
            try:
                c.down(graceful=False)  # the test is over: no controlled shutdowns (~1 s per cluster)
            except Exception:  # noqa: BLE001 - keep stopping the others
                pass


@contextmanager
def module_cluster(zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, name: str, *,
                   overrides: dict | None = None, brokers: int = 3, **kwargs: Any) -> Iterator[LocalCluster]:
    """A started cluster one test module shares: real brokers on free loopback ports, under a
    fresh chroot `name` of the session ZooKeeper, with TEST_BROKER_OVERRIDES under
    `overrides`; other LocalCluster arguments pass through. Stopped at the end, pass or fail."""
    from kafkalite.testing.cluster import LocalCluster
    from kafkalite.testing.ports import free_ports

    ports = free_ports(3 * brokers)
    c = LocalCluster(tmp_path_factory.mktemp(name), brokers=brokers, overrides={**TEST_BROKER_OVERRIDES, **(overrides or {})},
                     zk_connect=fresh_chroot(zk_server, name),
                     ports=[(ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(brokers)], **kwargs)
    try:
        c.up()
        yield c
    finally:
        c.down(graceful=False)


@pytest.fixture
def cluster(cluster_factory) -> LocalCluster:
    """Three real brokers on the session ZooKeeper."""
    return cluster_factory(3)


# -- a real Spark standalone cluster -----------------------------------------------------------

@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory):
    """A Spark standalone master and two 1-core workers (separate JVMs, loopback, free ports),
    shared by every test that asks for it (about 11 s to start on the 2-core test machines,
    and idle in between: each test module builds and stops its own application on it); every
    process it started is stopped at the end of the session, pass or fail. Build sessions on it with
    kafkalite.testing.spark_cluster.session_builder(cluster, app_name)."""
    pytest.importorskip("pyspark")
    from kafkalite.testing.spark_cluster import SparkStandaloneCluster

    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
