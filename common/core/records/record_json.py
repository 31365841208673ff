"""Records as JSON objects and back: the one serializer (`to_json`) and the reader (`from_json`),
which lets pydantic check every field against its record class and says what is wrong in one
line naming file, line and field. `common.core.records.metrics` reads and writes them in files."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from common.core.records.fields import READING, meaning
from common.core.records.records import CONFIG_SECTIONS, KINDS, SCHEMA_VERSION, Record

QUOTED = 200  # characters of a value a message quotes at most
# what a field must be, by the type of pydantic's error about it
EXPECTED = {
    "int_type": "int",
    "float_type": "int or float",
    "string_type": "str",
    "bool_type": "bool",
    "list_type": "list",
    "dict_type": "dict",
    "model_type": "object",
    "model_attributes_type": "object",
    "int_from_float": "int",
}


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


def _fields(instance: BaseModel) -> dict[str, Any]:
    out = {}
    for name in type(instance).model_fields:
        value = getattr(instance, name)
        said = meaning(type(instance), name)
        if value is None and said.added and not said.nullable:
            continue
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            value = [_fields(item) for item in value]
        elif isinstance(value, BaseModel):
            value = _fields(value)
        out[name] = value
    return out


def _message(error: dict[str, Any], kind: type[BaseModel], raw: Any, where: str) -> str:
    """pydantic's first error as the reader's one line."""
    loc, value = list(error["loc"]), error["input"]
    place, owner = where, kind
    if error["type"] == "not_null":
        loc.append(error["ctx"]["name"])
    while len(loc) > 1:  # into an entry: "where memory[1]: field 'rank' ..."
        name, *loc = loc
        owner, raw = _item_kind(owner, str(name)), raw[name]
        if loc and isinstance(loc[0], int):  # an entry of a list
            index, *loc = loc
            place, raw = f"{place} {name}[{index}]", raw[index]
        else:  # an object of its own: "where step_split: field 'wall_s' ..."
            place = f"{place} {name}"
    name = str(loc[0]) if loc else "?"
    if error["type"] == "not_null":
        value = raw.get(name) if isinstance(raw, dict) else None
    said = f"{place}: field '{name}'"
    kind_of_error = error["type"]
    if kind_of_error == "missing":
        return f"{said} is missing"
    if kind_of_error == "finite_number":
        return f"{said} is {value}, expected a finite number"
    if kind_of_error == "literal_error":
        choices = _literal(owner, name)
        return f"{said} is {quote(value)}, expected one of {', '.join(map(repr, choices))}"
    if kind_of_error == "not_null":
        return f"{said} is null, expected {_annotation(owner, name)}"
    got = "bool" if isinstance(value, bool) else f"{type(value).__name__} {quote(value)}"
    return f"{said} must be {EXPECTED.get(kind_of_error, error['msg'])}, got {got}"


def _item_kind(kind: type[BaseModel], name: str) -> type[BaseModel]:
    for arg in getattr(kind.model_fields[name].annotation, "__args__", ()):
        for item in getattr(arg, "__args__", (arg,)):
            if isinstance(item, type) and issubclass(item, BaseModel):
                return item
    return kind


def _literal(kind: type[BaseModel], name: str) -> tuple[str, ...]:
    return tuple(getattr(kind.model_fields[name].annotation, "__args__", ()))


def _annotation(kind: type[BaseModel], name: str) -> str:
    return str(kind.model_fields[name].annotation).replace(" | None", "")


def from_json(raw: Any, where: str = "record") -> Record:
    """The typed record of a JSON object; MetricsError naming `where` and the field otherwise."""
    if not isinstance(raw, dict):
        raise MetricsError(f"{where}: a record is a JSON object, got {type(raw).__name__}")
    name = raw.get("record")
    if name not in KINDS:
        raise MetricsError(
            f"{where}: field 'record' is {quote(name)}, expected one of {', '.join(KINDS)}"
        )
    kind = KINDS[name]
    try:
        record: Record = kind.model_validate(
            {k: v for k, v in raw.items() if k != "record"}, context=READING
        )
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise MetricsError(_message(dict(first), kind, raw, f"{where} ({name})")) from None
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
