"""Records as JSON objects and back: the one serializer (`to_json`) and the reader (`from_json`),
which lets pydantic check every field against its record class and says what is wrong in one
line naming file, line and field. `common.core.records.metrics` reads and writes them in files."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from common.checks import error_lines
from common.checks.error_lines import quote
from common.core.records.fields import READING, meaning
from common.core.records.records import CONFIG_SECTIONS, KINDS, SCHEMA_VERSION, Record


class MetricsError(ValueError):
    """A record breaks the schema; the message names file, line and field where known."""


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
        problem = error_lines.first_problem(error)
        raise MetricsError(
            error_lines.record_line(problem, kind, raw, f"{where} ({name})")
        ) from None
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
