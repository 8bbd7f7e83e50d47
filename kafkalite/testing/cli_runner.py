"""Running the `kafkalite` CLI as a user would (a subprocess), for tests: `ok` expects exit 0,
`failed_with` expects one clear stderr line and no traceback. The caller's
KAFKALITE_BOOTSTRAP / KAFKALITE_ZOOKEEPER are dropped so a test talks only to its cluster."""

from __future__ import annotations

import os
import subprocess
import sys

CLI_TIMEOUT_S = 90


def run_cli(*args: str, boot: str | None = None, stdin: str | None = None, env: dict | None = None,
            timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kafkalite.cli.main", *args]
    if boot is not None:
        cmd += ["--bootstrap", boot]
    full_env = {k: v for k, v in os.environ.items() if k not in ("KAFKALITE_BOOTSTRAP", "KAFKALITE_ZOOKEEPER")}
    full_env.update(env or {})
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout_s, env=full_env)


def ok(*args: str, **kwargs) -> str:
    r = run_cli(*args, **kwargs)
    assert r.returncode == 0, f"{args}: rc {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r.stdout


def failed_with(substring: str, *args: str, code: int = 1, **kwargs) -> str:
    """The command exits `code` with exactly one stderr line containing `substring`."""
    r = run_cli(*args, **kwargs)
    assert r.returncode == code, f"{args}: rc {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, f"{args}: expected one stderr line, got:\n{r.stderr}"
    assert "Traceback" not in r.stderr
    assert substring in lines[0], f"{args}: {substring!r} not in {lines[0]!r}"
    return lines[0]
