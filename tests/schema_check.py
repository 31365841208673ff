"""Validate metrics records against the published JSON Schema (docs/metrics.schema.json) with
the `jsonschema` package: what another tool would do with our runs."""

import json
from pathlib import Path

import jsonschema

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "docs" / "metrics.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def check_file(metrics_file: Path) -> int:
    """Validate every record of a metrics file; return how many there were."""
    lines = metrics_file.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        errors = sorted(VALIDATOR.iter_errors(json.loads(line)), key=str)
        assert not errors, f"{metrics_file}:{number}: {errors[0].message}"
    return len(lines)
