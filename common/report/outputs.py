"""compare.py --out DIR: the report files (report.html, self-contained; report.md, report.csv,
report.json) and the plots, for every group of comparable runs and the model-size axis."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from common.report import looks, pages, plots, size_table, sizeplot, tables
from common.report.rows import Group, Row
from common.report.size_table import SizeRow
from common.storage import whole


def write_report(
    out: Path,
    groups: list[Group],
    runs_by_group: list[list[Row]],
    notes: list[str],
    problems: list[str],
    target: float,
    size_rows: list[SizeRow],
    projection: pages.Projection | None = None,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    rendered = []
    for index, ((key, members), rows) in enumerate(zip(groups, runs_by_group, strict=True)):
        folder = out / ("plots" if index == 0 else f"plots-group{index + 1}")
        pictures = plots.write_plots(rows, members, folder, target)
        rendered.append(pages.Group(key, rows, members, pictures))
    size = None
    if size_rows:
        everyone = [run for _, members in groups for run in members]
        picture = sizeplot.plot_sizes(size_rows, out / "size.png", looks.caption(everyone))
        size = pages.SizeAxis(size_table.size_table_lines(size_rows), picture, sizeplot.CAPTION)
    for write, name in ((pages.write_html, "report.html"), (pages.write_markdown, "report.md")):
        write(
            rendered,
            notes,
            problems,
            path=out / name,
            target=target,
            size=size,
            projection=projection,
        )
    all_rows = [{**group.key, **row.as_dict()} for group in rendered for row in group.rows]
    whole.write_text(out / "report.csv", tables.csv_table(all_rows))
    document = {
        "target_accuracy": target,
        "groups": [
            {"key": group.key, "rows": [row.as_dict() for row in group.rows]} for group in rendered
        ],
        "model_sizes": [asdict(row) for row in size_rows],
        "not_side_by_side": notes,
        "problems": problems,
    }
    whole.write_text(out / "report.json", json.dumps(document, indent=2))
    return out / "report.html"
