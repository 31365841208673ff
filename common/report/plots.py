"""compare.py's pictures (PNG, matplotlib), drawn from the report's rows and runs.

Every framework x strategy keeps one colour, marker and line style in every figure (`style`),
and series that share points are nudged apart sideways, so none hides another.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.core import strategies
from common.report.rows import Row
from common.report.runs import RecordedRun

# Every registered strategy has its fixed look, the same in every report; others follow.
KNOWN = [f"{entry.framework} {entry.name}" for entry in strategies.STRATEGIES]
COLOURS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]
LINES = ["-", "--", "-.", ":"]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(
            "plots need matplotlib: pip install matplotlib (or the 'plot' extra)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def style(name: str) -> dict[str, Any]:
    """Colour, marker and line style of a series named '<framework> <strategy>...'."""
    base = " ".join(name.split()[:2])
    index = KNOWN.index(base) if base in KNOWN else len(KNOWN) + sum(map(ord, base)) % 5
    return {
        "color": COLOURS[index % len(COLOURS)],
        "marker": MARKERS[index % len(MARKERS)],
        "linestyle": LINES[index % len(LINES)],
    }


def run_style(run: RecordedRun) -> dict[str, Any]:
    """A run's line: its framework x strategy's colour and marker; the line style and a hollow
    marker tell its worker counts apart."""
    look = style(run.label)
    world = run.start.world_size
    look["linestyle"] = LINES[min(world.bit_length() - 1, len(LINES) - 1)]
    if world > 1:
        look["markerfacecolor"] = "none"
    return look


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
    axis: Any, series: dict[str, Any], factor: float = 1.0, label_values: bool = False
) -> None:
    """Each series with its style, nudged sideways (in log2 space) so equal points stay seen."""
    count = len(series)
    for index, (name, (workers, values)) in enumerate(series.items()):
        shift = 2 ** (0.04 * (index - (count - 1) / 2))
        xs = [w * shift for w in workers]
        ys = [factor * value for value in values]
        axis.plot(xs, ys, label=name, markersize=6, **style(name))
        if label_values and len(workers) <= 4:
            borrowed = 1 if "(from " in name else 0  # the baseline's own series labels it
            for x, y in list(zip(xs, ys, strict=True))[borrowed:]:
                axis.annotate(
                    number(y),
                    (x, y),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=7,
                    color=style(name)["color"],
                )


def _worker_axis(axis: Any, rows: list[Row]) -> None:
    worlds = sorted({row.world for row in rows})
    axis.set_xscale("log", base=2)
    axis.set_xticks(worlds, [str(w) for w in worlds])
    axis.minorticks_off()
    axis.set_xlabel("workers (ranks)")
    axis.grid(True, which="both", alpha=0.3)


def _readable_log_y(axis: Any) -> None:
    from matplotlib import ticker

    axis.set_yscale("log")
    axis.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_minor_formatter(ticker.NullFormatter())


def number(value: float) -> str:
    """Thousands separated from 100 on, three significant digits below (0.85, 1.7, 22)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _thousands() -> Any:
    from matplotlib import ticker

    return ticker.FuncFormatter(lambda value, _: number(value))


def _save(figure: Any, path: Path, plt: Any) -> None:
    for axis in figure.axes:
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_epoch_time(rows: list[Row], path: Path, plt: Any) -> None:
    figure, axis = plt.subplots(figsize=(7, 4.5))
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
    _readable_log_y(axis)
    axis.set_ylabel("time per epoch (s, log scale; epoch 1 excluded)")
    axis.set_title("Time per epoch vs workers (dotted: ideal linear scaling)")
    _save(figure, path, plt)


def _worker_panels(
    rows: list[Row], plt: Any, panels: list[tuple[str, float, str, str]]
) -> list[Any]:
    """One panel per (row key, factor, y label, title), each series against workers."""
    figure, axes = plt.subplots(1, len(panels), figsize=(11, 4.5))
    for axis, (key, factor, ylabel, title) in zip(axes, panels, strict=True):
        _draw_series(axis, _series(rows, key), factor, label_values=True)
        _worker_axis(axis, rows)
        axis.yaxis.set_major_formatter(_thousands())
        axis.set_ylabel(ylabel)
        axis.set_title(title, fontsize=10)
    return [figure, *axes]


def plot_throughput(rows: list[Row], path: Path, plt: Any) -> None:
    figure, _, efficiency = _worker_panels(
        rows,
        plt,
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
    _save(figure, path, plt)


def plot_curves(runs: list[RecordedRun], path: Path, plt: Any) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
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
    _save(figure, path, plt)


def plot_accuracy_time(runs: list[RecordedRun], target: float, path: Path, plt: Any) -> None:
    figure, axis = plt.subplots(figsize=(7, 4.5))
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
    _save(figure, path, plt)


def plot_memory(rows: list[Row], path: Path, plt: Any) -> None:
    counts = "; ".join(sorted({r.peak_counts for r in rows if r.peak_counts}))
    figure, *_ = _worker_panels(
        rows,
        plt,
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
    _save(figure, path, plt)


def plot_steps(runs: list[RecordedRun], path: Path, plt: Any) -> bool:
    with_steps = [run for run in runs if run.steps]
    if not with_steps:
        return False
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for run in with_steps:
        look = {**run_style(run), "marker": None, "linewidth": 1}
        axis.plot([s.step for s in run.steps], [s.loss for s in run.steps], label=run.label, **look)
    axis.set_xlabel("optimizer step (global)")
    axis.set_ylabel("training loss (global batch mean)")
    axis.set_title("Training loss per step")
    axis.grid(True, alpha=0.3)
    _save(figure, path, plt)
    return True


def write_plots(
    rows: list[Row], runs: list[RecordedRun], folder: Path, target: float
) -> list[Path]:
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    drawings: dict[str, Callable[[Path], None]] = {
        "epoch_time.png": lambda path: plot_epoch_time(rows, path, plt),
        "throughput_scaling.png": lambda path: plot_throughput(rows, path, plt),
        "val_curves.png": lambda path: plot_curves(runs, path, plt),
        "accuracy_time.png": lambda path: plot_accuracy_time(runs, target, path, plt),
        "memory.png": lambda path: plot_memory(rows, path, plt),
    }
    written = []
    for name, draw in drawings.items():
        draw(folder / name)
        written.append(folder / name)
    if plot_steps(runs, folder / "step_loss.png", plt):
        written.append(folder / "step_loss.png")
    return written
