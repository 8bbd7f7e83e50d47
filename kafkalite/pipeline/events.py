"""The pipeline's input events: schema, validation rules, and a seeded generator.

Pure Python, no I/O, no clock: the generator takes its start time as an argument. The Spark
job applies exactly `validate` (as a Python function in its tasks, or rules that mirror it),
and the plain-Python reference (kafkalite.pipeline.reference) uses the same function, so the
job and the reference cannot disagree about which records are good.

## Schema (one JSON object per record value, UTF-8)

    {"type": "order", "order_id": "o-000042", "customer": "c-17",
     "amount": 12.34, "currency": "EUR", "event_time": "2026-11-24T05:00:01.250Z"}
    {"type": "click", "user": "u-3", "page": "/cart", "event_time": "2026-11-24T05:00:01.300Z"}

- ``type``: "order" or "click".
- order: ``order_id``, ``customer``, ``currency`` strings; ``amount`` a JSON number
  (integer or decimal, at most 2 fractional digits and 15 integer digits), >= 0. The
  integer bound is what lets the Spark job hold amounts exactly as ``decimal(17,2)`` and
  their sums as ``decimal(27,2)``: without it a valid amount could overflow there.
- click: ``user``, ``page`` strings.
- ``event_time``: UTC, ``YYYY-MM-DDTHH:MM:SS[.f{1,3}]Z`` (ISO 8601, "Z" required).
- Fields not listed are ignored. The record key is the order_id or the user (not validated).

## Validation rules, checked in this order; the first failure is the rejection reason

1. ``not_json``: not UTF-8, not JSON (NaN/Infinity are not JSON either).
2. ``not_object``: JSON, but not an object.
3. ``missing_field``: no ``type``.  ``wrong_type``: ``type`` not a string.
4. ``unknown_type``: ``type`` is neither "order" nor "click".
5. For each field of that type, in schema order: ``missing_field`` if absent (null counts as
   absent), ``wrong_type`` if of the wrong JSON type (a boolean is not a number; an amount
   with more than 2 fractional digits or more than 15 integer digits is ``wrong_type`` too).
6. ``bad_event_time``: ``event_time`` is a string but not in the format above or not a real
   date/time.
7. ``negative_amount``: an order's amount < 0.

The dead-letter record carries the reason in header ``error.reason`` (one of `REASONS`) and
a human-readable ``error.detail`` (e.g. "amount: expected a number, got str").
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

ORDER = "order"
CLICK = "click"
EVENT_TYPES = (ORDER, CLICK)

NOT_JSON = "not_json"
NOT_OBJECT = "not_object"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
UNKNOWN_TYPE = "unknown_type"
BAD_EVENT_TIME = "bad_event_time"
NEGATIVE_AMOUNT = "negative_amount"
REASONS = (NOT_JSON, NOT_OBJECT, MISSING_FIELD, WRONG_TYPE, UNKNOWN_TYPE, BAD_EVENT_TIME, NEGATIVE_AMOUNT)
# The malformed kinds the generator produces (not_object is only ever hand-made).
BAD_KINDS = (NOT_JSON, MISSING_FIELD, WRONG_TYPE, NEGATIVE_AMOUNT, UNKNOWN_TYPE, BAD_EVENT_TIME)

REASON_HEADER = "error.reason"
DETAIL_HEADER = "error.detail"

AMOUNT_DECIMALS_MAX = 2
AMOUNT_INTEGER_DIGITS_MAX = 15  # so that an amount fits decimal(17,2) in the Spark job
CURRENCIES = ("EUR", "USD", "GBP")
PAGES = ("/", "/search", "/product", "/cart", "/checkout")
ORDER_SHARE = 0.7  # of generated events; the rest are clicks

_STR, _AMOUNT = "string", "number"
SCHEMAS: dict[str, tuple[tuple[str, str], ...]] = {
    ORDER: (("order_id", _STR), ("customer", _STR), ("amount", _AMOUNT), ("currency", _STR), ("event_time", _STR)),
    CLICK: (("user", _STR), ("page", _STR), ("event_time", _STR)),
}
_EVENT_TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?Z")


@dataclass(frozen=True)
class Order:
    order_id: str
    customer: str
    amount: Decimal
    currency: str
    event_time_ms: int
    event_type = ORDER


@dataclass(frozen=True)
class Click:
    user: str
    page: str
    event_time_ms: int
    event_type = CLICK


Event = Order | Click


@dataclass(frozen=True)
class Rejection:
    reason: str  # one of REASONS
    detail: str

    def __post_init__(self) -> None:
        assert self.reason in REASONS, self.reason


# -- event time ----------------------------------------------------------------------------

def format_event_time(ms: int) -> str:
    """Epoch milliseconds -> "YYYY-MM-DDTHH:MM:SS.fffZ"."""
    t = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_event_time(text: str) -> int | None:
    """"YYYY-MM-DDTHH:MM:SS[.f{1,3}]Z" -> epoch milliseconds; None if malformed."""
    if not _EVENT_TIME_RE.fullmatch(text):
        return None
    whole, _, frac = text[:-1].partition(".")
    try:
        t = dt.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    millis = int(frac.ljust(3, "0")) if frac else 0
    return int(t.timestamp()) * 1000 + millis


# -- validation ----------------------------------------------------------------------------

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def validate(raw: bytes) -> Event | Rejection:
    """The record value -> an Event, or the Rejection with the first rule it breaks."""
    try:
        obj = json.loads(raw.decode("utf-8"), parse_float=Decimal, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        return Rejection(NOT_JSON, str(e)[:200])
    if not isinstance(obj, dict):
        return Rejection(NOT_OBJECT, f"expected an object, got {_json_type(obj)}")
    event_type = obj.get("type")
    if event_type is None:
        return Rejection(MISSING_FIELD, "type")
    if not isinstance(event_type, str):
        return Rejection(WRONG_TYPE, f"type: expected a string, got {_json_type(event_type)}")
    if event_type not in SCHEMAS:
        return Rejection(UNKNOWN_TYPE, event_type[:100])
    fields: dict[str, Any] = {}
    for name, kind in SCHEMAS[event_type]:
        value = obj.get(name)
        if value is None:
            return Rejection(MISSING_FIELD, name)
        problem = _type_problem(value, kind)
        if problem:
            return Rejection(WRONG_TYPE, f"{name}: {problem}")
        fields[name] = value
    event_time_ms = parse_event_time(fields.pop("event_time"))
    if event_time_ms is None:
        return Rejection(BAD_EVENT_TIME, str(obj["event_time"])[:100])
    if event_type == CLICK:
        return Click(fields["user"], fields["page"], event_time_ms)
    amount = Decimal(fields.pop("amount"))
    if amount < 0:
        return Rejection(NEGATIVE_AMOUNT, str(amount))
    return Order(fields["order_id"], fields["customer"], amount, fields["currency"], event_time_ms)


def _type_problem(value: Any, kind: str) -> str | None:
    if kind == _STR:
        return None if isinstance(value, str) else f"expected a string, got {_json_type(value)}"
    assert kind == _AMOUNT
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        return f"expected a number, got {_json_type(value)}"
    if isinstance(value, Decimal) and -value.as_tuple().exponent > AMOUNT_DECIMALS_MAX:
        return f"more than {AMOUNT_DECIMALS_MAX} fractional digits"
    if abs(value) >= 10 ** AMOUNT_INTEGER_DIGITS_MAX:
        return f"more than {AMOUNT_INTEGER_DIGITS_MAX} integer digits"
    return None


# -- generation ----------------------------------------------------------------------------

GOOD = "good"
LATE = "late"


@dataclass(frozen=True)
class Generated:
    """One generated record: what to produce, and what the generator meant it to be."""
    key: bytes
    value: bytes
    kind: str  # GOOD, LATE (valid, but with an old event time) or one of BAD_KINDS
    event_time_ms: int  # the event time it was generated around (the nominal one if bad)


@dataclass(frozen=True)
class GeneratorConfig:
    seed: int = 0
    start_ms: int = 1_790_000_000_000  # the first event's time; the CLI passes the wall clock
    rate_per_s: int = 100  # event times advance by 1000 / rate ms per record
    bad_fraction: float = 0.05
    late_fraction: float = 0.02  # of records: valid events with event time late_by_ms ago
    late_by_ms: int = 60_000

    def __post_init__(self) -> None:
        assert self.rate_per_s > 0
        assert 0.0 <= self.bad_fraction <= 1.0
        assert 0.0 <= self.late_fraction <= 1.0
        assert self.bad_fraction + self.late_fraction <= 1.0
        assert self.late_by_ms >= 0


def generate(config: GeneratorConfig, count: int) -> list[Generated]:
    """`count` records, identical for identical (config, count). Good events have
    non-decreasing event times (record i at start_ms + i * 1000 // rate), so they are never
    late for a watermark delay > 0; late ones are late_by_ms behind that."""
    rng = random.Random(config.seed)
    out = []
    for i in range(count):
        nominal_ms = config.start_ms + i * 1000 // config.rate_per_s
        roll = rng.random()
        if roll < config.bad_fraction:
            kind = rng.choice(BAD_KINDS)
        elif roll < config.bad_fraction + config.late_fraction:
            kind = LATE
        else:
            kind = GOOD
        event_time_ms = nominal_ms - config.late_by_ms if kind == LATE else nominal_ms
        event_type = ORDER if kind == NEGATIVE_AMOUNT or rng.random() < ORDER_SHARE else CLICK
        obj = _good_object(rng, i, event_type, event_time_ms)
        key = (obj["order_id"] if event_type == ORDER else obj["user"]).encode()
        value = _spoil(rng, obj, kind) if kind in BAD_KINDS else _dumps_exact(obj)
        out.append(Generated(key, value, kind, event_time_ms))
    return out


def _good_object(rng: random.Random, i: int, event_type: str, event_time_ms: int) -> dict[str, Any]:
    if event_type == ORDER:
        cents = rng.randint(1, 50_000)
        return {"type": ORDER, "order_id": f"o-{i:08d}", "customer": f"c-{rng.randint(1, 50)}",
                "amount": Decimal(cents) / 100, "currency": rng.choice(CURRENCIES),
                "event_time": format_event_time(event_time_ms)}
    return {"type": CLICK, "user": f"u-{rng.randint(1, 50)}", "page": rng.choice(PAGES),
            "event_time": format_event_time(event_time_ms)}


def _dumps_exact(obj: dict[str, Any]) -> bytes:
    """Compact JSON; a Decimal amount is written as a JSON number with its exact digits."""
    parts = []
    for k, v in obj.items():
        text = str(v) if isinstance(v, Decimal) else json.dumps(v)
        parts.append(f"{json.dumps(k)}:{text}")
    return ("{" + ",".join(parts) + "}").encode()


def _spoil(rng: random.Random, obj: dict[str, Any], kind: str) -> bytes:
    """A record that `validate` rejects with reason `kind`."""
    obj = dict(obj)
    if kind == NOT_JSON:
        good = _dumps_exact(obj)
        return good[: rng.randint(1, len(good) - 1)]  # a proper prefix of an object is never JSON
    if kind == MISSING_FIELD:
        del obj[rng.choice([name for name, _ in SCHEMAS[obj["type"]]])]
    elif kind == WRONG_TYPE:
        name, field_kind = rng.choice(SCHEMAS[obj["type"]])
        obj[name] = 42 if field_kind == _STR else str(obj[name])
    elif kind == NEGATIVE_AMOUNT:
        obj["amount"] = -obj["amount"]
    elif kind == UNKNOWN_TYPE:
        obj["type"] = rng.choice(["refund", "Order", "view"])
    elif kind == BAD_EVENT_TIME:
        obj["event_time"] = rng.choice(["yesterday", "2026-13-45T99:00:00Z", obj["event_time"][:-1], "1790000000000"])
    else:
        raise AssertionError(f"unknown bad kind {kind!r}")
    return _dumps_exact(obj)
