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
        [o(1, "1"), o(5, "2")],           # watermark 0: nothing dropped, nothing closed
        [o(12, "3"), o(25, "4")],         # watermark max(5-10)=0 still
        [o(2, "10"), o(31, "5")],         # watermark 25-10=15: window [0,10) closed -> o(2) late
        [o(14, "6"), o(45, "7")],         # watermark 31-10=21: [10,20) closed, o(14) late
    ]
    result = append_mode_output(batches)
    # Batch 2 emitted [0,10) (1+2); batch 3 emitted [10,20) (3 only: o(14) was dropped);
    # the trailing empty batch has watermark 45-10=35: emits [20,30) (4); [30,40) ends at
    # 40 > 35 and stays open, as does [40,50).
    assert result.emitted == {
        WindowKey(0, "order", "EUR"): agg(2, "3"),
        WindowKey(10 * S, "order", "EUR"): agg(1, "3"),
        WindowKey(20 * S, "order", "EUR"): agg(1, "4"),
    }
    assert [e.amount for e in result.dropped_late] == [Decimal(10), Decimal(6)]
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
    # watermark 25-10=15 in batch 1; o(19) is older than 15 s but its window ends at 20 > 15.
    # A third batch at 31 s moves the watermark to 21 and closes [10,20) with o(19) in it.
    result = append_mode_output([[o(25, "1")], [o(19, "2")], [o(31, "3")]])
    assert result.dropped_late == []
    assert result.emitted == {WindowKey(10 * S, "order", "EUR"): agg(1, "2")}


def test_the_watermark_never_goes_back():
    result = append_mode_output([[o(40, "1")], [o(1, "2")], [o(2, "3")]])
    assert [e.amount for e in result.dropped_late] == [Decimal(2), Decimal(3)]
    assert result.watermark_ms == 30 * S
