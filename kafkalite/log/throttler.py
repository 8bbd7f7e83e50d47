"""A bytes-per-second limit for background I/O (Kafka's kafka.utils.Throttler, as the log
cleaner uses it for log.cleaner.io.max.bytes.per.second).

The caller reports the bytes it read or wrote; when the rate over the current period is
above the limit, the throttler sleeps until it is not. At any moment the bytes reported
are at most the limit times (the time since the start + one check interval). The clock and the sleep are
arguments, so tests drive it with a fake clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable

CHECK_INTERVAL_S = 0.1


class Throttler:
    def __init__(self, bytes_per_second: float, clock_s: Callable[[], float], sleep_s: Callable[[float], None],
                 check_interval_s: float = CHECK_INTERVAL_S) -> None:
        assert bytes_per_second > 0
        assert check_interval_s > 0
        self.bytes_per_second = bytes_per_second
        self.clock_s = clock_s
        self.sleep_s = sleep_s
        self.check_interval_s = check_interval_s
        self.period_start_s = clock_s()
        self.period_bytes = 0
        self.slept_s = 0.0

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.bytes_per_second)

    def maybe_throttle(self, byte_count: int) -> None:
        """Count `byte_count` bytes; sleep if the period so far went faster than the limit."""
        if self.unlimited:
            return
        self.period_bytes += byte_count
        now = self.clock_s()
        elapsed = now - self.period_start_s
        # Check once per interval, or as soon as the period holds more than an interval's
        # worth of bytes (else a burst shorter than the interval would escape the limit).
        if elapsed < self.check_interval_s and self.period_bytes < self.bytes_per_second * self.check_interval_s:
            return
        # How long the period's bytes should have taken at the limit, minus what it took.
        owed_s = self.period_bytes / self.bytes_per_second - elapsed
        if owed_s > 0:
            self.sleep_s(owed_s)
            self.slept_s += owed_s
        self.period_start_s = self.clock_s()
        self.period_bytes = 0
