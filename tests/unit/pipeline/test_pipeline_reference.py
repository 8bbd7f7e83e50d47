"""The reference windowed aggregates on small hand-checked examples: tumbling windows,
per (type, currency) grouping, and Spark's append-mode watermark rules."""

from __future__ import annotations

from decimal import Decimal

from kafkalite.pipeline.events import Click, Order
from kafkalite.pipeline.reference import WindowAggregate, WindowKey, aggregate, append_mode_output

S = 1000  # ms


def o(t_s: float, amount: str, currency: str = "EUR") -> Order:
    return Order("o", "c", Decimal(amount), currency, int(t_s * S))


def c(t_s: float) -> Click:
    return Click("u", "/", int(t_s * S))


def agg(count: int, amount: str = "0") -> WindowAggregate:
    return WindowAggregate(count, Decimal(amount))


def test_aggregate_groups_by_tumbling_window_type_and_currency():
    events = [o(0, "1.10"), o(9.999, "2.20"), o(10, "5"), o(3, "7.00", "USD"), c(1), c(12)]
    assert aggregate(events) == {
        WindowKey(0, "order", "EUR"): agg(2, "3.30"),
        WindowKey(0, "order", "USD"): agg(1, "7.00"),
        WindowKey(0, "click", ""): agg(1),
        WindowKey(10 * S, "order", "EUR"): agg(1, "5"),
        WindowKey(10 * S, "click", ""): agg(1),
    }


def test_append_mode_emits_closed_windows_and_drops_late_rows_by_batch():
    batches = [
        [o(1, "1"), o(5, "2")],      # watermark 0
        [o(12, "3"), o(25, "4")],    # watermark max(5-10)=0
        [o(2, "10"), o(31, "5")],    # watermark 15, late filter 0: o(2) kept; [0,10) emitted
        [o(14, "6"), o(45, "7")],    # watermark 21, late filter 15: o(14) kept; [10,20) emitted
        [o(8, "100")],               # watermark 35, late filter 21: o(8) dropped; [20,30) emitted
    ]
    result = append_mode_output(batches)
    assert result.emitted == {
        WindowKey(0, "order", "EUR"): agg(3, "13"),
        WindowKey(10 * S, "order", "EUR"): agg(2, "9"),
        WindowKey(20 * S, "order", "EUR"): agg(1, "4"),
    }
    assert [e.amount for e in result.dropped_late] == [Decimal(100)]
    # the trailing empty batch keeps watermark 35: [30,40) and [40,50) stay open
    assert result.open_windows == {WindowKey(30 * S, "order", "EUR"): agg(1, "5"),
                                   WindowKey(40 * S, "order", "EUR"): agg(1, "7")}
    assert result.watermark_ms == 35 * S


def test_a_late_row_in_the_same_batch_as_the_rows_that_make_it_late_is_kept():
    # One batch: the watermark it uses is 0, so o(2) is counted although 31 s is in the batch.
    result = append_mode_output([[o(31, "5"), o(2, "10")]])
    assert result.dropped_late == []
    assert result.emitted == {WindowKey(0, "order", "EUR"): agg(1, "10")}
    assert result.open_windows == {WindowKey(30 * S, "order", "EUR"): agg(1, "5")}


def test_a_row_behind_the_watermark_but_in_an_open_window_is_kept():
    # watermark 15 in batch 1; o(19) is older than 15 s but its window ends at 20 > 15.
    # A third batch at 31 s moves the watermark to 21 and closes [10,20) with o(19) in it.
    result = append_mode_output([[o(25, "1")], [o(19, "2")], [o(31, "3")]])
    assert result.dropped_late == []
    assert result.emitted == {WindowKey(10 * S, "order", "EUR"): agg(1, "2")}


def test_the_late_row_filter_lags_one_batch_behind_the_watermark():
    # Batch 1 has watermark 30, but filters late rows with batch 0's watermark (0): o(1) is
    # counted, and [0,10) is emitted at the end of batch 1. Batch 2 filters with 30: o(2)
    # is dropped.
    result = append_mode_output([[o(40, "1")], [o(1, "2")], [o(2, "3")]])
    assert result.emitted == {WindowKey(0, "order", "EUR"): agg(1, "2")}
    assert [e.amount for e in result.dropped_late] == [Decimal(3)]
    assert result.watermark_ms == 30 * S
