"""The published JSON Schema is what common.core.records.metrics checks, and real records pass
it."""

import json

import jsonschema
import pytest

from common.core.records import schema
from tests.records import epoch_record, start_record, write_run
from tests.schema_check import SCHEMA_FILE, VALIDATOR, check_file


def test_the_published_file_is_what_common_metrics_defines():
    assert SCHEMA_FILE.read_text() == schema.text(), (
        "run: python -m common.core.records.schema > " + str(SCHEMA_FILE)
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_FILE.read_text()))


def test_written_records_pass_and_broken_ones_fail(tmp_path):
    write_run(tmp_path / "run" / "metrics.jsonl")
    assert check_file(tmp_path / "run" / "metrics.jsonl") == 6
    broken = [
        {k: v for k, v in epoch_record(1, 0.9, 1.0).items() if k != "samples_per_s"},
        epoch_record(1, 0.9, 1.0) | {"steps": True},
        start_record() | {"config": {"train": {}}},
        start_record() | {"schema_version": 2},
        {"record": "run_end", "status": "crashed"},
        {"record": "bogus"},
    ]
    for record in broken:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(record, VALIDATOR.schema)


def test_every_field_has_a_description_with_its_meaning():
    definitions = schema.json_schema()["$defs"]
    for kind, definition in definitions.items():
        for name, field in definition["properties"].items():
            assert name == "record" or field.get("description"), f"{kind}.{name}"
