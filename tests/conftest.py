"""Shared fixtures live in kafkalite.testing so bin/cluster and benchmarks can reuse them.

Hypothesis runs the same examples on every run (`derandomize`, seeded from each test):
a property test then fails because the code changed, never on the luck of the draw in one
CI run. `HYPOTHESIS_PROFILE=explore bin/test tests/unit` draws new examples each run, as
Hypothesis does by default, to look for more."""

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

pytest_plugins = ["kafkalite.testing.fixtures"]
