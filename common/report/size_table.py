"""The model-size axis in a report: one row per series and parameter count, drawn by
`common.report.render.size_plot` and tabled here, whenever a series holds two sizes or more."""

from __future__ import annotations

from dataclasses import dataclass

from common.report.runs import RecordedRun, median_of

SIZE_KEYS = ("model.hidden", "model.width")  # what a size changes; the rest must match


@dataclass(frozen=True, kw_only=True, slots=True)
class SizeRow:
    framework: str
    strategy: str
    world: int
    layout: str
    series: str
    """Everything else the series' runs trained with (a repr), so that only sizes differ."""
    params: int
    runs: int
    samples_s: float | None
    state_mib: float | None
    above_mib: float | None
    peak_mib: float | None

    @property
    def name(self) -> str:
        return f"{self.framework} {self.strategy} x{self.world}"

    @property
    def parameters(self) -> str:
        return f"{self.params / 1e6:,.1f}M"


def size_rows(runs: list[RecordedRun]) -> list[SizeRow]:
    """One row per series (framework x strategy x workers x layout, and everything else in the
    config but the model's size) and parameter count: `RecordedRun.summary`'s throughput and
    memory, medians over repeats; [] unless some series holds two sizes or more, the only case
    where a size axis says anything."""
    cells: dict[tuple[str, str, int, str, str, int], list[RecordedRun]] = {}
    for run in runs:
        params = run.start.model_params
        if params is None or not run.epochs:
            continue
        others = {k: v for k, v in run.comparable().items() if k not in SIZE_KEYS}
        start = run.start
        series = (start.framework, start.strategy, start.world_size, run.layout)
        cells.setdefault((*series, repr(sorted(others.items())), params), []).append(run)
    rows = []
    for (framework, strategy, world, layout, rest, params), members in sorted(cells.items()):
        summaries = [run.summary() for run in members]
        rows.append(
            SizeRow(
                framework=framework,
                strategy=strategy,
                world=world,
                layout=layout,
                series=rest,
                params=params,
                runs=len(members),
                samples_s=median_of(summary.samples_s for summary in summaries),
                state_mib=median_of(summary.state_mib for summary in summaries),
                above_mib=median_of(summary.above_mib for summary in summaries),
                peak_mib=median_of(summary.peak_mib for summary in summaries),
            )
        )
    sizes: dict[tuple[str, str, int, str, str], set[int]] = {}
    for row in rows:
        key = (row.framework, row.strategy, row.world, row.layout, row.series)
        sizes.setdefault(key, set()).add(row.params)
    return rows if any(len(found) > 1 for found in sizes.values()) else []


SIZE_COLUMNS = [  # SizeRow attribute, header, digits
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
