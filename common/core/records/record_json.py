"""Records as JSON objects and back: `to_json` dumps a record's model, `from_json` reads one
through the records' discriminated union (its "record" key picks the class, pydantic checks every
field) and says what is wrong in one line naming file, line and field.
`common.core.records.metrics` reads and writes them in files."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from common.checks import error_lines
from common.core.records.fields import READING
from common.core.records.records import (
    CONFIG_SECTIONS,
    KINDS,
    SCHEMA_VERSION,
    Epoch,
    Record,
    Resume,
    RunEnd,
    RunStart,
    Step,
)


def _kind_of(raw: Any) -> str | None:
    """The tag of a JSON object (its "record" key) or of a typed record (its KIND)."""
    if isinstance(raw, dict):
        return raw.get("record") if isinstance(raw.get("record"), str) else None
    return getattr(raw, "KIND", None)


# Any record, told apart by its "record" key: pydantic picks the class and checks its fields.
RECORD: TypeAdapter[Record] = TypeAdapter(
    Annotated[
        Annotated[RunStart, Tag(RunStart.KIND)]
        | Annotated[Resume, Tag(Resume.KIND)]
        | Annotated[Step, Tag(Step.KIND)]
        | Annotated[Epoch, Tag(Epoch.KIND)]
        | Annotated[RunEnd, Tag(RunEnd.KIND)],
        Discriminator(
            _kind_of, custom_error_type=error_lines.NOT_A_RECORD, custom_error_message="no kind"
        ),
    ]
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
