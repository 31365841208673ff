"""compare.py's report pages: a self-contained HTML file (pictures inlined, readable offline)
and its Markdown twin. Each leads with the verdict and the environment, then one table per
group of comparable runs with links to the run folders, the figures with captions, the notes.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from common.core import whole_files
from common.report import trace_files, verdict
from common.report.render.tables import footnotes, markdown_table, section_text, table_lines
from common.report.rows import RunGroup

# The HTML page's template (render/templates/), escaped as HTML wherever it inserts text.
TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("common.report.render", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)
TITLE = "Distributed MNIST: PyTorch vs TensorFlow"
CAPTIONS = {
    "epoch_time": "Training time per epoch against workers, log scale (medians over epochs 2..). "
    "Dotted: perfect linear scaling from each series' first point.",
    "throughput_scaling": "Left: training samples/s against workers. Right: scaling efficiency, "
    "samples/s over workers x the same framework's 1-worker samples/s; 100% is linear.",
    "val_curves": "Validation loss and accuracy after each epoch, one line per run.",
    "accuracy_time": "Validation accuracy against the run's elapsed time; the dashed line is "
    "the target accuracy, and where a line first crosses it is the time to target.",
    "memory": "Left: peak memory of the largest rank. Right: parameters, gradients and "
    "optimizer state one rank holds (FSDP shards them, DDP and MWMS replicate them).",
    "step_loss": "Training loss of every recorded step (global batch mean). Runs that agree "
    "bit for bit (DDP and FSDP on the same batches) draw one line over the other.",
}
STYLE = (
    "body{font-family:sans-serif;max-width:1150px;margin:auto;padding:0 12px;color:#222}"
    "table{border-collapse:collapse;font-size:13px;margin:6px 0}"
    "td,th{border:1px solid #bbb;padding:3px 6px;text-align:right}"
    "th{background:#eee}td:first-child,th:first-child{text-align:left}"
    ".verdict{background:#f3f7ff;border-left:4px solid #3b6fd8;padding:6px 14px}"
    ".env td{text-align:left}figure{margin:18px 0}img{max-width:100%}"
    "figcaption{font-size:13px;color:#444}"
)


def _picture(path: Path, caption: str) -> dict[str, str]:
    """A figure inlined into the page (readable offline), with its alt text and caption."""
    data = base64.b64encode(path.read_bytes()).decode()
    return {"alt": path.stem, "data": data, "caption": caption}


def _group(group: RunGroup, page: Path, target: float) -> dict[str, Any]:
    """One group's section: its verdict, its table with a link to each row's run folders, and
    its figures."""
    lines = table_lines(group.rows)
    rows = [
        {
            "cells": line,
            "links": [
                (os.path.relpath(folder, page.parent), Path(folder).name) for folder in row.folders
            ],
        }
        for row, line in zip(group.rows, lines[1:], strict=True)
    ]
    return {
        "title": ", ".join(f"{name} {value}" for name, value in group.key.items()),
        "verdict": verdict.of_group(group, target),
        "header": lines[0],
        "rows": rows,
        "pictures": [_picture(p, CAPTIONS.get(p.stem, p.stem)) for p in group.pictures],
    }


@dataclass
class SizeAxis:
    """The model-size section: its table (header first) and figure."""

    lines: list[list[str]]
    picture: Path
    caption: str


@dataclass
class Projection:
    """compare --project's section: why each step takes what it takes (sentences), the table
    as the terminal prints it, the caveats and the plot."""

    sentences: list[str]
    table: list[str]
    caveats: list[str]
    picture: Path | None


@dataclass
class LostRank:
    """What a lost rank costs (`common.report.lost_rank_table`): the table's cells, the header
    first, and lines saying where it was measured and what the columns mean."""

    cells: list[list[str]]
    notes: list[str]


LOST_RANK_TITLE = "What a lost rank costs (python -m common.tools.failure_cost)"


PROJECTION_CAPTION = (
    "Measured samples/s (points) and each run projected to more workers with its framework's "
    "link profile (bands: full overlap of communication with compute to none)."
)


def _projection_markdown(projection: Projection, page: Path) -> list[str]:
    out = ["## At more workers (the projection)", ""]
    out += [f"- {sentence}" for sentence in projection.sentences] + [""]
    out += ["```", *projection.table, "```", ""]
    if projection.picture is not None:
        out += [f"![projection]({projection.picture.relative_to(page.parent)})", ""]
        out += [f"*{PROJECTION_CAPTION}*", ""]
    out += [f"- caveat: {caveat}" for caveat in projection.caveats]
    return out + [""]


def write_html(
    groups: list[RunGroup],
    notes: list[str],
    problems: list[str],
    *,
    target: float,
    path: Path,
    size: SizeAxis | None = None,
    projection: Projection | None = None,
    lost_rank: LostRank | None = None,
    traces: list[tuple[str, list[Path]]] | None = None,
) -> None:
    every_run = [run for group in groups for run in group.runs]
    all_rows = [row for group in groups for row in group.rows]
    page = TEMPLATES.get_template("report.html.j2").render(
        title=TITLE,
        style=STYLE,
        groups=[_group(group, path, target) for group in groups],
        environment=verdict.environment(every_run),
        size=size
        and {
            "header": size.lines[0],
            "rows": size.lines[1:],
            "picture": _picture(size.picture, size.caption) | {"alt": "size"},
        },
        projection=projection
        and {
            "sentences": projection.sentences,
            "table": "\n".join(projection.table),
            "caveats": projection.caveats,
            "picture": projection.picture and _picture(projection.picture, PROJECTION_CAPTION),
        },
        lost_rank=lost_rank
        and {
            "title": LOST_RANK_TITLE,
            "header": lost_rank.cells[0],
            "rows": lost_rank.cells[1:],
            "notes": lost_rank.notes,
        },
        traces=[
            (label, [(os.path.relpath(file, path.parent), file.name) for file in files])
            for label, files in traces or []
        ],
        traces_how=trace_files.HOW + ".",
        sections=(
            ("Notes on the columns", footnotes(all_rows, target)),
            ("Not side by side", notes),
            ("Problems", problems),
        ),
    )
    whole_files.write_text(path, page)


def write_markdown(
    groups: list[RunGroup],
    notes: list[str],
    problems: list[str],
    *,
    target: float,
    path: Path,
    size: SizeAxis | None = None,
    projection: Projection | None = None,
    lost_rank: LostRank | None = None,
    traces: list[tuple[str, list[Path]]] | None = None,
) -> None:
    out = [f"# {TITLE}", ""]
    for index, group in enumerate(groups, start=1):
        out += [f"**Verdict, group {index}**", ""]
        out += [f"- {sentence}" for sentence in verdict.of_group(group, target)] + [""]
    out += ["## Environment", ""]
    out += [
        f"- {what}: {value}"
        for what, value in verdict.environment([run for group in groups for run in group.runs])
    ] + [""]
    for index, group in enumerate(groups, start=1):
        title = ", ".join(f"{n} {v}" for n, v in group.key.items())
        out += [f"## Group {index}: {title}", "", markdown_table(group.rows), ""]
        for picture in group.pictures:
            out += [
                f"![{picture.stem}]({picture.relative_to(path.parent)})",
                "",
                f"*{CAPTIONS.get(picture.stem, picture.stem)}*",
                "",
            ]
    if size is not None:
        out += ["## Model-size axis", "", "| " + " | ".join(size.lines[0]) + " |"]
        out += ["|" + "---|" * len(size.lines[0])]
        out += ["| " + " | ".join(line) + " |" for line in size.lines[1:]] + [""]
        out += [f"![size]({size.picture.relative_to(path.parent)})", "", f"*{size.caption}*", ""]
    if projection is not None:
        out += _projection_markdown(projection, path)
    if lost_rank is not None:
        out += [section_text(LOST_RANK_TITLE, lost_rank.cells, lost_rank.notes, "markdown")]
    if traces:
        out += ["## Traces", ""]
        for label, files in traces:
            links = [f"[{file.name}]({os.path.relpath(file, path.parent)})" for file in files]
            out += [f"- {label}: {', '.join(links)}"]
        out += ["", trace_files.HOW + ".", ""]
    all_rows = [row for group in groups for row in group.rows]
    out += ["## Notes on the columns", ""] + [f"- {n}" for n in footnotes(all_rows, target)]
    out += [""] + [f"- not side by side: {note}" for note in notes]
    out += [f"- problem: {problem}" for problem in problems]
    whole_files.write_text(path, "\n".join(out) + "\n")
