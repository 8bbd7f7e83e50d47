"""docker-compose.yml and the Dockerfile, proven by building the images and running them.

Runs wherever a container engine can run (kafkalite.testing.container_engine): the Docker
that already answers, or, as root on Debian, a private dockerd this test starts (and always
stops, removing its bridges and iptables chains). Base image: a minimal Debian made with
debootstrap from the host's apt mirror (no image registry needed), with Python and
Debian's ZooKeeper; the broker image installs from a wheelhouse built here with `pip
wheel`. Skips, with the reason printed, only when no engine can run.

One `up` runs the base services and both profiles, `monitoring` and `spark`, with images
built here: Prometheus from Debian's `prometheus` package (docker/prometheus-debian), Spark
from docker/spark/Dockerfile (pyspark and pyarrow from a host wheelhouse, Java from the
base). Grafana is the one service not run: there is no Grafana package to build it from
(its dashboard's queries are checked instead, below and in tests/unit).

Checks: host clients (confluent-kafka) get the host-advertised listener and produce and
consume; containers get the internal listener (the CLI inside a broker container);
Prometheus scrapes all three brokers (every target up, a query returns a series per
broker) and evaluates every query of the Grafana dashboard, whose metric names a live
broker's /metrics all has; the spark profile's job (`kafkalite pipeline generate`, then
`kafkalite pipeline run` on the standalone master and worker, reading and writing with the
`kafkalite` format over the INTERNAL listener) puts every malformed record in the
dead-letter topic and its closed windows in the output topic, the same rows as its Parquet,
and exits 0; `docker kill` of a partition leader: failover, and acks=all writes go on; the
killed broker started again rejoins every ISR; `docker stop` (SIGTERM) is a controlled
shutdown; `down -v`. Timings of each phase are printed (pytest -s) and kept in
test-artifacts/compose/.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
import urllib.parse
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.container_engine import Engine, EngineError, build_debootstrap_image, find_engine, release
from kafkalite.testing.dashboard_metrics import dashboard_exprs, missing_from
from kafkalite.testing.ports import free_ports

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
BASE_PACKAGES = ["python3", "python3-venv", "bash", "zookeeper", "default-jre-headless", "prometheus"]
# The package list is in the tag: the cached base image is reused only if it has them all.
BASE_IMAGE = f"kafkalite-test-base:bookworm-{hashlib.sha256(' '.join(BASE_PACKAGES).encode()).hexdigest()[:10]}"
BROKER_IMAGE = "kafkalite-test:latest"
ZOOKEEPER_IMAGE = "kafkalite-test-zookeeper:latest"
PROMETHEUS_IMAGE = "kafkalite-test-prometheus:latest"
SPARK_IMAGE = "kafkalite-test-spark:latest"
# Everything but grafana (no image of it can be built here): both profiles in one `up`.
SERVICES = ["zookeeper", "broker1", "broker2", "broker3", "prometheus", "spark-master", "spark-worker", "spark-job"]
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "kafkalite.json"
TOPIC = "compose-orders"
PIPELINE_RATE, PIPELINE_SECONDS = 200, 5  # the spark job's input: rate * seconds events, and 1 s more
PIPELINE_WINDOWS = "pipeline-windows"
PIPELINE_DEAD_LETTERS = "pipeline-dead-letters"
HEALTHY_TIMEOUT_S = 240.0
FAILOVER_TIMEOUT_S = 60.0
REJOIN_TIMEOUT_S = 120.0
SCRAPE_TIMEOUT_S = 90.0
SPARK_JOB_TIMEOUT_S = 480.0
UP_ATTEMPTS = 3


def _artifacts() -> Path:
    d = Path(os.environ.get("KAFKALITE_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "compose"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _wait(cond, timeout_s: float, what: str, interval_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            got = cond()
        except Exception as e:  # noqa: BLE001 - brokers restarting: try again until the deadline
            got, last = None, e
        if got:
            return got
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last error: {last!r})")


class Compose:
    def __init__(self, engine: Engine, project: str, env: dict[str, str]):
        self.engine = engine
        self.project = project
        self.env = env

    def run(self, *args: str, timeout_s: float = 900.0, check: bool = True) -> subprocess.CompletedProcess:
        # Both profiles on for every command: `logs`, `ps` and `down` see their services too.
        return self.engine.compose_run("-p", self.project, "-f", str(ROOT / "docker-compose.yml"),
                                       "--profile", "monitoring", "--profile", "spark", *args, timeout_s=timeout_s,
                                       check=check, cwd=ROOT, env=self.env)

    def container(self, service: str) -> str:
        cid = self.run("ps", "-q", service).stdout.strip().splitlines()
        assert cid, f"no container for {service}"
        return cid[-1]

    def health(self, service: str) -> str:
        out = self.engine.run("inspect", "-f", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}",
                              self.container(service), check=False)
        return out.stdout.strip()


def _metadata(boot: str) -> dict[int, dict]:
    admin = AdminClient({"bootstrap.servers": boot})
    md = admin.list_topics(TOPIC, timeout=10)
    topic = md.topics[TOPIC]
    assert topic.error is None, topic.error
    return {p: {"leader": m.leader, "isr": sorted(m.isrs), "replicas": sorted(m.replicas)} for p, m in topic.partitions.items()}


def _produce(boot: str, start: int, count: int) -> None:
    errors: list = []
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 60000})
    for i in range(start, start + count):
        producer.produce(TOPIC, key=str(i).encode(), value=f"order-{i}".encode(), partition=i % 3,
                         on_delivery=lambda err, msg: errors.append(err) if err is not None else None)
    assert producer.flush(90) == 0, "messages left undelivered"
    assert errors == [], errors


def _consume_all(boot: str, expected: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": boot, "group.id": f"compose-check-{time.time_ns()}", "enable.auto.commit": False})
    got: list[str] = []
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
    finally:
        consumer.close()
    return got


def _pip_wheel(wheel_dir: Path, *requirements: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheel_dir), *requirements],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"


def _wheels() -> float:
    """The host wheelhouses the images install from; the seconds it took."""
    t = time.monotonic()
    _pip_wheel(ROOT / "build" / "wheelhouse", str(ROOT))
    # The `spark` extra's own requirements (pyspark, pyarrow): a wheelhouse that changes only
    # when they do, so the Spark image's big layer stays cached while kafkalite changes.
    spark_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["spark"]
    _pip_wheel(ROOT / "build" / "wheelhouse-spark", *spark_extra)
    return time.monotonic() - t


def _build(engine: Engine, timings: dict[str, float], wheels: Future) -> None:
    """The base image (debootstrap) while the wheelhouses are made (`wheels`, started before
    the engine), then the four images, the broker's and Spark's side by side (both only
    add layers to the base). On a cold machine one after the other: wheels 10.4 s, then
    the four images 49.2 s; this way the wheels hide behind the engine's start and
    debootstrap, and the four images take 34.0 s."""
    timings["debootstrap base image"] = build_debootstrap_image(engine, BASE_IMAGE, BASE_PACKAGES)
    timings["pip wheel (host, during the above)"] = wheels.result()

    def build(name: str, ref: str, where: list[str]) -> tuple[str, float]:
        t = time.monotonic()
        engine.run("build", "-t", ref, "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", *where, timeout_s=1200)
        return name, time.monotonic() - t

    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="image-build") as pool:
        side_by_side = [pool.submit(build, "spark", SPARK_IMAGE, ["-f", str(ROOT / "docker" / "spark" / "Dockerfile"), str(ROOT)]),
                        pool.submit(build, "broker", BROKER_IMAGE, ["-f", str(ROOT / "Dockerfile"), str(ROOT)])]
        for name, took in (f.result() for f in side_by_side):
            timings[f"{name} image build"] = took
    for name, ref, where in [("zookeeper", ZOOKEEPER_IMAGE, [str(ROOT / "docker" / "zookeeper-debian")]),
                             ("prometheus", PROMETHEUS_IMAGE, [str(ROOT / "docker" / "prometheus-debian")])]:
        timings[f"{name} image build"] = build(name, ref, where)[1]
    timings["image builds (all four)"] = time.monotonic() - t
    # Layers of images replaced by this build (a new kafkalite wheel), and base images of
    # another package list: not kept in the cache.
    engine.run("image", "prune", "-f", check=False)  # first: they may be children of a stale base
    bases = engine.run("images", "--format", "{{.Repository}}:{{.Tag}}", BASE_IMAGE.split(":")[0], check=False).stdout.split()
    for stale in (b for b in bases if b != BASE_IMAGE):
        engine.run("rmi", stale, check=False)


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _prometheus_query(prometheus: str, query: str) -> list[dict]:
    answer = _get_json(f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
    assert answer["status"] == "success", (query, answer)
    return answer["data"]["result"]


def _scrapes_all_brokers(prometheus: str) -> bool:
    """Every broker a target, each up, and each with a kafkalite_partitions series."""
    targets = _get_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]
    expected = {f"broker{i}:9292" for i in (1, 2, 3)}
    if {t["labels"]["instance"] for t in targets} != expected or any(t["health"] != "up" for t in targets):
        return False
    series = _prometheus_query(prometheus, "kafkalite_partitions")
    return {s["metric"]["instance"] for s in series} == expected and all(float(s["value"][1]) >= 3 for s in series)


def _check_monitoring(prometheus: str, admin_port: int) -> None:
    """Prometheus scrapes all three brokers; the Grafana dashboard's queries use exported
    metrics only and Prometheus evaluates each of them."""
    _wait(lambda: _scrapes_all_brokers(prometheus), SCRAPE_TIMEOUT_S, "Prometheus scraping brokers 1, 2 and 3", interval_s=2)
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10) as r:
        exposition = r.read().decode()
    assert missing_from(DASHBOARD, exposition) == {}
    for expr in dashboard_exprs(DASHBOARD):
        _prometheus_query(prometheus, expr.replace("$__rate_interval", "1m"))


def _read_topic(boot: str, topic: str) -> list[tuple[bytes, bytes]] | None:
    """Every (key, value) in `topic` now, or None if there is no such topic yet."""
    consumer = Consumer({"bootstrap.servers": boot, "group.id": f"compose-read-{time.time_ns()}", "enable.auto.commit": False})
    got: list[tuple[bytes, bytes]] = []
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        if md.error is not None:
            return None
        consumer.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        idle_until = time.monotonic() + 3
        while time.monotonic() < idle_until:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value()))
                idle_until = time.monotonic() + 3
    finally:
        consumer.close()
    return got


def _spark_job_exit_code(compose: Compose) -> str | None:
    """The spark job's exit code once it has exited, else None. (`_wait` retries on
    exceptions, so the caller checks the code: a failed job fails the test at once.)"""
    status, code = compose.engine.run("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", compose.container("spark-job")).stdout.split()
    return code if status == "exited" else None


def _check_pipeline(boot: str, logs: str) -> None:
    """What `kafkalite pipeline run` left: every malformed record generated is in the dead
    letters; the closed windows are in the output topic, the same rows as in its Parquet
    (which `pipeline results --json` printed), counting no more than the good events. The
    topics are at-least-once (a run the job script restarts may send a batch again), so
    they are compared as sets: dead letters by (key, value), windows by key."""
    lines = [line.split("|", 1)[-1].strip() for line in logs.splitlines()]
    generated = [json.loads(line) for line in lines if line.startswith("{") and '"bad_by_kind"' in line]
    parquet = [json.loads(line) for line in lines if line.startswith("{") and '"window_start"' in line]
    assert len(generated) == 2, logs[-3000:]
    restarts = sum("running it again from its checkpoint" in line for line in lines)
    if restarts:
        print(f"the spark job ran `pipeline run` {restarts + 1} times (a failed run restarted from its checkpoint)")
    dead_letters = _read_topic(boot, PIPELINE_DEAD_LETTERS)
    assert dead_letters is not None and len(set(dead_letters)) == sum(g["bad"] for g in generated)
    windows = list({key: json.loads(value) for key, value in _read_topic(boot, PIPELINE_WINDOWS) or []}.values())
    assert windows, "no window in the output topic"
    assert all(w["count"] > 0 and w["type"] in ("order", "click") for w in windows), windows
    assert sum(w["count"] for w in windows) <= sum(g["good"] for g in generated)
    as_rows = sorted((w["window_start"], w["type"], w.get("currency"), w["count"]) for w in windows)  # to_json drops nulls
    assert as_rows == sorted((r["window_start"], r["type"], r.get("currency"), r["count"]) for r in parquet)


def _compose_env(ports: list[int]) -> dict[str, str]:
    return {
        "KAFKALITE_IMAGE": BROKER_IMAGE, "KAFKALITE_BASE_IMAGE": BASE_IMAGE, "ZOOKEEPER_IMAGE": ZOOKEEPER_IMAGE,
        "PROMETHEUS_IMAGE": PROMETHEUS_IMAGE, "SPARK_IMAGE": SPARK_IMAGE,
        "KAFKALITE_HOST": "127.0.0.1", "ZOOKEEPER_PORT": str(ports[6]), "PROMETHEUS_PORT": str(ports[7]),
        "SPARK_MASTER_UI_PORT": str(ports[8]), "GRAFANA_PORT": str(ports[9]),
        "PIPELINE_RATE": str(PIPELINE_RATE), "PIPELINE_SECONDS": str(PIPELINE_SECONDS),
        **{f"KAFKALITE_PORT_{i}": str(ports[i - 1]) for i in (1, 2, 3)},
        **{f"KAFKALITE_ADMIN_PORT_{i}": str(ports[i + 2]) for i in (1, 2, 3)},
    }


def _up(compose: Compose) -> list[int]:
    """`up` on free host ports, chosen just before it (not before the builds: on a shared
    machine another process took one in between); again on new ones if one was taken."""
    for attempt in range(1, UP_ATTEMPTS + 1):
        ports = free_ports(10)
        compose.env = _compose_env(ports)
        done = compose.run("up", "-d", "--no-build", *SERVICES, timeout_s=600, check=False)
        if done.returncode == 0:
            return ports
        if "address already in use" not in done.stdout or attempt == UP_ATTEMPTS:
            raise AssertionError(f"docker-compose up failed:\n{done.stdout[-4000:]}")
        print(f"up: a host port was taken meanwhile, again on new ports ({done.stdout.strip().splitlines()[-1]})")
        compose.run("down", "-v", "--remove-orphans", timeout_s=300, check=False)
    raise AssertionError("unreachable")


def test_compose_cluster_and_profiles_serve_the_host_scrape_stream_fail_over_and_rejoin():
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pip-wheel") as background:
        wheels = background.submit(_wheels)  # needs no engine: made while one starts
        try:
            _serve_fail_over_and_rejoin(started, wheels)
        finally:
            wheels.cancel()


def _serve_fail_over_and_rejoin(started: float, wheels: Future) -> None:
    engine, reason = find_engine()
    if engine is None:
        print(f"\ntests/compose skipped: {reason}")
        pytest.skip(f"no container engine can run here: {reason}")
    print(f"\ncontainer engine: {engine.description}")
    timings: dict[str, float] = {"engine ready": time.monotonic() - started}
    artifacts = _artifacts()
    compose = Compose(engine, f"kltest{os.getpid()}", {})
    try:
        _build(engine, timings, wheels)
        t = time.monotonic()
        up_started = t
        ports = _up(compose)
        boot = ",".join(f"127.0.0.1:{ports[i]}" for i in range(3))
        prometheus = f"http://127.0.0.1:{ports[7]}"
        _wait(lambda: all(compose.health(s) == "running healthy" for s in ("broker1", "broker2", "broker3")), HEALTHY_TIMEOUT_S,
              "three healthy brokers")
        timings["up until healthy"] = time.monotonic() - t

        # From the host: the EXTERNAL listener, advertised as 127.0.0.1:<host port>.
        admin = AdminClient({"bootstrap.servers": boot})  # held: a collected client fails its futures
        md = admin.list_topics(timeout=20)
        assert sorted((b.host, b.port) for b in md.brokers.values()) == sorted(("127.0.0.1", ports[i]) for i in range(3))
        for f in admin.create_topics([NewTopic(TOPIC, 3, 3)]).values():
            f.result(timeout=60)
        _wait(lambda: all(p["leader"] >= 1 for p in _metadata(boot).values()), 60, "leaders for the topic")
        _produce(boot, 0, 300)
        assert sorted(_consume_all(boot, 300)) == sorted(f"order-{i}" for i in range(300))

        # From a container: the INTERNAL listener (broker2:19092), through the CLI in the image.
        described = compose.run("exec", "-T", "broker1", "kafkalite", "topics", "describe", TOPIC, "--json",
                                "--bootstrap", "broker2:19092").stdout
        assert TOPIC in described
        racks = compose.run("exec", "-T", "broker1", "python3", "-c",
                            "import json,urllib.request;print(json.dumps([b['rack'] for b in json.load(urllib.request.urlopen("
                            "'http://127.0.0.1:9292/status.json'))['brokers']]))").stdout
        assert json.loads(racks.strip().splitlines()[-1]) == ["a", "b", "c"]

        # Profile monitoring: Prometheus (Debian's) scrapes every broker.
        t = time.monotonic()
        _check_monitoring(prometheus, ports[3])
        timings["prometheus scraping all brokers"] = time.monotonic() - t

        # Profile spark: the job (started by `up` once the brokers and the worker were healthy)
        # ran `kafkalite pipeline run` on the standalone cluster over the INTERNAL listener.
        exit_code = _wait(lambda: _spark_job_exit_code(compose), SPARK_JOB_TIMEOUT_S, "the spark job to finish", interval_s=3)
        timings["spark job done (since up)"] = time.monotonic() - up_started
        job_logs = compose.run("logs", "--no-color", "spark-job").stdout
        (artifacts / "spark-job-logs.txt").write_text(job_logs)
        assert exit_code == "0", f"the spark job failed (exit code {exit_code}):\n{job_logs[-4000:]}"
        _check_pipeline(boot, job_logs)

        # docker kill the leader of partition 0: another leader, and acks=all goes on (ISR 2 >= min.insync.replicas).
        victim = _metadata(boot)[0]["leader"]
        t = time.monotonic()
        compose.engine.run("kill", compose.container(f"broker{victim}"))
        _wait(lambda: all(p["leader"] not in (-1, victim) for p in _metadata(boot).values()), FAILOVER_TIMEOUT_S,
              f"leaders other than killed broker {victim}")
        timings["failover after docker kill"] = time.monotonic() - t
        _produce(boot, 300, 300)

        # Started again: it rejoins every ISR, and every acknowledged message is there.
        t = time.monotonic()
        compose.run("start", f"broker{victim}")
        _wait(lambda: all(p["isr"] == [1, 2, 3] for p in _metadata(boot).values()), REJOIN_TIMEOUT_S, f"broker {victim} back in every ISR")
        timings["rejoin after start"] = time.monotonic() - t
        assert sorted(_consume_all(boot, 600)) == sorted(f"order-{i}" for i in range(600))

        # docker stop sends SIGTERM: a controlled shutdown, exit code 0.
        other = next(b for b in (1, 2, 3) if b != victim)
        cid = compose.container(f"broker{other}")
        compose.run("stop", "-t", "60", f"broker{other}")
        assert engine.run("inspect", "-f", "{{.State.ExitCode}}", cid).stdout.strip() == "0"
        logs = engine.run("logs", cid).stdout
        assert "controlled shutdown succeeded" in logs
        assert f"broker {other} stopped" in logs
    except BaseException:
        try:
            (artifacts / "compose-logs.txt").write_text(compose.run("logs", "--no-color", "--tail", "300", check=False).stdout or "")
            print(f"compose logs kept in {artifacts / 'compose-logs.txt'}")
        except EngineError:
            pass
        raise
    finally:
        t = time.monotonic()
        try:
            down = compose.run("down", "-v", "--remove-orphans", timeout_s=300, check=False)
            timings["down -v"] = time.monotonic() - t
            volumes = engine.run("volume", "ls", "-q", "--filter", f"name={compose.project}", check=False).stdout.split()
        finally:
            release(engine)
        timings["total"] = time.monotonic() - started
        report = "\n".join(f"  {k}: {v:.1f} s" for k, v in timings.items())
        print(f"compose timings ({engine.description}):\n{report}")
        (artifacts / "timings.txt").write_text(report + "\n")
    assert down.returncode == 0, down.stdout
    assert volumes == [], f"volumes left after down -v: {volumes}"
