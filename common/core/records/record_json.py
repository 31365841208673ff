"""Records as JSON objects and back: `to_json` dumps a record's model, `from_json` reads one
through the records' discriminated union (its "record" key picks the class, pydantic checks every
field) and says what is wrong in one line naming file, line and field.
`common.core.records.metrics` reads and writes them in files."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from common.checks import error_lines
from common.core.records.fields import READING
from common.core.records.records import (
    CONFIG_SECTIONS,
    KINDS,
    RECORD,
    SCHEMA_VERSION,
    Record,
    RunStart,
)


class MetricsError(ValueError):
    """A record breaks the schema; the message names file, line and field where known."""


def to_json(record: Record) -> dict[str, Any]:
    """The record as the JSON object a metrics file holds: its kind first, then its fields
    (`Fields`' serializer leaves out a field added after version 1 whose value is unknown)."""
    return {"record": record.KIND, **record.model_dump()}


def from_json(raw: Any, where: str = "record") -> Record:
    """The typed record of a JSON object; MetricsError naming `where` and the field otherwise."""
    try:
        record: Record = RECORD.validate_python(raw, context=READING)
    except ValidationError as error:
        raise MetricsError(error_lines.record_line(error, KINDS, raw, where)) from None
    if isinstance(record, RunStart):
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
