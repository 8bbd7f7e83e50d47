"""`kafkalite pipeline generate` against real brokers: it writes exactly the seeded records,
reports good/bad per kind, and fails clearly on a missing topic or bad arguments."""

from __future__ import annotations

import json
from collections import Counter

from kafkalite.pipeline.events import GeneratorConfig, generate
from kafkalite.testing.cli_runner import failed_with, ok

RATE = 200
SECONDS = 1
START_MS = 1_790_000_000_000


def test_generate_writes_the_seeded_records_and_counts_them(cluster):
    boot = cluster.status()["bootstrap"]
    ok("topics", "create", "orders-in", "--partitions", "3", "--replication-factor", "3", boot=boot)

    out = ok("pipeline", "generate", "--rate", str(RATE), "--seconds", str(SECONDS), "--topic", "orders-in",
             "--bad-fraction", "0.2", "--late-fraction", "0.1", "--seed", "5", "--start-ms", str(START_MS), "--json",
             boot=boot)
    summary = json.loads(out)
    expected = generate(GeneratorConfig(seed=5, start_ms=START_MS, rate_per_s=RATE, bad_fraction=0.2,
                                        late_fraction=0.1), RATE * SECONDS)
    kinds = Counter(r.kind for r in expected)
    assert summary["records"] == RATE * SECONDS
    assert summary["good"] + summary["bad"] == RATE * SECONDS
    assert summary["late"] == kinds["late"]
    assert summary["bad_by_kind"] == {k: kinds[k] for k in summary["bad_by_kind"]}
    assert all(n > 0 for n in summary["bad_by_kind"].values()), summary
    assert summary["seconds"] >= SECONDS * 0.9  # paced at --rate, not a burst

    consumed = ok("consume", "orders-in", "--from-beginning", "--max-messages", str(RATE * SECONDS),
                  "--timeout-ms", "10000", "--print-key", boot=boot)
    got = Counter(tuple(line.split("\t", 1)) for line in consumed.splitlines())
    want = Counter((r.key.decode(), r.value.decode()) for r in expected)
    assert got == want

    human = ok("pipeline", "generate", "--rate", "50", "--seconds", "0.2", "--topic", "orders-in", boot=boot)
    assert human.startswith("wrote 10 records to orders-in")
    failed_with("unknown topic 'nope'", "pipeline", "generate", "--rate", "10", "--seconds", "1", "--topic", "nope",
                boot=boot)
    failed_with("--rate must be > 0", "pipeline", "generate", "--rate", "0", "--seconds", "1", code=2, boot=boot)
