"""compare.py's tables: the columns of a row, and the row list as text, Markdown or CSV, with
the footnotes that say what each column measures. Rows come from `common.report.rows.rows_for`."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from common.report.rows import Row
from common.report.runs import RunSummary
from common.report.size_table import SIZE_COLUMNS, SizeRow

IDENTITY = [
    ("framework", "framework"),
    ("strategy", "strategy"),
    ("world", "workers"),
    ("layout", "layout"),
    ("runs", "runs"),
]
# Row attribute, header, digits: the row's identity, then every column `RunSummary` declares.
COLUMNS: list[tuple[str, str, int]] = [(key, header, 0) for key, header in IDENTITY] + [
    (spec.name, spec.metadata["header"], spec.metadata["digits"])
    for spec in fields(RunSummary)
    if "header" in spec.metadata
]


PERCENT = ("efficiency", "mfu")  # fractions in the rows, percentages on the page


def _text(row: object, key: str, digits: int) -> str:
    value = getattr(row, key)
    if value is None:
        return "-"
    if key in PERCENT:
        return f"{100 * value:,.{digits}f}"
    if isinstance(value, float):
        text = f"{value:,.{digits}f}"
        low, high = getattr(row, f"{key}_low", None), getattr(row, f"{key}_high", None)
        if low is not None and high is not None:
            text += f" [{low:,.{digits}f}, {high:,.{digits}f}]"
        return text
    return str(value)


def table_lines(
    rows: Sequence[object], columns: list[tuple[str, str, int]] = COLUMNS
) -> list[list[str]]:
    """The header, then one line of cells per row (its attributes named by the columns'
    keys); `columns`: (key, header, digits)."""
    return [[header for _, header, _ in columns]] + [
        [_text(row, key, digits) for key, _, digits in columns] for row in rows
    ]


def terminal_table(rows: list[Row]) -> str:
    return aligned(table_lines(rows))


def aligned(lines: list[list[str]]) -> str:
    """Lines of cells (the header first) as right-aligned text columns."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
        for line in lines
    )


def markdown_table(rows: list[Row]) -> str:
    lines = table_lines(rows)
    out = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(line) + " |" for line in lines[1:]]
    return "\n".join(out)


def csv_table(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    keys = list(rows[0]) if rows else []
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def footnotes(rows: list[Row], target: float | None = None) -> list[str]:
    notes = [
        "epoch s and samples/s: medians over epochs 2.. of each run (epoch 1 holds warm-up "
        "and tracing), then the median over repeats; [low, high] = 95% t-interval of the "
        "mean over repeats (fastest and slowest dropped from 5 repeats on)",
        "eval s = seconds of one evaluation pass over the test set, median over the same epochs",
        "compile s = epoch 1's first step beyond its median step: tracing, compilation "
        "(torch.compile, XLA) and warm-up, kept out of the epoch times",
        "MFU % = samples/s x training FLOPs per sample (6 x forward multiply-accumulates, from "
        "the model definition) / the ranks' summed peak, each a GEMM measured on its device and "
        "threads at the run's precision (common.core.measure.peak)",
        "coll/step and MB sent/rank/step = the collectives one training step issued on the "
        "chief, counted from the framework's own calls, and the bytes a ring algorithm makes a "
        "rank send for them (2(n-1)/n of an all-reduce's buffer, (n-1)/n of a "
        "reduce-scatter's, (n-1) x an all-gather's shard); the records hold them by kind",
        "scaling eff % = samples/s / (workers x samples/s of the same framework's 1-worker "
        "run): strong scaling with a global batch, weak scaling with a per-rank batch",
        "state MiB/rank = parameters + gradients + optimizer state held by one rank (exact bytes)",
        "layout = nodes x ranks per node, and the launcher; runs of different layouts are "
        "separate rows",
        f"to target s = run time (epoch loop) when val accuracy first reached {target:.2%}"
        if target is not None
        else "to target s = run time when val accuracy first reached train.target_accuracy",
    ]
    counts = sorted({row.peak_counts for row in rows if row.peak_counts})
    if counts:
        notes.append("peak MiB/rank = the largest rank's " + "; ".join(counts))
        notes.append(
            "above base MiB/rank = that peak less what the rank held before the model was "
            "built (framework and data loaded): what the model, its training and evaluation "
            "added"
        )
    notes += [spec.metadata["note"] for spec in fields(RunSummary) if spec.metadata.get("note")]
    if any(row.first_epoch_only for row in rows):
        notes.append("runs of one epoch: their times include warm-up and tracing")
    return notes


def size_table_lines(rows: list[SizeRow]) -> list[list[str]]:
    """The model-size axis as table lines (header first), smallest model first."""
    ordered = sorted(rows, key=lambda r: (r.params, r.framework, r.strategy, r.world))
    return table_lines(ordered, SIZE_COLUMNS)


def section_text(title: str, cells: list[list[str]], notes: list[str], form: str) -> str:
    """A titled table of cells (the header first) and its notes, for the terminal or as
    Markdown (the lost-rank table, compare.py)."""
    header, *lines = cells
    if form == "terminal":
        return "\n".join([f"== {title}", aligned(cells), *(f"  * {note}" for note in notes)])
    body = ["| " + " | ".join(line) + " |" for line in lines]
    rule = "|" + "---|" * len(header)
    shown = [f"## {title}", "", "| " + " | ".join(header) + " |", rule, *body, ""]
    return "\n".join([*shown, *(f"- {note}" for note in notes), ""])
