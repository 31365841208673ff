"""How compare.py's pictures look: every framework x strategy keeps one colour, marker and line
style in every figure (`style`), value labels keep clear of each other (`place_labels`), and
every figure says where and when its runs were measured (`caption`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from common.core.config import strategies
from common.report.runs import RecordedRun

# Every registered strategy has its fixed look, the same in every report; others follow.
KNOWN = [f"{entry.framework} {entry.name}" for entry in strategies.STRATEGIES]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]
LINES = ["-", "--", "-.", ":"]


def pyplot() -> Any:
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
    from matplotlib.colors import TABLEAU_COLORS  # matplotlib's tab10, its default cycle

    colours = list(TABLEAU_COLORS.values())
    return {
        "color": colours[index % len(colours)],
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


LABEL_GAP = 0.07  # of a panel's value range: closer value labels are moved apart


def number(value: float) -> str:
    """Thousands separated from 100 on, three significant digits below (0.85, 1.7, 22)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def thousands() -> Any:
    from matplotlib import ticker

    return ticker.FuncFormatter(lambda value, _: number(value))


def place_labels(axis: Any, labels: list[tuple[int, float, float, str]]) -> None:
    """Value labels at each worker count, the highest first, each moved down below the one
    above it when they would overlap (closer than LABEL_GAP of the panel's height); a value
    shown already at that worker count is not repeated."""
    if not labels:
        return
    values = [y for _, _, y, _ in labels]
    span = (max(values) - min(values)) or abs(max(values, default=1.0)) or 1.0
    for world in sorted({label[0] for label in labels}):
        here = sorted((label for label in labels if label[0] == world), key=lambda label: -label[2])
        shown: set[str] = set()
        above, offset = None, 4
        for _, x, y, color in here:
            text = number(y)
            if text in shown:
                continue
            shown.add(text)
            offset = offset - 11 if above is not None and above - y < LABEL_GAP * span else 4
            axis.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=(5, offset),
                fontsize=7,
                color=color,
            )
            above = y


def readable_log_y(axis: Any) -> None:
    from matplotlib import ticker

    axis.set_yscale("log")
    axis.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_minor_formatter(ticker.NullFormatter())


def caption(runs: list[RecordedRun]) -> str:
    """Where and when the runs were measured, for the foot of a figure: figures hold only on
    the machine they came from."""
    hosts = Counter(
        f"{host} ({run.start.processor or 'unknown processor'}, "
        f"{run.start.host_cores or '?'} logical CPUs)"
        for run in runs
        for host in dict.fromkeys(run.start.hosts[:1])
    )
    days = sorted({run.start.time[:10] for run in runs})
    when = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}" if days else "?"
    return f"measured on {'; '.join(hosts)}, {when}"


@dataclass(frozen=True)
class Pen:
    """matplotlib's pyplot, and the caption every figure gets."""

    plt: Any
    caption: str
