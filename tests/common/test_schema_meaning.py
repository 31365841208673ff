"""The JSON Schema pydantic generates means what the hand-built one published before it meant
(tests/fixtures/metrics.schema.dataclasses.json): over real records and every one-field change
to them, both accept and refuse the same records, and so does the suite's own reader."""

import json
from pathlib import Path

import jsonschema
import pytest

from common.core.records import metrics, record_json, schema
from tests.records import write_run

BEFORE = Path(__file__).parent.parent / "fixtures" / "metrics.schema.dataclasses.json"
OLD = jsonschema.Draft202012Validator(json.loads(BEFORE.read_text()))
NEW = jsonschema.Draft202012Validator(schema.json_schema())
CHANGES = {
    "removed": ...,
    "null": None,
    "a string": "x",
    "a bool": True,
    "an int": 3,
    "a float": 1.5,
    "a list": [],
    "an object": {},
}


def _variants(record: dict) -> list[tuple[str, dict]]:
    found = [("as written", record)]
    for name in record:
        if name == "record":
            continue
        for said, value in CHANGES.items():
            changed = {k: v for k, v in record.items() if k != name}
            if value is not ...:
                changed[name] = value
            found.append((f"{name} {said}", changed))
    for index, entry in enumerate(record.get("memory") or []):
        for name in entry:
            for said, value in CHANGES.items():
                inner = {k: v for k, v in entry.items() if k != name}
                if value is not ...:
                    inner[name] = value
                memory = list(record["memory"])
                memory[index] = inner
                found.append((f"memory[{index}].{name} {said}", {**record, "memory": memory}))
    return found


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "metrics.jsonl"
    write_run(path)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_old_and_new_schema_and_the_reader_agree_on_every_one_field_change(records):
    checked = 0
    for record in records:
        for said, variant in _variants(record):
            old, new = OLD.is_valid(variant), NEW.is_valid(variant)
            try:
                record_json.from_json(variant)
                read = True
            except metrics.MetricsError:
                read = False
            assert old == new == read, f"{record['record']} with {said}: {old=} {new=} {read=}"
            checked += 1
    assert checked > 500
