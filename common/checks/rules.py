"""What a config key allows, declared once on its field and read back in words.

Bounds and patterns are pydantic `Field` constraints (`Field(gt=0)`, `Field(ge=0, lt=1)`,
`Field(pattern=...)`), so the JSON Schema has them; this module turns them into the reference
page's words (`allowed`) and into the one line a user sees when a value breaks them
(`refusal`). A field whose rule reads better in its own words carries `Says(...)` beside them.
Rules between several keys stay model validators, each raising through `require`.
"""

from __future__ import annotations

import typing
from typing import Any

import annotated_types
from pydantic.fields import FieldInfo

# pydantic's error types for a broken constraint (the rest are type errors)
CONSTRAINT_ERRORS = (
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "string_pattern_mismatch",
    "too_short",
    "too_long",
)


class Says:
    """A field's own words for what it allows, where its bounds or pattern alone would not say
    it as clearly ("is a folder name, not a path"); the refusal adds the value given."""

    def __init__(self, text: str):
        self.text = text


def require(condition: bool, message: str) -> None:
    """A rule between keys (or one a field cannot declare): `message` names every key."""
    if not condition:
        raise ValueError(message)


def _number(value: Any) -> str:
    """A bound as written in the code: 0, 1, 2592000 (a whole float without its ".0")."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def allowed(field: FieldInfo) -> str:
    """The field's bounds in words: "greater than 0", "in [0, 1)", "at least 1"; its own words
    where it has them; "" for a field without constraints."""
    said = [entry.text for entry in field.metadata if isinstance(entry, Says)]
    if said:
        return said[0]
    low = high = None
    words = []
    for entry in field.metadata:
        if isinstance(entry, annotated_types.Gt):
            low = f"({_number(entry.gt)}"
        elif isinstance(entry, annotated_types.Ge):
            low = f"[{_number(entry.ge)}"
        elif isinstance(entry, annotated_types.Lt):
            high = f"{_number(entry.lt)})"
        elif isinstance(entry, annotated_types.Le):
            high = f"{_number(entry.le)}]"
        elif isinstance(entry, annotated_types.MinLen):
            words.append(f"must hold at least {entry.min_length}")
    if typing.get_origin(field.annotation) in (list, tuple):
        each = allowed(item_field(field))
        words += [f"each {each.removeprefix('must be ')}"] if each else []
    if low and high:
        words.insert(0, f"must be in {low}, {high}")
    elif low:
        above = "greater than" if low[0] == "(" else "at least"
        words.insert(0, f"must be {above} {low[1:]}")
    elif high:
        below = "less than" if high[-1] == ")" else "at most"
        words.insert(0, f"must be {below} {high[:-1]}")
    return ", ".join(words)


def refusal(key: str, field: FieldInfo, value: Any, at: str = "") -> str:
    """The line a user sees for a value that breaks the field's constraints; a number as the
    field read it (a float key reads "1e300" and -1 as floats). `at`: the item of a list that
    broke them ("[1]")."""
    if field.annotation is float and not isinstance(value, bool):
        try:
            value = float(value)
        except (TypeError, ValueError):
            pass
    return f"{key} {allowed(field)}, got {value!r}{f' at {at}' if at else ''}"


def item_field(field: FieldInfo) -> FieldInfo:
    """The field of one item of a list field (`model.hidden[0]`): its own constraints."""
    (item, *_) = typing.get_args(field.annotation)
    return FieldInfo.from_annotation(item)
