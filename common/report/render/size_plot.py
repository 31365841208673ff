"""compare.py's model-size figure: throughput and per-rank memory against parameter count, one
series per framework x strategy x workers (`common.report.size_table.SizeRow`)."""

from __future__ import annotations

from pathlib import Path

from common.report.render import plots
from common.report.render.style import Pen, pyplot, style, thousands
from common.report.size_table import SizeRow

CAPTION = (
    "Left: training samples/s against the model's parameters (log-log). Right: what one rank "
    "holds: parameters + gradients + optimizer state (solid, exact bytes) and its peak above "
    "the baseline measured before the model was built (dashed). FSDP's state falls to 1/N of "
    "DDP's; where a solid line of FSDP crosses below DDP's dashed one, sharding lets a rank "
    "hold a model that replication cannot."
)


def _series(rows: list[SizeRow]) -> dict[str, list[SizeRow]]:
    lines: dict[str, list[SizeRow]] = {}
    for row in sorted(rows, key=lambda r: r.params):
        lines.setdefault(row.name, []).append(row)
    return lines


def plot_sizes(rows: list[SizeRow], path: Path, caption: str) -> Path:
    pen = Pen(pyplot(), caption)
    figure, (speed, held) = pen.plt.subplots(1, 2, figsize=(12, 4.6))
    for name, points in _series(rows).items():
        look = style(name)
        params = [row.params for row in points]
        speed.plot(params, [row.samples_s for row in points], label=name, **look)
        state = [row.state_mib for row in points]
        held.plot(params, state, label=f"{name} state", **{**look, "linestyle": "-"})
        above = [row.above_mib for row in points]
        if None not in above:
            held.plot(params, above, **{**look, "linestyle": "--", "markerfacecolor": "none"})
    for axis, label in ((speed, "samples/s"), (held, "MiB per rank")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("model parameters")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
        axis.yaxis.set_major_formatter(thousands())
    speed.set_title("Throughput against model size")
    held.set_title("Per-rank memory: state (solid), peak above baseline (dashed)")
    plots.save(figure, path, pen)
    return path
