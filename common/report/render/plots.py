"""compare.py's pictures (PNG, matplotlib), drawn from the report's rows and runs.

Every framework x strategy keeps one colour, marker and line style in every figure (`style`),
and series that share points are nudged apart sideways, so none hides another.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.core import whole_files
from common.report import launch_history
from common.report.render.style import (
    Pen,
    caption,
    place_labels,
    pyplot,
    readable_log_y,
    run_style,
    style,
    thousands,
)
from common.report.rows import Row
from common.report.runs import RecordedRun


def _series(rows: list[Row], key: str) -> dict[str, tuple[list[int], list[float]]]:
    """framework/strategy -> (workers, values) for rows that have `key`. A strategy that did not
    run on one worker (ddp, fsdp2) starts from its framework's 1-worker run (torch single), the
    baseline its scaling efficiency is measured against; the label says so."""
    lines: dict[str, tuple[list[int], list[float]]] = {}
    ordered = sorted(rows, key=lambda r: r.world)
    for row in ordered:
        if getattr(row, key) is None:
            continue
        name = f"{row.framework} {row.strategy}"
        if name not in lines and row.world > 1:
            base = next(
                (
                    r
                    for r in ordered
                    if r.framework == row.framework and r.world == 1 and getattr(r, key) is not None
                ),
                None,
            )
            if base is not None:
                name = f"{name} (from {base.strategy} x1)"
                lines[name] = ([1], [getattr(base, key)])
        workers, values = lines.setdefault(name, ([], []))
        workers.append(row.world)
        values.append(getattr(row, key))
    return lines


def _draw_series(
    axis: Any,
    series: dict[str, Any],
    factor: float = 1.0,
    label_values: bool = False,
    label_from: int = 1,
) -> None:
    """Each series with its style, nudged sideways (in log2 space) so equal points stay seen;
    `label_values`: each point from `label_from` workers on gets its value, placed clear of
    the others (`_place_labels`)."""
    count = len(series)
    labels = []
    for index, (name, (workers, values)) in enumerate(series.items()):
        shift = 2 ** (0.04 * (index - (count - 1) / 2))
        xs = [w * shift for w in workers]
        ys = [factor * value for value in values]
        axis.plot(xs, ys, label=name, markersize=6, **style(name))
        if label_values and len(workers) <= 4:
            borrowed = 1 if "(from " in name else 0  # the baseline's own series labels it
            for world, x, y in list(zip(workers, xs, ys, strict=True))[borrowed:]:
                if world >= label_from:
                    labels.append((world, x, y, style(name)["color"]))
    place_labels(axis, labels)


def _worker_axis(axis: Any, rows: list[Row]) -> None:
    worlds = sorted({row.world for row in rows})
    axis.set_xscale("log", base=2)
    axis.set_xlim(worlds[0] / 1.4, worlds[-1] * 1.4)  # the nudged markers stay off the frame
    axis.set_xticks(worlds, [str(w) for w in worlds])
    axis.minorticks_off()
    axis.set_xlabel("workers (ranks)")
    axis.grid(True, which="both", alpha=0.3)


# Legend entries shown per axis: beyond it a legend covers the plot (100 runs in one group).
LEGEND_MAX = 12


def legend(axis: Any) -> None:
    """The axis's legend, one entry per label (repeats of a run share its look), at most
    LEGEND_MAX entries; a last one says how many were left out (the table lists every row)."""
    found = dict(zip(*reversed(axis.get_legend_handles_labels()), strict=True))
    labels, handles = list(found), list(found.values())
    if not handles:
        return
    if len(handles) > LEGEND_MAX:
        left_out = len(handles) - (LEGEND_MAX - 1)
        handles, labels = handles[: LEGEND_MAX - 1], labels[: LEGEND_MAX - 1]
        (blank,) = axis.plot([], [], linestyle="none")
        handles.append(blank)
        labels.append(f"+{left_out} more, not listed (see the table)")
    axis.legend(handles, labels, fontsize=8)


def save(figure: Any, path: Path, pen: Pen) -> None:
    for axis in figure.axes:
        legend(axis)
    figure.text(0.005, 0.005, pen.caption, fontsize=6.5, color="#555555", va="bottom")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    with whole_files.whole(path) as partial:
        figure.savefig(partial, dpi=110, format=path.suffix[1:])
    pen.plt.close(figure)


def plot_epoch_time(rows: list[Row], path: Path, pen: Pen) -> None:
    figure, axis = pen.plt.subplots(figsize=(7, 4.5))
    series = _series(rows, "epoch_s")
    _draw_series(axis, series)
    drawn = set()
    for name, (workers, seconds) in series.items():
        start = (workers[0], seconds[0])
        if len(workers) < 2 or start in drawn:  # one ideal line per starting point
            continue
        drawn.add(start)
        origin = name.split("(from ")[-1].rstrip(")") if "(from " in name else name
        framework = name.split()[0]
        ideal = [seconds[0] * workers[0] / w for w in workers]  # linear scaling from the first
        origin = origin if origin.startswith(framework) else f"{framework} {origin}"
        axis.plot(workers, ideal, ":", color=style(origin)["color"], label=f"ideal from {origin}")
    _worker_axis(axis, rows)
    readable_log_y(axis)
    axis.set_ylabel("time per epoch (s, log scale; epoch 1 excluded)")
    axis.set_title("Time per epoch vs workers (dotted: ideal linear scaling)")
    save(figure, path, pen)


def _worker_panels(
    rows: list[Row], pen: Pen, panels: list[tuple[str, float, str, str]]
) -> list[Any]:
    """One panel per (row key, factor, y label, title), each series against workers. Scaling
    efficiency is 100% at 1 worker by definition: its values are labelled from 2 on."""
    figure, axes = pen.plt.subplots(1, len(panels), figsize=(11, 4.5))
    for axis, (key, factor, ylabel, title) in zip(axes, panels, strict=True):
        label_from = 2 if key == "efficiency" else 1
        _draw_series(axis, _series(rows, key), factor, label_values=True, label_from=label_from)
        _worker_axis(axis, rows)
        axis.yaxis.set_major_formatter(thousands())
        axis.set_ylabel(ylabel)
        axis.set_title(title, fontsize=10)
    return [figure, *axes]


def plot_throughput(rows: list[Row], path: Path, pen: Pen) -> None:
    figure, _, efficiency = _worker_panels(
        rows,
        pen,
        [
            ("samples_s", 1, "training throughput (samples/s)", "Throughput vs workers"),
            (
                "efficiency",
                100,
                "scaling efficiency (% of linear)",
                "Scaling efficiency vs workers (vs 1 worker)",
            ),
        ],
    )
    efficiency.axhline(100, color="grey", linestyle=":", label="ideal (100%)")
    save(figure, path, pen)


def plot_curves(runs: list[RecordedRun], path: Path, pen: Pen) -> None:
    figure, (left, right) = pen.plt.subplots(1, 2, figsize=(11, 4.5))
    for index, run in enumerate(runs):
        epochs = [e.epoch + 0.03 * (index - (len(runs) - 1) / 2) for e in run.epochs]
        look = run_style(run)
        left.plot(epochs, [e.val_loss for e in run.epochs], label=run.label, **look)
        right.plot(epochs, [100 * e.val_accuracy for e in run.epochs], label=run.label, **look)
    for axis in (left, right):
        axis.set_xlabel("epoch")
        axis.grid(True, alpha=0.3)
        axis.xaxis.get_major_locator().set_params(integer=True)
    left.set_ylabel("validation loss (cross-entropy)")
    left.set_title("Validation loss per epoch")
    right.set_ylabel("validation accuracy (%)")
    right.set_title("Validation accuracy per epoch")
    save(figure, path, pen)


def plot_accuracy_time(runs: list[RecordedRun], target: float, path: Path, pen: Pen) -> None:
    figure, axis = pen.plt.subplots(figsize=(7, 4.5))
    for run in runs:
        seconds = [e.elapsed_s for e in run.epochs]
        accuracy = [100 * e.val_accuracy for e in run.epochs]
        axis.plot(seconds, accuracy, label=run.label, **run_style(run))
    axis.axhline(
        100 * target, color="black", linestyle="--", linewidth=1, label=f"target {100 * target:g}%"
    )
    axis.set_xlabel("elapsed time of the run (s, epoch loop)")
    axis.set_ylabel("validation accuracy (%)")
    axis.set_title("Validation accuracy vs time")
    axis.grid(True, alpha=0.3)
    save(figure, path, pen)


def plot_memory(rows: list[Row], path: Path, pen: Pen) -> None:
    counts = "; ".join(sorted({r.peak_counts for r in rows if r.peak_counts}))
    figure, *_ = _worker_panels(
        rows,
        pen,
        [
            ("peak_mib", 1, "peak memory per rank (MiB)", f"Peak memory per rank ({counts})"),
            (
                "state_mib",
                1,
                "params + grads + optimizer state per rank (MiB)",
                "Training state held per rank (FSDP shards it)",
            ),
        ],
    )
    save(figure, path, pen)


def plot_steps(runs: list[RecordedRun], path: Path, pen: Pen) -> bool:
    with_steps = [run for run in runs if run.steps]
    if not with_steps:
        return False
    figure, axis = pen.plt.subplots(figsize=(7, 4.5))
    for run in with_steps:
        look = {**run_style(run), "marker": None, "linewidth": 1}
        sizes = launch_history.resized(run.records)
        label = f"{run.label} ({sizes})" if sizes else run.label
        axis.plot([s.step for s in run.steps], [s.loss for s in run.steps], label=label, **look)
        for step, text in launch_history.marks(run.records):  # where a later launch went on from
            axis.axvline(step, color=look.get("color"), linestyle=":", linewidth=1)
            axis.annotate(
                text,
                (step, 1),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize=7,
                color=look.get("color"),
            )
    if any(launch_history.marks(run.records) for run in with_steps):
        legend(axis)
    axis.set_xlabel("optimizer step (global)")
    axis.set_ylabel("training loss (global batch mean)")
    axis.set_title("Training loss per step")
    axis.grid(True, alpha=0.3)
    save(figure, path, pen)
    return True


def write_plots(
    rows: list[Row], runs: list[RecordedRun], folder: Path, target: float
) -> list[Path]:
    pen = Pen(pyplot(), caption(runs))
    folder.mkdir(parents=True, exist_ok=True)
    drawings: dict[str, Callable[[Path], None]] = {
        "epoch_time.png": lambda path: plot_epoch_time(rows, path, pen),
        "throughput_scaling.png": lambda path: plot_throughput(rows, path, pen),
        "val_curves.png": lambda path: plot_curves(runs, path, pen),
        "accuracy_time.png": lambda path: plot_accuracy_time(runs, target, path, pen),
        "memory.png": lambda path: plot_memory(rows, path, pen),
    }
    written = []
    for name, draw in drawings.items():
        draw(folder / name)
        written.append(folder / name)
    if plot_steps(runs, folder / "step_loss.png", pen):
        written.append(folder / "step_loss.png")
    return written
