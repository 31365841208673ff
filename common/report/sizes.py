"""The model-size axis in a report: one row per series and parameter count, drawn by
`common.report.sizeplot` and tabled here, whenever a series holds two sizes or more."""

from __future__ import annotations

from common.report import tables
from common.report.runs import median_of

SIZE_KEYS = ("model.hidden", "model.width")  # what a size changes; the rest must match


def size_rows(runs: list) -> list[dict]:
    """One row per series (framework x strategy x workers x layout, and everything else in the
    config but the model's size) and parameter count: `Run.summary`'s throughput and memory,
    medians over repeats; [] unless some series holds two sizes or more, the only case where a
    size axis says anything."""
    cells: dict[tuple, list] = {}
    for run in runs:
        params = run.start.get("model_params")
        if params is None or not run.epochs:
            continue
        rest = {k: v for k, v in run.comparable().items() if k not in SIZE_KEYS}
        start = run.start
        series = (start["framework"], start["strategy"], start["world_size"], run.layout)
        cells.setdefault((*series, repr(sorted(rest.items())), params), []).append(run)
    rows = []
    for (framework, strategy, world, layout, rest, params), members in sorted(cells.items()):
        summaries = [run.summary() for run in members]
        row = {
            "framework": framework,
            "strategy": strategy,
            "world": world,
            "layout": layout,
            "series": rest,
            "params": params,
            "runs": len(members),
        }
        for name in ("samples_s", "state_mib", "above_mib", "peak_mib"):
            row[name] = median_of(summary[name] for summary in summaries)
        rows.append(row)
    sizes: dict[tuple, set] = {}
    for row in rows:
        key = (row["framework"], row["strategy"], row["world"], row["layout"], row["series"])
        sizes.setdefault(key, set()).add(row["params"])
    return rows if any(len(found) > 1 for found in sizes.values()) else []


SIZE_COLUMNS = [  # key, header, digits
    ("parameters", "parameters", 0),
    ("framework", "framework", 0),
    ("strategy", "strategy", 0),
    ("world", "workers", 0),
    ("runs", "runs", 0),
    ("samples_s", "samples/s", 1),
    ("state_mib", "state MiB/rank", 0),
    ("above_mib", "above base MiB/rank", 0),
    ("peak_mib", "peak MiB/rank", 0),
]


def size_table_lines(rows: list[dict]) -> list[list[str]]:
    ordered = sorted(rows, key=lambda r: (r["params"], r["framework"], r["strategy"], r["world"]))
    shown = [{**row, "parameters": f"{row['params'] / 1e6:,.1f}M"} for row in ordered]
    return tables.table_lines(shown, SIZE_COLUMNS)
