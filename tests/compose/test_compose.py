"""docker-compose.yml and the Dockerfile, proven by building the images and running them.

Runs wherever a container engine can run (kafkalite.testing.container_engine): the Docker
that already answers, or, as root on Debian, a private dockerd this test starts (and always
stops, removing its bridges and iptables chains). Base image: a minimal Debian made with
debootstrap from the host's apt mirror (no image registry needed), with Python and
Debian's ZooKeeper; the broker image installs from a wheelhouse built here with `pip
wheel`. Skips, with the reason printed, only when no engine can run.

Checks: host clients (confluent-kafka) get the host-advertised listener and produce and
consume; containers get the internal listener (the CLI inside a broker container); `docker
kill` of a partition leader: failover, and acks=all writes go on; the killed broker started
again rejoins every ISR; `docker stop` (SIGTERM) is a controlled shutdown; `down -v`.
Timings of each phase are printed (pytest -s) and kept in test-artifacts/compose/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalite.testing.container_engine import Engine, EngineError, build_debootstrap_image, find_engine, release
from kafkalite.testing.ports import free_ports

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "kafkalite-test-base:bookworm"
BASE_PACKAGES = ["python3", "python3-venv", "bash", "zookeeper", "default-jre-headless"]
BROKER_IMAGE = "kafkalite-test:latest"
ZOOKEEPER_IMAGE = "kafkalite-test-zookeeper:latest"
TOPIC = "compose-orders"
HEALTHY_TIMEOUT_S = 240.0
FAILOVER_TIMEOUT_S = 60.0
REJOIN_TIMEOUT_S = 120.0


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
        return self.engine.compose_run("-p", self.project, "-f", str(ROOT / "docker-compose.yml"), *args, timeout_s=timeout_s,
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


def _build(engine: Engine, timings: dict[str, float]) -> None:
    t = time.monotonic()
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(ROOT / "build" / "wheelhouse"), str(ROOT)],
                           capture_output=True, text=True, timeout=900)
    assert wheel.returncode == 0, f"pip wheel failed:\n{wheel.stdout[-3000:]}{wheel.stderr[-3000:]}"
    timings["pip wheel (host)"] = time.monotonic() - t
    timings["debootstrap base image"] = build_debootstrap_image(engine, BASE_IMAGE, BASE_PACKAGES)
    t = time.monotonic()
    engine.run("build", "-t", BROKER_IMAGE, "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", str(ROOT), timeout_s=1200)
    timings["broker image build"] = time.monotonic() - t
    t = time.monotonic()
    engine.run("build", "-t", ZOOKEEPER_IMAGE, "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", str(ROOT / "docker" / "zookeeper-debian"),
               timeout_s=1200)
    timings["zookeeper image build"] = time.monotonic() - t


def test_compose_cluster_serves_the_host_fails_over_and_rejoins():
    started = time.monotonic()
    engine, reason = find_engine()
    if engine is None:
        print(f"\ntests/compose skipped: {reason}")
        pytest.skip(f"no container engine can run here: {reason}")
    print(f"\ncontainer engine: {engine.description}")
    timings: dict[str, float] = {"engine ready": time.monotonic() - started}
    artifacts = _artifacts()
    ports = free_ports(7)
    env = {
        "KAFKALITE_IMAGE": BROKER_IMAGE, "KAFKALITE_BASE_IMAGE": BASE_IMAGE, "ZOOKEEPER_IMAGE": ZOOKEEPER_IMAGE,
        "KAFKALITE_HOST": "127.0.0.1", "ZOOKEEPER_PORT": str(ports[6]),
        **{f"KAFKALITE_PORT_{i}": str(ports[i - 1]) for i in (1, 2, 3)},
        **{f"KAFKALITE_ADMIN_PORT_{i}": str(ports[i + 2]) for i in (1, 2, 3)},
    }
    boot = ",".join(f"127.0.0.1:{ports[i]}" for i in range(3))
    compose = Compose(engine, f"kltest{os.getpid()}", env)
    try:
        _build(engine, timings)
        t = time.monotonic()
        compose.run("up", "-d", "--no-build", timeout_s=600)
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
