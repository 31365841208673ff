"""What a lost rank costs each framework, as `python -m common.tools.failure_cost --out DIR`
measured it (`failure_cost-<launcher>.json`): the files' rows as one table, and where it was
measured. compare.py finds the files among its results, as it finds link profiles, and shows
the table beside the runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.report import measured_files

PATTERN = "failure_cost*.json"
# (key, title, format) of each column, in the order a table shows them
COLUMNS = [
    ("case", "case", "{}"),
    ("launcher", "launcher", "{}"),
    ("ranks", "ranks", "{}"),
    ("step_s", "step s", "{:.4f}"),
    ("save_s", "save s", "{:.3f}"),
    ("save_per_step_s", "save s/step", "{:.4f}"),
    ("notice_s", "notice s", "{:.2f}"),
    ("recover_s", "recover s", "{:.2f}"),
    ("steps_lost", "steps lost", "{}"),
    ("load_s", "load s", "{:.3f}"),
    ("resharded_load_s", "load s resharded", "{:.3f}"),
    ("resharded_to", "to ranks", "{}"),
]
MEANINGS = [
    "notice s: from the kill to the failed launch's run_end",
    "recover s: from there to the first step after the resume (restart, start-up, load)",
    "steps lost: the steps since the last checkpoint",
    "save s: one synchronous checkpoint; save s/step spreads it over the cadence",
    "load s resharded: the same checkpoint loaded at the smaller world",
]


@dataclass(frozen=True)
class Measured:
    """One file: its rows, and the host and time they were measured on."""

    path: Path
    rows: list[dict[str, Any]]
    host: str
    measured: str


def read(path: Path) -> Measured:
    """The file's rows; ValueError naming the file when it is not the tool's."""
    try:
        data = json.loads(path.read_text())
        rows = [{key: row[key] for key, _, _ in COLUMNS} for row in data["rows"]]
        return Measured(path, rows, str(data["host"]), str(data["measured"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path}: not a failure-cost file of python -m common.tools.failure_cost ({error})"
        ) from None


def found(results: list[str]) -> list[Path]:
    """The failure-cost files in the result folders, sorted."""
    return measured_files.found(results, PATTERN)


def cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The header, then a line of cells per row."""
    header = [title for _, title, _ in COLUMNS]
    return [header] + [[form.format(row[key]) for key, _, form in COLUMNS] for row in rows]


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = cells(rows)
    rule = "| " + " | ".join("---" for _ in COLUMNS) + " |"
    body = ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join([body[0], rule, *body[1:]])


def gathered(results: list[str]) -> tuple[list[list[str]], list[str], list[str]]:
    """The cells of every failure-cost file among the results (none: []), the lines saying
    where each was measured and what the columns mean, and a problem per unreadable file."""
    measured, problems = [], []
    for path in found(results):
        try:
            measured.append(read(path))
        except ValueError as error:
            problems.append(str(error))
    if not measured:
        return [], [], problems
    rows = [row for one in measured for row in one.rows]
    return cells(rows), where(measured) + MEANINGS, problems


def where(measured: list[Measured]) -> list[str]:
    """A line per file: where and when its rows were measured."""
    return [f"{m.path.name}: measured {m.measured} on {m.host}" for m in measured]
