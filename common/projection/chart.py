"""compare's projection drawn (`plots/projection.png`): each run's measured throughput over its
projected band, from `common.projection.summary.Report`."""

from __future__ import annotations

from pathlib import Path

from common.core import whole_files
from common.projection.summary import Report
from common.report.render.style import pyplot, style


def plot(found: Report, out: Path) -> Path | None:
    """Samples/s against workers: each run's measured point over its projected band."""
    if not found.rows:
        return None
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 5))
    for label in dict.fromkeys(row.label for row in found.rows):
        mine = [row for row in found.rows if row.label == label]
        look = style(" ".join(label.split()[:2]))
        xs = [row.world for row in mine]
        axis.fill_between(
            xs,
            [r.samples_s_low for r in mine],
            [r.samples_s_high for r in mine],
            color=look["color"],
            alpha=0.2,
        )
        axis.plot(
            xs,
            [r.samples_s_high for r in mine],
            color=look["color"],
            linestyle=":",
            label=f"{label} projected",
        )
        for measured_label, workers, speed in found.measured:
            if measured_label == label:
                axis.plot(
                    [workers],
                    [speed],
                    marker=look.get("marker", "o"),
                    color=look["color"],
                    linestyle="none",
                    label=f"{label} measured",
                )
    axis.set_xscale("log", base=2)
    shown = sorted({row.world for row in found.rows} | {w for _, w, _ in found.measured})
    axis.set_xticks(shown, [str(world) for world in shown])
    axis.minorticks_off()
    axis.set_yscale("log")
    axis.set_xlabel("workers (ranks)")
    axis.set_ylabel("samples/s (band: full overlap to none)")
    axis.set_title("Measured throughput and its projection with the link profile")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    figure.text(
        0.005,
        0.005,
        f"profile: {found.profile}; a model's numbers, no contention",
        fontsize=6.5,
        color="#555555",
    )
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    (out / "plots").mkdir(parents=True, exist_ok=True)
    path = out / "plots" / "projection.png"
    with whole_files.whole(path) as partial:
        figure.savefig(partial, dpi=110, format="png")
    plt.close(figure)
    return path
