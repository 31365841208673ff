"""compare.py's pictures (PNG, matplotlib) and its self-contained HTML report."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from common.report import Run, footnotes, markdown_table, table_lines


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(
            "plots need matplotlib: pip install matplotlib (or the 'plot' extra)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(rows: list[dict], key: str) -> dict[str, tuple[list[int], list[float]]]:
    """framework/strategy -> (workers, values) for rows that have `key`. A strategy that did not
    run on one worker (ddp, fsdp2) starts from its framework's 1-worker run (torch single), the
    baseline its scaling efficiency is measured against; the label says so."""
    lines: dict[str, tuple[list[int], list[float]]] = {}
    ordered = sorted(rows, key=lambda r: r["world"])
    for row in ordered:
        if row.get(key) is None:
            continue
        name = f"{row['framework']} {row['strategy']}"
        if name not in lines and row["world"] > 1:
            base = next(
                (
                    r
                    for r in ordered
                    if r["framework"] == row["framework"]
                    and r["world"] == 1
                    and r.get(key) is not None
                ),
                None,
            )
            if base is not None:
                name = f"{name} (from {base['strategy']} x1)"
                lines[name] = ([1], [base[key]])
        workers, values = lines.setdefault(name, ([], []))
        workers.append(row["world"])
        values.append(row[key])
    return lines


def _worker_axis(axis, rows: list[dict]) -> None:
    worlds = sorted({row["world"] for row in rows})
    axis.set_xscale("log", base=2)
    axis.set_xticks(worlds, [str(w) for w in worlds])
    axis.set_xlabel("workers (ranks)")
    axis.grid(True, which="both", alpha=0.3)


def plot_epoch_time(rows: list[dict], path: Path, plt) -> None:
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for index, (name, (workers, seconds)) in enumerate(_series(rows, "epoch_s").items()):
        line = axis.plot(workers, seconds, "o-", label=name)[0]
        ideal = [seconds[0] * workers[0] / w for w in workers]  # linear scaling from the first
        label = "ideal: linear from 1 worker" if index == 0 else None
        axis.plot(workers, ideal, ":", color=line.get_color(), label=label)
    _worker_axis(axis, rows)
    axis.set_yscale("log")
    axis.set_ylabel("time per epoch (s, log; epoch 1 excluded)")
    axis.set_title("Time per epoch vs workers (dotted: ideal linear scaling)")
    _save(figure, path, plt)


def _worker_panels(rows: list[dict], plt, panels: list[tuple]) -> list:
    """One panel per (row key, factor, y label, title), each series against workers."""
    figure, axes = plt.subplots(1, len(panels), figsize=(11, 4.5))
    for axis, (key, factor, ylabel, title) in zip(axes, panels, strict=True):
        for name, (workers, values) in _series(rows, key).items():
            axis.plot(workers, [factor * value for value in values], "o-", label=name)
        _worker_axis(axis, rows)
        axis.set_ylabel(ylabel)
        axis.set_title(title, fontsize=10)
    return [figure, *axes]


def _save(figure, path: Path, plt) -> None:
    for axis in figure.axes:
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_throughput(rows: list[dict], path: Path, plt) -> None:
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


def plot_curves(runs: list[Run], path: Path, plt) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for run in runs:
        epochs = [e["epoch"] for e in run.epochs]
        left.plot(epochs, [e["val_loss"] for e in run.epochs], "o-", label=run.label)
        right.plot(epochs, [100 * e["val_accuracy"] for e in run.epochs], "o-", label=run.label)
    for axis in (left, right):
        axis.set_xlabel("epoch")
        axis.grid(True, alpha=0.3)
        axis.xaxis.get_major_locator().set_params(integer=True)
    left.set_ylabel("validation loss (cross-entropy)")
    left.set_title("Validation loss per epoch")
    right.set_ylabel("validation accuracy (%)")
    right.set_title("Validation accuracy per epoch")
    _save(figure, path, plt)


def plot_memory(rows: list[dict], path: Path, plt) -> None:
    counts = "; ".join(sorted({r["peak_counts"] for r in rows if r["peak_counts"]}))
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


def plot_steps(runs: list[Run], path: Path, plt) -> bool:
    with_steps = [run for run in runs if run.steps]
    if not with_steps:
        return False
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for run in with_steps:
        axis.plot([s["step"] for s in run.steps], [s["loss"] for s in run.steps], label=run.label)
    axis.set_xlabel("optimizer step (global)")
    axis.set_ylabel("training loss (global batch mean)")
    axis.set_title("Training loss per step")
    axis.grid(True, alpha=0.3)
    _save(figure, path, plt)
    return True


def write_plots(rows: list[dict], runs: list[Run], folder: Path) -> list[Path]:
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw, data in (
        ("epoch_time.png", plot_epoch_time, rows),
        ("throughput_scaling.png", plot_throughput, rows),
        ("val_curves.png", plot_curves, runs),
        ("memory.png", plot_memory, rows),
    ):
        draw(data, folder / name, plt)
        written.append(folder / name)
    if plot_steps(runs, folder / "step_loss.png", plt):
        written.append(folder / "step_loss.png")
    return written


def write_html(
    groups: list[tuple[dict, list[dict], list[Path]]],
    notes: list[str],
    problems: list[str],
    path: Path,
) -> None:
    """One file, pictures inlined, readable offline."""
    parts = [
        "<!doctype html><meta charset='utf-8'><title>Distributed MNIST: torch vs tf</title>",
        "<style>body{font-family:sans-serif;max-width:1150px;margin:auto}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #bbb;"
        "padding:3px 6px;text-align:right}img{max-width:100%}</style>",
        "<h1>Distributed MNIST: PyTorch vs TensorFlow</h1>",
    ]
    for key, rows, pictures in groups:
        title = ", ".join(f"{name} {value}" for name, value in key.items())
        lines = table_lines(rows)
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>")
        parts.append("".join(f"<th>{html.escape(cell)}</th>" for cell in lines[0]) + "</tr>")
        for line in lines[1:]:
            parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>")
        parts.append("</table><ul>")
        parts += [f"<li>{html.escape(note)}</li>" for note in footnotes(rows)]
        parts.append("</ul>")
        for picture in pictures:
            encoded = base64.b64encode(picture.read_bytes()).decode()
            parts.append(f"<p><img alt='{picture.stem}' src='data:image/png;base64,{encoded}'>")
    for heading, lines in (("Not side by side", notes), ("Problems", problems)):
        if lines:
            parts.append(f"<h2>{heading}</h2><ul>")
            parts += [f"<li>{html.escape(line)}</li>" for line in lines]
            parts.append("</ul>")
    path.write_text("\n".join(parts), encoding="utf-8")


def write_markdown(groups, notes: list[str], problems: list[str], path: Path) -> None:
    out = ["# Distributed MNIST: PyTorch vs TensorFlow", ""]
    for key, rows, pictures in groups:
        out += (
            ["## " + ", ".join(f"{n} {v}" for n, v in key.items()), "", markdown_table(rows), ""]
            + [f"- {note}" for note in footnotes(rows)]
            + [""]
        )
        out += [f"![{p.stem}]({p.relative_to(path.parent)})" for p in pictures] + [""]
    out += [f"- not side by side: {note}" for note in notes]
    out += [f"- problem: {problem}" for problem in problems]
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
