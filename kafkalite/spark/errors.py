"""Typed errors of the Spark data source: an operating error a user can act on, never a
traceback from deep inside Spark."""

from __future__ import annotations


class KafkaliteSparkOptionError(ValueError):
    """An unknown, malformed or contradictory option; the message names the option."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"option '{option}': {message}")
        self.option = option


class KafkaliteDataLossError(RuntimeError):
    """Offsets a query asked for are gone (retention, deleted topic or truncation) and
    failOnDataLoss is true."""
