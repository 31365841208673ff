"""Records as JSON objects and back: the one serializer (`to_json`) and the reader that checks
every field against its dataclass (`from_json`), naming file, line and field of what is wrong.
`common.core.records.metrics` reads and writes them in files."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from common.core.records.records import CONFIG_SECTIONS, KINDS, SCHEMA_VERSION, Record

JSON_NAMES = {bool: "bool", int: "int", float: "int or float", str: "str", type(None): "null"}


QUOTED = 200  # characters of a value a message quotes at most


class MetricsError(ValueError):
    """A record breaks the schema; the message names file, line and field where known."""


def quote(value: Any, limit: int = QUOTED) -> str:
    """`repr(value)`, cut to `limit` characters with its length said: a message about a value
    stays one readable line however big the value is."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, (str, bytes, list, dict)) else len(text)
    return f"{text[:limit]}... ({size:,} characters)"


def to_json(record: Record) -> dict[str, Any]:
    """The record as the JSON object a metrics file holds: its kind first, then its fields. A
    field added after version 1 whose value is unknown (None, where null is not one of its
    values) is left out, as in a file written before it existed."""
    return {"record": record.KIND, **_fields(record)}


def _fields(instance: Any) -> dict[str, Any]:
    out = {}
    for spec in dataclasses.fields(instance):
        value = getattr(instance, spec.name)
        if value is None and spec.metadata["added"] and not spec.metadata["nullable"]:
            continue
        if isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            value = [_fields(item) for item in value]
        out[spec.name] = value
    return out


def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_describe(arg) for arg in typing.get_args(tp))
    if origin is list:
        return "list"
    if origin is dict or tp is dict:
        return "dict"
    if dataclasses.is_dataclass(tp):
        return "object"
    return JSON_NAMES.get(tp, str(tp))


def _matches(value: Any, tp: Any) -> bool:
    """Whether a JSON value has the shape of annotation `tp` (its items checked elsewhere)."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return any(_matches(value, arg) for arg in typing.get_args(tp))
    if origin is typing.Literal:
        return isinstance(value, str) and value in typing.get_args(tp)
    if tp is type(None):
        return value is None
    if isinstance(value, bool):
        return tp is bool
    if tp is float:
        return isinstance(value, (int, float))
    if origin is list:
        return isinstance(value, list)
    if origin is dict or tp is dict or dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return isinstance(value, tp)


def _item_type(tp: Any) -> Any:
    """The item annotation of list[X] (or list[X] | None)."""
    for arg in (tp, *typing.get_args(tp)):
        if typing.get_origin(arg) is list:
            return typing.get_args(arg)[0]
    return None


def _check_float(name: str, value: Any, diverges: bool, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value) and not diverges:
        raise MetricsError(f"{where}: field '{name}' is {value}, expected a finite number")


def _build(kind: type, raw: dict[str, Any], where: str) -> Any:
    """An instance of dataclass `kind` from JSON object `raw`, every field checked."""
    values: dict[str, Any] = {}
    hints = _hints(kind)
    for spec in dataclasses.fields(kind):
        name, tp = spec.name, hints[spec.name]
        if name not in raw:
            if spec.metadata["added"]:
                values[name] = None
                continue
            raise MetricsError(f"{where}: field '{name}' is missing")
        value = raw[name]
        allowed = tp
        if spec.metadata["added"] and not spec.metadata["nullable"]:
            present = tuple(arg for arg in typing.get_args(tp) if arg is not type(None))
            allowed = typing.Union[present]  # noqa: UP007 - built at run time
        if not _matches(value, allowed):
            got = "bool" if isinstance(value, bool) else f"{type(value).__name__} {quote(value)}"
            if typing.get_origin(allowed) is typing.Literal:
                expected = _describe(tp)
                raise MetricsError(
                    f"{where}: field '{name}' is {quote(value)}, expected {expected}"
                )
            raise MetricsError(f"{where}: field '{name}' must be {_describe(allowed)}, got {got}")
        _check_float(name, value, spec.metadata["diverges"], where)
        choices = spec.metadata["choices"]
        if choices and value not in choices:
            expected = ", ".join(repr(choice) for choice in choices)
            raise MetricsError(
                f"{where}: field '{name}' is {quote(value)}, expected one of {expected}"
            )
        item = _item_type(tp)
        if isinstance(item, type) and dataclasses.is_dataclass(item) and value is not None:
            value = [_entry(item, entry, f"{where} {name}[{i}]") for i, entry in enumerate(value)]
        elif item is not None and value is not None:
            for entry in value:
                _check_float(name, entry, False, where)
        values[name] = value
    return kind(**values)


def _entry(kind: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise MetricsError(f"{where}: must be an object")
    return _build(kind, raw, where)


def from_json(raw: Any, where: str = "record") -> Record:
    """The typed record of a JSON object; MetricsError naming `where` and the field otherwise."""
    if not isinstance(raw, dict):
        raise MetricsError(f"{where}: a record is a JSON object, got {type(raw).__name__}")
    name = raw.get("record")
    if name not in KINDS:
        raise MetricsError(
            f"{where}: field 'record' is {quote(name)}, expected one of {', '.join(KINDS)}"
        )
    record: Record = _build(KINDS[name], raw, f"{where} ({name})")
    if name == "run_start":
        _check_start(raw, where)
    return record


def _check_start(raw: dict[str, Any], where: str) -> None:
    missing = [name for name in CONFIG_SECTIONS if not isinstance(raw["config"].get(name), dict)]
    if missing:
        raise MetricsError(
            f"{where}: field 'config' lacks the section(s) {', '.join(missing)}: it is not a "
            "resolved config"
        )
    if raw["schema_version"] != SCHEMA_VERSION:
        raise MetricsError(
            f"{where}: field 'schema_version' is {raw['schema_version']}, this reader "
            f"understands version {SCHEMA_VERSION}"
        )
