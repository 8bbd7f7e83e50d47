"""validate(): every rejection reason, the accepted shapes; the generator: determinism by
seed, and that every record it makes is what it says it is."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

import pytest

from kafkalite.pipeline.events import (
    BAD_EVENT_TIME,
    BAD_KINDS,
    GOOD,
    LATE,
    MISSING_FIELD,
    NEGATIVE_AMOUNT,
    NOT_JSON,
    NOT_OBJECT,
    UNKNOWN_TYPE,
    WRONG_TYPE,
    Click,
    GeneratorConfig,
    Order,
    Rejection,
    format_event_time,
    generate,
    parse_event_time,
    validate,
)

T0 = "2026-11-24T05:00:01.250Z"
T0_MS = 1_795_496_401_250


def order(**overrides) -> dict:
    base = {"type": "order", "order_id": "o-1", "customer": "c-1", "amount": "12.34", "currency": "EUR", "event_time": T0}
    base.update(overrides)
    return base


def raw(obj: dict) -> bytes:
    """JSON of obj; a str amount is written verbatim (JSON number text such as "12.30",
    or '"12.34"' for a JSON string), so tests control its exact digits."""
    parts = [f'"{k}":{v}' if k == "amount" and isinstance(v, str) else f'"{k}":{json.dumps(v)}'
             for k, v in obj.items()]
    return ("{" + ",".join(parts) + "}").encode()


def test_event_time_round_trips_and_is_strict():
    assert parse_event_time(T0) == T0_MS
    assert format_event_time(T0_MS) == T0
    assert parse_event_time("2026-11-24T05:00:01Z") == T0_MS - 250
    assert parse_event_time("2026-11-24T05:00:01.5Z") == T0_MS + 250
    for bad in ["2026-11-24T05:00:01", "2026-11-24 05:00:01Z", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
                "2026-11-24T05:00:01.1234Z", "yesterday", ""]:
        assert parse_event_time(bad) is None, bad


def test_valid_order_and_click_are_accepted():
    assert validate(raw(order())) == Order("o-1", "c-1", Decimal("12.34"), "EUR", T0_MS)
    assert validate(raw(order(amount="7", extra="ignored"))) == Order("o-1", "c-1", Decimal(7), "EUR", T0_MS)
    assert validate(raw(order(amount="0"))).amount == 0
    assert validate(raw(order(amount="999999999999999.99"))).amount == Decimal("999999999999999.99")
    assert validate(raw(order(amount="1e2"))).amount == 100
    click = {"type": "click", "user": "u-1", "page": "/cart", "event_time": T0}
    assert validate(raw(click)) == Click("u-1", "/cart", T0_MS)


@pytest.mark.parametrize(("value", "reason"), [
    (b'{"type": "order", ', NOT_JSON),
    (b"\xff\xfe", NOT_JSON),
    (b'{"type":"order","amount":NaN}', NOT_JSON),
    (b"", NOT_JSON),
    (b"[1, 2]", NOT_OBJECT),
    (b'"order"', NOT_OBJECT),
    (b"{}", MISSING_FIELD),
    (b'{"type": 1}', WRONG_TYPE),
    (b'{"type": "refund"}', UNKNOWN_TYPE),
    (raw(order(type="Order")), UNKNOWN_TYPE),
    (raw({k: v for k, v in order().items() if k != "customer"}), MISSING_FIELD),
    (raw(order(currency=None)), MISSING_FIELD),
    (raw(order(amount='"12.34"')), WRONG_TYPE),
    (raw(order(amount="true")), WRONG_TYPE),
    (raw(order(amount="1.234")), WRONG_TYPE),
    (raw(order(amount="1000000000000000")), WRONG_TYPE),
    (raw(order(amount="1e15")), WRONG_TYPE),
    (raw(order(amount="-1000000000000000.5")), WRONG_TYPE),
    (raw(order(customer=42)), WRONG_TYPE),
    (raw(order(event_time=1795496401250)), WRONG_TYPE),
    (raw(order(event_time="yesterday")), BAD_EVENT_TIME),
    (raw(order(event_time="2026-02-30T00:00:00Z")), BAD_EVENT_TIME),
    (raw(order(amount="-0.01")), NEGATIVE_AMOUNT),
])
def test_each_malformed_kind_is_rejected_with_its_reason(value, reason):
    result = validate(value)
    assert isinstance(result, Rejection), result
    assert result.reason == reason, result


def test_rules_apply_in_order_first_failure_wins():
    # missing customer comes before the bad amount and the bad time
    r = validate(raw({"type": "order", "order_id": "o", "amount": "-1", "currency": "EUR", "event_time": "x"}))
    assert (r.reason, r.detail) == (MISSING_FIELD, "customer")
    # a string-typed event_time that does not parse is checked before the negative amount
    assert validate(raw(order(amount="-1", event_time="x"))).reason == BAD_EVENT_TIME


CONFIG = GeneratorConfig(seed=7, rate_per_s=50, bad_fraction=0.3, late_fraction=0.1)


def test_generator_is_deterministic_by_seed():
    assert generate(CONFIG, 500) == generate(CONFIG, 500)
    assert generate(CONFIG, 500)[:100] == generate(CONFIG, 100)
    other = GeneratorConfig(seed=8, rate_per_s=50, bad_fraction=0.3, late_fraction=0.1)
    assert generate(other, 500) != generate(CONFIG, 500)


def test_generated_records_are_what_they_claim_and_cover_every_bad_kind():
    records = generate(CONFIG, 2000)
    kinds = Counter(r.kind for r in records)
    assert set(kinds) == {GOOD, LATE, *BAD_KINDS}
    assert 0.25 < sum(kinds[k] for k in BAD_KINDS) / 2000 < 0.35
    assert 0.07 < kinds[LATE] / 2000 < 0.13
    last_good_ms = None
    for i, r in enumerate(records):
        result = validate(r.value)
        nominal_ms = CONFIG.start_ms + i * 1000 // CONFIG.rate_per_s
        if r.kind in BAD_KINDS:
            assert isinstance(result, Rejection) and result.reason == r.kind, (r, result)
            continue
        assert not isinstance(result, Rejection), (r, result)
        assert result.event_time_ms == r.event_time_ms
        assert r.key == (result.order_id if isinstance(result, Order) else result.user).encode()
        if r.kind == LATE:
            assert result.event_time_ms == nominal_ms - CONFIG.late_by_ms
        else:  # on-time events never go back in time
            assert result.event_time_ms == nominal_ms
            assert last_good_ms is None or result.event_time_ms >= last_good_ms
            last_good_ms = result.event_time_ms


def test_no_bad_fraction_generates_only_valid_events():
    records = generate(GeneratorConfig(seed=1, bad_fraction=0.0, late_fraction=0.0), 300)
    assert {r.kind for r in records} == {GOOD}
    assert not any(isinstance(validate(r.value), Rejection) for r in records)
