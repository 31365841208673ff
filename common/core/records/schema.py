"""The metrics schema published as JSON Schema (draft 2020-12) with units, generated from the
record dataclasses of `common.core.records.records`, so that other tools can read the runs:

    python -m common.core.records.schema > docs/metrics.schema.json

tests/common/test_schema.py keeps the file equal to what this module builds, and validates real
runs' records against it with `jsonschema`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from typing import Any

from common.core.records.records import CONFIG_SECTIONS, ENTRIES, KINDS, SCHEMA_VERSION

JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    type(None): "null",
}
DIVERGED = "; NaN or Infinity if it diverged"


def _flat(tp: Any) -> list[Any]:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return [part for arg in typing.get_args(tp) for part in _flat(arg)]
    return [tp]


def _json_type(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is list:
        return "array"
    if origin is dict or tp is dict or dataclasses.is_dataclass(tp):
        return "object"
    if origin is typing.Literal:
        return "string"
    return JSON_TYPES[tp]


def _property(spec: dataclasses.Field[Any], tp: Any) -> dict[str, Any]:
    parts = _flat(tp)
    if spec.metadata["added"] and not spec.metadata["nullable"]:
        parts = [part for part in parts if part is not type(None)]
    names = sorted({_json_type(part) for part in parts})
    if "integer" in names and "number" in names:
        names.remove("integer")
    found: dict[str, Any] = {"type": names[0] if len(names) == 1 else names}
    found["description"] = spec.metadata["doc"] + (DIVERGED if spec.metadata["diverges"] else "")
    if spec.metadata["choices"]:
        found["enum"] = list(spec.metadata["choices"])
    for part in parts:
        if typing.get_origin(part) is typing.Literal:
            found["enum"] = list(typing.get_args(part))
        elif typing.get_origin(part) is list:
            (item,) = typing.get_args(part)
            if isinstance(item, type) and dataclasses.is_dataclass(item):
                found["items"] = {"$ref": f"#/$defs/{_entry_name(item)}"}
    return found


def _entry_name(kind: type) -> str:
    """MemoryEntry -> memory_entry: the name of an entry's definition."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind.__name__).lower()


def _definition(kind: type, const: str | None) -> dict[str, Any]:
    hints = typing.get_type_hints(kind)
    properties: dict[str, Any] = {"record": {"const": const}} if const else {}
    required = ["record"] if const else []
    for spec in dataclasses.fields(kind):
        properties[spec.name] = _property(spec, hints[spec.name])
        if not spec.metadata["added"]:
            required.append(spec.name)
    if const == "run_start":
        properties["schema_version"] = {"const": SCHEMA_VERSION, **properties["schema_version"]}
        properties["config"]["required"] = list(CONFIG_SECTIONS)
    return {"type": "object", "properties": properties, "required": required}


def json_schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"metrics.jsonl record, schema version {SCHEMA_VERSION}",
        "description": "One JSON object per line of a run's metrics.jsonl; the first is "
        "run_start. Times are seconds, memory bytes, accuracies fractions, losses nats.",
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in KINDS],
        "$defs": {
            **{name: _definition(kind, name) for name, kind in KINDS.items()},
            **{_entry_name(entry): _definition(entry, None) for entry in ENTRIES},
        },
    }


def text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(text(), end="")
