"""The plain-Python reference of the pipeline's windowed aggregates.

## What the job computes
Per 10-second tumbling event-time window ``[start, start + 10 s)`` (start a multiple of
10 s since the epoch) and per (event type, currency): the number of valid events and the
sum of their amounts. Clicks have currency "" and amount 0, so they group per window into
one ("click", "") row with amount_sum 0. Only events that `validate` accepts take part.

## Watermark and late data: Spark's append-mode semantics, made exact
The job uses ``withWatermark("event_time", "10 seconds")`` and append output mode. Spark
(3.5+/4.x, one stateful operator) behaves like this, micro-batch by micro-batch:

1. The watermark of batch k is ``max(previous watermark, max event time of batches 0..k-1
   - delay)``; it starts at 0 and never decreases. Batch k's own rows do not move the
   watermark batch k uses.
2. A row of batch k whose window has ``end <= the watermark of batch k-1`` is dropped as
   late. Note the lag: the late-row filter uses the *previous* batch's watermark (Spark
   3.4+ keeps a late-events watermark and an eviction watermark, one batch apart, for
   chained stateful operators), so a row behind the current watermark may still be
   counted -- in a window that rule 3 then emits at the end of this same batch.
3. At the end of batch k, every window with ``end <= the watermark of batch k`` is emitted
   once, final, and its state dropped. Windows not yet closed are not emitted (append).
4. After the last data batch Spark runs one more, empty, batch when the watermark moved
   (with Trigger.AvailableNow too), so windows closed by the data are emitted; windows
   still open after it never are.

These rules were checked against a real Spark 4.3 streaming query, micro-batch by
micro-batch (tests/integration/test_pipeline_reference_spark.py): rule 2 as first written,
with the current watermark, did not match; with the previous one it matches exactly.

Whether a late event is dropped therefore depends on where the micro-batch boundaries
fell, so `append_mode_output` takes the events *as batches*. The end-to-end test gets the
boundaries from the query's progress (each batch's source start/end offsets) and maps
offsets to the generated records. Events the generator makes on time (non-decreasing event
times) are never dropped for any delay > 0, whatever the batching (rule 2: the watermark
is at most their time - delay, below their window's end).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from kafkalite.pipeline.events import ORDER, Event

WINDOW_MS = 10_000
WATERMARK_DELAY_MS = 10_000


@dataclass(frozen=True, order=True)
class WindowKey:
    window_start_ms: int
    event_type: str
    currency: str  # "" for clicks


@dataclass
class WindowAggregate:
    count: int = 0
    amount_sum: Decimal = Decimal(0)


@dataclass
class AppendResult:
    emitted: dict[WindowKey, WindowAggregate]  # final rows, as the output topic gets them
    dropped_late: list[Event] = field(default_factory=list)  # valid, but behind the watermark
    open_windows: dict[WindowKey, WindowAggregate] = field(default_factory=dict)  # never emitted
    watermark_ms: int = 0  # after the final (empty) batch


def window_start(event_time_ms: int, window_ms: int = WINDOW_MS) -> int:
    return event_time_ms - event_time_ms % window_ms


def window_key(event: Event, window_ms: int = WINDOW_MS) -> WindowKey:
    currency = event.currency if event.event_type == ORDER else ""
    return WindowKey(window_start(event.event_time_ms, window_ms), event.event_type, currency)


def _add(into: dict[WindowKey, WindowAggregate], event: Event, window_ms: int) -> None:
    agg = into.setdefault(window_key(event, window_ms), WindowAggregate())
    agg.count += 1
    if event.event_type == ORDER:
        agg.amount_sum += event.amount


def aggregate(events: Iterable[Event], window_ms: int = WINDOW_MS) -> dict[WindowKey, WindowAggregate]:
    """Every event in its window, ignoring the watermark (a batch query's answer)."""
    out: dict[WindowKey, WindowAggregate] = {}
    for event in events:
        _add(out, event, window_ms)
    return out


def append_mode_output(batches: Sequence[Sequence[Event]], *, window_ms: int = WINDOW_MS,
                       delay_ms: int = WATERMARK_DELAY_MS) -> AppendResult:
    """What a streaming windowed aggregation in append mode emits for these micro-batches
    (rules 1-4 of the module docstring)."""
    assert window_ms > 0
    assert delay_ms >= 0
    result = AppendResult(emitted={})
    state: dict[WindowKey, WindowAggregate] = {}
    watermark_ms = 0
    max_seen_ms: int | None = None
    for batch in [*batches, []]:  # the trailing no-data batch of rule 4
        late_watermark_ms = watermark_ms  # rule 2: the previous batch's watermark
        if max_seen_ms is not None:
            watermark_ms = max(watermark_ms, max_seen_ms - delay_ms)
        for event in batch:
            if window_start(event.event_time_ms, window_ms) + window_ms <= late_watermark_ms:
                result.dropped_late.append(event)
            else:
                _add(state, event, window_ms)
        for key in sorted(state):
            if key.window_start_ms + window_ms <= watermark_ms:
                assert key not in result.emitted, f"window {key} emitted twice"
                result.emitted[key] = state.pop(key)
        if batch:
            batch_max = max(e.event_time_ms for e in batch)
            max_seen_ms = batch_max if max_seen_ms is None else max(max_seen_ms, batch_max)
    result.open_windows = state
    result.watermark_ms = watermark_ms
    return result
