"""The two clocks of the shell, named for what they are for (STYLE habit 2: the core takes
time as an argument; this is where the shell reads it).

- `monotonic_ms`: deadlines, timeouts, lag and caught-up times (ISR shrink), purgatory
  expiry. It never jumps, so a wall-clock step (NTP, a VM resumed) cannot shrink an ISR or
  expire a request.
- `wall_ms`: what is stored or compared with stored times: record timestamps, segment
  ages, retention, flush intervals of the log.
"""

from __future__ import annotations

import time


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000
