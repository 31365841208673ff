"""compare.py's report pages: a self-contained HTML file (pictures inlined, readable offline)
and its Markdown twin. Each leads with the verdict and the environment, then one table per
group of comparable runs with links to the run folders, the figures with captions, the notes.
"""

from __future__ import annotations

import base64
import html
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.report import verdict
from common.report.rows import Row
from common.report.runs import RecordedRun
from common.report.tables import footnotes, markdown_table, table_lines
from common.storage import whole

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


@dataclass
class Group:
    key: dict[str, Any]
    rows: list[Row]
    runs: list[RecordedRun]
    pictures: list[Path]


def _link(folder: str, page: Path) -> str:
    target = os.path.relpath(folder, page.parent)
    return f"<a href='{html.escape(target)}/'>{html.escape(Path(folder).name)}</a>"


def _table(rows: list[Row], page: Path) -> list[str]:
    lines = table_lines(rows)
    parts = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in lines[0])]
    parts[0] += "<th>run folders (config.yaml inside)</th></tr>"
    for row, line in zip(rows, lines[1:], strict=True):
        links = ", ".join(_link(folder, page) for folder in row.folders)
        cells = "".join(f"<td>{html.escape(cell)}</td>" for cell in line)
        parts.append(f"<tr>{cells}<td style='text-align:left'>{links}</td></tr>")
    return parts + ["</table>"]


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


PROJECTION_CAPTION = (
    "Measured samples/s (points) and each run projected to more workers with its framework's "
    "link profile (bands: full overlap of communication with compute to none)."
)


def _projection_html(projection: Projection) -> list[str]:
    parts = ["<h2>At more workers (the projection)</h2><ul>"]
    parts += [f"<li>{html.escape(sentence)}</li>" for sentence in projection.sentences]
    parts += ["</ul>", f"<pre>{html.escape(chr(10).join(projection.table))}</pre>"]
    if projection.picture is not None:
        encoded = base64.b64encode(projection.picture.read_bytes()).decode()
        parts.append(
            f"<figure><img alt='projection' src='data:image/png;base64,{encoded}'>"
            f"<figcaption>{html.escape(PROJECTION_CAPTION)}</figcaption></figure>"
        )
    if projection.caveats:
        parts += ["<h3>Caveats</h3><ul>"]
        parts += [f"<li>{html.escape(caveat)}</li>" for caveat in projection.caveats] + ["</ul>"]
    return parts


def _projection_markdown(projection: Projection, page: Path) -> list[str]:
    out = ["## At more workers (the projection)", ""]
    out += [f"- {sentence}" for sentence in projection.sentences] + [""]
    out += ["```", *projection.table, "```", ""]
    if projection.picture is not None:
        out += [f"![projection]({projection.picture.relative_to(page.parent)})", ""]
        out += [f"*{PROJECTION_CAPTION}*", ""]
    out += [f"- caveat: {caveat}" for caveat in projection.caveats]
    return out + [""]


def _size_html(size: SizeAxis) -> list[str]:
    encoded = base64.b64encode(size.picture.read_bytes()).decode()
    parts = ["<h2>Model-size axis</h2><table><tr>"]
    parts[0] += "".join(f"<th>{html.escape(c)}</th>" for c in size.lines[0]) + "</tr>"
    for line in size.lines[1:]:
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>")
    parts.append("</table>")
    parts.append(
        f"<figure><img alt='size' src='data:image/png;base64,{encoded}'>"
        f"<figcaption>{html.escape(size.caption)}</figcaption></figure>"
    )
    return parts


def write_html(
    groups: list[Group],
    notes: list[str],
    problems: list[str],
    *,
    target: float,
    path: Path,
    size: SizeAxis | None = None,
    projection: Projection | None = None,
) -> None:
    every_run = [run for group in groups for run in group.runs]
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>{TITLE}</title>",
        f"<style>{STYLE}</style><h1>{TITLE}</h1>",
    ]
    for index, group in enumerate(groups, start=1):
        said = verdict.sentences(group.rows, target)
        parts.append(f"<div class='verdict'><h3>Verdict, group {index}</h3><ul>")
        parts += [f"<li>{html.escape(sentence)}</li>" for sentence in said] + ["</ul></div>"]
    parts.append("<h2>Environment</h2><table class='env'>")
    for what, value in verdict.environment(every_run):
        parts.append(f"<tr><th>{html.escape(what)}</th><td>{html.escape(value)}</td></tr>")
    parts.append("</table>")
    for index, group in enumerate(groups, start=1):
        title = ", ".join(f"{name} {value}" for name, value in group.key.items())
        parts.append(f"<h2>Group {index}: {html.escape(title)}</h2>")
        parts += _table(group.rows, path)
        for picture in group.pictures:
            encoded = base64.b64encode(picture.read_bytes()).decode()
            caption = html.escape(CAPTIONS.get(picture.stem, picture.stem))
            parts.append(
                f"<figure><img alt='{picture.stem}' src='data:image/png;base64,"
                f"{encoded}'><figcaption>{caption}</figcaption></figure>"
            )
    if size is not None:
        parts += _size_html(size)
    if projection is not None:
        parts += _projection_html(projection)
    all_rows = [row for group in groups for row in group.rows]
    sections = (
        ("Notes on the columns", footnotes(all_rows, target)),
        ("Not side by side", notes),
        ("Problems", problems),
    )
    for heading, lines in sections:
        if lines:
            parts.append(f"<h2>{heading}</h2><ul>")
            parts += [f"<li>{html.escape(line)}</li>" for line in lines] + ["</ul>"]
    whole.write_text(path, "\n".join(parts))


def write_markdown(
    groups: list[Group],
    notes: list[str],
    problems: list[str],
    *,
    target: float,
    path: Path,
    size: SizeAxis | None = None,
    projection: Projection | None = None,
) -> None:
    out = [f"# {TITLE}", ""]
    for index, group in enumerate(groups, start=1):
        out += [f"**Verdict, group {index}**", ""]
        out += [f"- {sentence}" for sentence in verdict.sentences(group.rows, target)] + [""]
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
    all_rows = [row for group in groups for row in group.rows]
    out += ["## Notes on the columns", ""] + [f"- {n}" for n in footnotes(all_rows, target)]
    out += [""] + [f"- not side by side: {note}" for note in notes]
    out += [f"- problem: {problem}" for problem in problems]
    whole.write_text(path, "\n".join(out) + "\n")
