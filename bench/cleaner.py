"""Log cleaner benchmark (issue 10): how fast one cleaning pass compacts a log, and what a
running cleaner does to produce latency.

Alone (the default): a log of `--num-records` records over `--keys` keys (`--value-bytes`
each, `--batch-records` per batch, as a producer batches them) is written with the storage
engine into a temporary directory, in segments of `--segment-mb`; then the cleaner runs
passes (kafkalite.log.cleaner.clean, the code a broker's worker process runs) until
nothing is left to clean, and the swaps are applied as the broker applies them. Printed:
per pass and in total, the input log's MB/s and records/s, the bytes read and written, the
keys in the offset map; `--dedupe-buffer-mb` small forces several passes (a full map),
`--io-max-bytes-per-second` shows the rate limit.

    .venv/bin/python bench/cleaner.py --num-records 1000000 --keys 1000
    .venv/bin/python bench/cleaner.py --num-records 1000000 --keys 200000 --dedupe-buffer-mb 8
    .venv/bin/python bench/cleaner.py --num-records 1000000 --io-max-bytes-per-second 20000000

`--with-broker`: a local 1-broker cluster; a compacted topic filled with the same records
(acks=1) whose segments stay uncleanable for `--lag-s` seconds (min.compaction.lag.ms),
while an acks=all probe writes `--probe-rate` records/s to another topic; the probe's
latency before the cleaner starts and while it runs (the broker's
kafkalite_log_cleaner_busy gauge) is printed.

    .venv/bin/python bench/cleaner.py --with-broker --num-records 1000000

MB = 10^6 bytes here. Bounded: every wait has a deadline; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from latency_probe import Probe, percentiles

from kafkalite.log.cleaner import clean
from kafkalite.log.cleaner_manager import CleanerConfig, LogCleanerManager
from kafkalite.log.config import POLICY_COMPACT, LogConfig
from kafkalite.log.log_manager import LogManager
from kafkalite.log.offset_map import OffsetMap
from kafkalite.log.records import COMPRESSION_NONE, encode_batch
from kafkalite.log.throttler import Throttler

DEADLINE_S = 1800
CODECS = {"none": COMPRESSION_NONE, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def fill_log(plog, args: argparse.Namespace) -> int:
    rng = random.Random(1)
    padding = os.urandom(args.value_bytes)
    written = 0
    for first in range(0, args.num_records, args.batch_records):
        n = min(args.batch_records, args.num_records - first)
        recs = [(b"key-%08d" % rng.randrange(args.keys), b"%d" % (first + j) + padding[: args.value_bytes - 10], ()) for j in range(n)]
        now = 1_000 + first
        plog.append_as_leader(encode_batch(recs, base_timestamp=now, compression=CODECS[args.compression]), 0, now)
        written += n
    plog.maybe_roll(10**15)  # everything written becomes cleanable
    return written


def alone(args: argparse.Namespace) -> int:
    workdir = tempfile.mkdtemp(prefix="kafkalite-cleaner-bench-")
    try:
        config = LogConfig(segment_bytes=args.segment_mb * 1024 * 1024, cleanup_policy=frozenset({POLICY_COMPACT}),
                           min_cleanable_dirty_ratio=0.0)
        logs = LogManager([workdir], config)
        logs.open_all(now_ms=0)
        plog = logs.get_or_create("bench", 0, config, now_ms=0)
        t0 = time.monotonic()
        fill_log(plog, args)
        plog.flush()
        input_bytes = plog.size_bytes
        print(f"log: {args.num_records:,} records over {args.keys:,} keys, {args.value_bytes} B values, {args.batch_records} per batch, "
              f"{args.compression}: {input_bytes / 1e6:.1f} MB in {len(plog.segments) - 1} segments of {args.segment_mb} MiB "
              f"(written in {time.monotonic() - t0:.1f} s)")
        entries = OffsetMap.for_buffer(int(args.dedupe_buffer_mb * 1024 * 1024)).entries_max
        manager = LogCleanerManager(logs, CleanerConfig(), map_entries_max=entries)
        print(f"offset map: {args.dedupe_buffer_mb:g} MiB = {entries:,} keys; io limit: "
              f"{'none' if args.io_max_bytes_per_second is None else f'{args.io_max_bytes_per_second / 1e6:g} MB/s'}")
        throttler = Throttler(args.io_max_bytes_per_second or float("inf"), time.monotonic, time.sleep)
        total_s = 0.0
        total_read = total_written = records_in = 0
        passes = 0
        first_pass_input = None
        while time.monotonic() - t0 < DEADLINE_S:
            planned = manager.next_cleaning({("bench", 0): plog.log_end_offset}, 10**13)
            if planned is None:
                break
            pass_input = sum(s.info.size_bytes for s in planned.job.segments)
            started = time.monotonic()
            result = clean(planned.job, throttler.maybe_throttle)
            assert manager.complete(planned, result)
            took = time.monotonic() - started
            passes += 1
            s = result.stats
            total_s += took
            total_read += s.bytes_read
            total_written += s.bytes_written
            records_in += s.records_read
            first_pass_input = first_pass_input or pass_input
            print(f"pass {passes} ({planned.job.kind.value}): {took:.2f} s over {pass_input / 1e6:.1f} MB of log = "
                  f"{pass_input / 1e6 / took:.1f} MB/s, {s.records_read / took:,.0f} records/s; read {s.bytes_read / 1e6:.1f} MB "
                  f"({s.bytes_read / 1e6 / took:.1f} MB/s), wrote {s.bytes_written / 1e6:.2f} MB; map {s.map_entries:,} keys; "
                  f"kept {s.records_kept:,} of {s.records_read:,}; {s.segments_replaced} segments became {s.segments_written}")
        print(f"total: {passes} passes in {total_s:.2f} s; {args.num_records:,} records ({input_bytes / 1e6:.1f} MB) compacted at "
              f"{input_bytes / 1e6 / total_s:.1f} MB/s, {args.num_records / total_s:,.0f} records/s of the original log; "
              f"I/O {(total_read + total_written) / 1e6 / total_s:.1f} MB/s; log now {plog.size_bytes / 1e6:.2f} MB"
              + (f"; slept {throttler.slept_s:.1f} s for the io limit" if throttler.slept_s else ""))
        plog.close()
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# -- with a broker --------------------------------------------------------------------------


def _busy(admin_port: int) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    from kafkalite.testing.probes import metrics_text

    for family in text_string_to_metric_families(metrics_text(admin_port)):
        for sample in family.samples:
            if sample.name == "kafkalite_log_cleaner_busy":
                return sample.value
    return 0.0


def with_broker(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkalite.testing.cluster import LocalCluster
    from kafkalite.testing.ports import free_ports

    workdir = tempfile.mkdtemp(prefix="kafkalite-cleaner-bench-")
    ports = free_ports(4)
    overrides = {"log.level": "INFO", "log.cleaner.backoff.ms": 500, "log.retention.check.interval.ms": 1000}
    if args.io_max_bytes_per_second:
        overrides["log.cleaner.io.max.bytes.per.second"] = args.io_max_bytes_per_second
    cluster = LocalCluster(os.path.join(workdir, "c"), brokers=1, zk_port=ports[3], ports=[tuple(ports[:3])], overrides=overrides)
    try:
        status = cluster.up()
        boot = status["bootstrap"]
        admin_port = cluster.broker(1)["admin_port"]
        admin = AdminClient({"bootstrap.servers": boot})
        lag_ms = int(args.lag_s * 1000)
        config = {"cleanup.policy": "compact", "segment.bytes": str(args.segment_mb * 1024 * 1024), "segment.ms": "2000",
                  "min.compaction.lag.ms": str(lag_ms)}
        for f in admin.create_topics([NewTopic("compacted", 1, 1, config=config), NewTopic("probe", 1, 1)]).values():
            f.result(timeout=60)
        probe = Probe(boot, args.probe_rate, "probe")
        producer = Producer({"bootstrap.servers": boot, "acks": "1", "linger.ms": 20, "batch.size": 1_000_000,
                             "queue.buffering.max.messages": 2_000_000})
        rng = random.Random(1)
        padding = b"x" * args.value_bytes
        filled = time.monotonic()
        for i in range(args.num_records):
            while True:
                try:
                    producer.produce("compacted", key=b"key-%08d" % rng.randrange(args.keys), value=padding, partition=0)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(600) == 0
        fill_s = time.monotonic() - filled
        print(f"filled `compacted` with {args.num_records:,} records over {args.keys:,} keys in {fill_s:.1f} s; "
              f"compaction starts {args.lag_s:g} s after the writes (min.compaction.lag.ms)")
        probe.start()
        # Watch the cleaner from the start (the same /metrics scrapes before and during).
        busy_windows: list[tuple[float, float]] = []
        deadline = time.monotonic() + DEADLINE_S
        started = quiet_since = None
        while time.monotonic() < deadline:
            busy = _busy(admin_port) >= 1
            now = time.monotonic()
            if busy and started is None:
                started = now
            if not busy and started is not None:
                busy_windows.append((started, now))
                started, quiet_since = None, now
            if busy_windows and quiet_since is not None and now - quiet_since > 5:
                break
            time.sleep(0.05)
        probe.halt.set()
        probe.join(60)
        baseline_end = busy_windows[0][0] - 0.5 if busy_windows else time.monotonic()
        baseline = [lat for t, lat in probe.samples if t < baseline_end]
        during = [lat for t, lat in probe.samples if any(a <= t <= b for a, b in busy_windows)]
        print(f"probe (acks=all, {args.probe_rate:.0f}/s to `probe`), cleaner idle: {percentiles(baseline)}")
        print(f"probe while the cleaner ran ({sum(b - a for a, b in busy_windows):.1f} s): "
              f"{percentiles(during)}")
        with open(cluster.broker(1)["log"]) as f:
            for line in f:
                if "log cleaner: compacted-0" in line:
                    print("  broker:", line.split("log cleaner: ", 1)[1].rstrip())
        return 0
    finally:
        cluster.down()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--batch-records", type=int, default=500)
    ap.add_argument("--compression", choices=sorted(CODECS), default="none")
    ap.add_argument("--segment-mb", type=int, default=16)
    ap.add_argument("--dedupe-buffer-mb", type=float, default=128.0)
    ap.add_argument("--io-max-bytes-per-second", type=float, default=None)
    ap.add_argument("--with-broker", action="store_true")
    ap.add_argument("--lag-s", type=float, default=20.0)
    ap.add_argument("--probe-rate", type=float, default=500.0)
    args = ap.parse_args()
    if args.value_bytes < 12:
        ap.error("--value-bytes must be at least 12")
    return with_broker(args) if args.with_broker else alone(args)


if __name__ == "__main__":
    sys.exit(main())
