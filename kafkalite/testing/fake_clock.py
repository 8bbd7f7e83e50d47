"""A clock that moves only when told, for unit tests of code that takes its time source and
its sleep as arguments (or has them patched in): `clock()` / `clock.monotonic()` read it,
`clock.sleep(s)` advances it and remembers each sleep."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        self.slept.append(seconds)
        self.now += seconds
