"""Options for the simulation tests: `--sim-seed N` replays one seed exactly
(`pytest tests/sim -k replay --sim-seed N`); `--sim-steps` sets its length."""

from __future__ import annotations

import pytest

DEFAULT_STEPS = 1000


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-seed", type=int, default=None, help="replay this simulation seed")
    parser.addoption("--sim-steps", type=int, default=DEFAULT_STEPS, help="steps per simulated run")


@pytest.fixture
def sim_seed(request: pytest.FixtureRequest) -> int | None:
    return request.config.getoption("--sim-seed")


@pytest.fixture
def sim_steps(request: pytest.FixtureRequest) -> int:
    return request.config.getoption("--sim-steps")
