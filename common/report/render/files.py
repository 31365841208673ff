"""compare.py --out DIR: the report files (report.html, self-contained; report.md, report.csv,
report.json) and the plots, for every group of comparable runs and the model-size axis."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from common.core import whole_files
from common.report.render import pages, plots, size_plot, style, tables
from common.report.rows import RunGroup
from common.report.size_table import SizeRow


def write_report(
    out: Path,
    groups: list[RunGroup],
    notes: list[str],
    problems: list[str],
    target: float,
    size_rows: list[SizeRow],
    projection: pages.Projection | None = None,
    lost_rank: pages.LostRank | None = None,
    traces: list[tuple[str, list[Path]]] | None = None,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for index, group in enumerate(groups):
        folder = out / ("plots" if index == 0 else f"plots-group{index + 1}")
        group.pictures = plots.write_plots(group.rows, group.runs, folder, target)
    size = None
    if size_rows:
        everyone = [run for group in groups for run in group.runs]
        picture = size_plot.plot_sizes(size_rows, out / "size.png", style.caption(everyone))
        size = pages.SizeAxis(tables.size_table_lines(size_rows), picture, size_plot.CAPTION)
    for write, name in ((pages.write_html, "report.html"), (pages.write_markdown, "report.md")):
        write(
            groups,
            notes,
            problems,
            path=out / name,
            target=target,
            size=size,
            projection=projection,
            lost_rank=lost_rank,
            traces=traces,
        )
    all_rows = [{**group.key, **row.as_dict()} for group in groups for row in group.rows]
    whole_files.write_text(out / "report.csv", tables.csv_table(all_rows))
    document = {
        "target_accuracy": target,
        "groups": [
            {"key": group.key, "rows": [row.as_dict() for row in group.rows]} for group in groups
        ],
        "model_sizes": [asdict(row) for row in size_rows],
        "not_side_by_side": notes,
        "problems": problems,
    }
    if lost_rank is not None:
        header, *lines = lost_rank.cells
        document["lost_rank"] = {"header": header, "rows": lines, "notes": lost_rank.notes}
    whole_files.write_text(out / "report.json", json.dumps(document, indent=2))
    return out / "report.html"
