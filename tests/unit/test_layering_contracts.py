"""The package's layering (DESIGN.md section 9, STYLE habit 12) as import-linter contracts in
pyproject.toml: the core imports nothing of ours outside the core; log, protocol, rpc and zk
import neither the broker nor the CLI; the broker imports neither the CLI nor the test
harness; nothing of the broker side imports the Spark data source, which uses clients only;
the pipeline's events and reference import none of the broker, RPC, ZooKeeper, log, CLI or
test harness."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contracts_are_kept():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout
    assert proc.stdout.count("KEPT") == 6
