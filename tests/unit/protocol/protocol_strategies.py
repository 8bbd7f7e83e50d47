"""Hypothesis strategies and helpers derived from the schema table itself."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kafkalite.protocol.schema import Field

_INT_BOUNDS = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def _primitive(type_name: str) -> st.SearchStrategy:
    if type_name in _INT_BOUNDS:
        low, high = _INT_BOUNDS[type_name]
        return st.integers(low, high)
    if type_name == "bool":
        return st.booleans()
    if type_name == "string":
        return st.text(max_size=8)
    return st.binary(max_size=24)


def field_strategy(field: Field, version: int) -> st.SearchStrategy:
    if field.is_array:
        if field.element_type:
            element = _primitive(field.element_type)
        else:
            element = body_strategy(field.fields, version)
        strategy = st.lists(element, max_size=3)
    else:
        strategy = _primitive(field.type)
    if field.nullable_in(version):
        strategy = st.none() | strategy
    return strategy


def body_strategy(fields: tuple[Field, ...], version: int) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(
        {f.name: field_strategy(f, version) for f in fields if f.present_in(version)})


def completed(body: dict, fields: tuple[Field, ...], version: int) -> dict:
    """What the codec decodes for ``body``: absent fields at their defaults."""
    out = {}
    for field in fields:
        if not field.present_in(version):
            out[field.name] = field.default_value()
            continue
        value = body.get(field.name, field.default_value())
        if field.is_array and not field.element_type and value is not None:
            value = [completed(item, field.fields, version) for item in value]
        out[field.name] = value
    return out


def positional(body: dict, fields: tuple[Field, ...], version: int) -> list:
    """The body as nested lists in wire order (how Struct-based client libraries see it)."""
    out: list[Any] = []
    for field in fields:
        if not field.present_in(version):
            continue
        value = body.get(field.name, field.default_value())
        if field.is_array and not field.element_type and value is not None:
            value = [positional(item, field.fields, version) for item in value]
        out.append(value)
    return out


def as_tuples(values: Any) -> Any:
    """Positional lists -> tuples, the input form of the client libraries' Struct classes."""
    if isinstance(values, list):
        return [as_tuples_struct(v) if isinstance(v, list) else v for v in values]
    return values


def as_tuples_struct(values: list) -> tuple:
    return tuple(as_tuples(v) for v in values)
