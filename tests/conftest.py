"""Shared fixtures live in kafkalite.testing so bin/cluster and benchmarks can reuse them."""

pytest_plugins = ["kafkalite.testing.fixtures"]
