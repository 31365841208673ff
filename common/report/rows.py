"""What compare.py tables and draws: groups of runs that trained the same thing, and one `Row`
per framework x strategy x workers x layout, with repeats folded into medians and intervals."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from common.report.runs import RecordedRun, RunSummary, median_of

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then 1.96).
T95 = [
    float(value)
    for value in (
        "12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 "
        "2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 "
        "2.045 2.042"
    ).split()
]


@dataclass(kw_only=True)
class Row(RunSummary):
    """One line of a report's table: every run of one setup, folded (its `RunSummary` numbers
    folded over the repeats as each field's `fold` says)."""

    framework: str
    strategy: str
    world: int
    layout: str
    runs: int
    folders: list[str] = field(default_factory=list)
    epoch_s_low: float | None = None
    epoch_s_high: float | None = None
    samples_s_low: float | None = None
    samples_s_high: float | None = None
    baseline: str = ""
    """The row the efficiency is measured against, e.g. "single x1"."""
    shared_cores: str = ""
    """How its ranks shared one host's cores, when they did (`RecordedRun.shared_cores`)."""
    samples_s_repeats: list[float] = field(default_factory=list)
    """Each repeat's samples/s (its median over epochs), for the significance tests."""
    samples_s_mean: float | None = None
    samples_s_sem: float | None = None
    """The repeats' mean samples/s and its standard error (None below 2 repeats)."""
    samples_s_spread: float | None = None
    """Fastest minus slowest repeat in samples/s (None for one run): the noise floor."""
    final_acc_spread: float | None = None
    """Highest minus lowest final accuracy of the repeats (None for one run)."""
    gpu_nondeterministic: bool = False
    """It ran on GPUs without dist.deterministic: its repeats differ in their arithmetic."""

    def as_dict(self) -> dict[str, Any]:
        """Its fields, the row's identity first (for CSV and JSON)."""
        whole = asdict(self)
        first = ("framework", "strategy", "world", "layout", "runs", "folders")
        return {**{key: whole[key] for key in first}, **whole}

    @property
    def name(self) -> str:
        return f"{self.framework} {self.strategy} x{self.world}"

    @property
    def speed(self) -> float:
        """samples/s, 0 where no epoch was timed."""
        return self.samples_s or 0.0

    @property
    def state(self) -> float:
        """MiB of training state per rank, 0 where unknown."""
        return self.state_mib or 0.0


@dataclass
class RunGroup:
    """Runs that trained the same thing, side by side: the key that says what (and how the group
    differs from the others), its runs, their rows of the table, and the report's figures."""

    key: dict[str, Any]
    runs: list[RecordedRun]
    rows: list[Row] = field(default_factory=list)
    """Filled for a target accuracy (`rows_for`)."""
    pictures: list[Path] = field(default_factory=list)
    """Filled when the report's plots are written."""
    harness: list[str] = field(default_factory=list)
    """What a bench among the results says of each framework's harness on this group's model
    (`common.report.harness_ratio`), for the verdict."""


def group_runs(runs: list[RecordedRun]) -> tuple[list[RunGroup], list[str]]:
    """Runs that trained the same thing (equal `RecordedRun.comparable`), largest group first.
    Each group's key is its readable summary plus every config key in which the groups differ;
    one note per extra group says how it differs from the first."""
    groups: dict[str, tuple[dict[str, Any], list[RecordedRun]]] = {}
    for run in runs:
        comparable = run.comparable()
        key = json.dumps(comparable, sort_keys=True, default=str)
        groups.setdefault(key, (comparable, []))[1].append(run)
    ordered = sorted(groups.values(), key=lambda group: -len(group[1]))
    names = sorted({name for comparable, _ in ordered for name in comparable})
    differing = [name for name in names if len({repr(c.get(name)) for c, _ in ordered}) > 1]
    keyed = [
        RunGroup({**members[0].group_key(), **{n: comparable.get(n) for n in differing}}, members)
        for comparable, members in ordered
    ]
    notes = []
    first = ordered[0][0] if ordered else {}
    for comparable, members in ordered[1:]:
        differs = [
            f"{name} {comparable.get(name)} vs {first.get(name)}"
            for name in differing
            if comparable.get(name) != first.get(name)
        ]
        labels = [run.label for run in members]
        notes.append(
            f"{len(members)} run(s) ({listed(labels, NOTE_RUNS, 'runs')}) are not put beside "
            f"the first group: {listed(differs, NOTE_KEYS, 'differences')}"
        )
    return keyed, notes


# A "not side by side" note names at most this many runs and differences (one ran to 21,703
# characters); the report's tables list every run.
NOTE_RUNS, NOTE_KEYS = 5, 6


def listed(items: list[str], most: int, what: str) -> str:
    """`items` joined, at most `most` of them, then how many more were left out."""
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more {what}" if len(items) > most else "")


def interval(values: list[float | None]) -> tuple[float | None, float | None, float | None, int]:
    """(median, low, high, n used) with a 95% t-interval of the mean; from 5 values on the
    fastest and slowest are dropped first (as MLPerf does). One value: no interval."""
    present = sorted(v for v in values if v is not None)
    if len(present) >= 5:
        present = present[1:-1]
    if not present:
        return None, None, None, 0
    middle = statistics.median(present)
    if len(present) < 2:
        return middle, None, None, len(present)
    mean, spread = statistics.mean(present), statistics.stdev(present) / math.sqrt(len(present))
    t = T95[len(present) - 2] if len(present) - 1 <= len(T95) else 1.96
    # Throughputs and times are positive: a wide interval is cut at 0, not shown below it.
    return middle, max(0.0, mean - t * spread), mean + t * spread, len(present)


def spread(values: list[float | None]) -> float | None:
    """Largest minus smallest of the values present; None for fewer than 2."""
    present = [value for value in values if value is not None]
    return max(present) - min(present) if len(present) > 1 else None


def rows_for(runs: list[RecordedRun], target: float | None = None) -> list[Row]:
    """One row per framework x strategy x world size x layout (1-worker baseline first within
    each framework); repeats are folded into medians. `target`: the accuracy for `target_s`.
    Where one framework x strategy x world ran in several layouts, the strategy names it."""
    cells: dict[tuple[str, str, int, str], list[RecordedRun]] = {}
    for run in runs:
        start = run.start
        strategy = start.strategy + (f" ({run.row_variant()})" if run.row_variant() else "")
        cells.setdefault((start.framework, strategy, start.world_size, run.layout), []).append(run)
    shared = {cell[:3] for cell in cells if sum(other[:3] == cell[:3] for other in cells) > 1}
    rows = []
    for (framework, strategy, world, layout), members in sorted(
        cells.items(), key=lambda item: (item[0][0], item[0][2], item[0][1], item[0][3])
    ):
        summaries = [run.summary(target) for run in members]
        if (framework, strategy, world) in shared:
            strategy = f"{strategy} [{layout}]"
        mean, error = _mean_and_error([s.samples_s for s in summaries])
        rows.append(
            Row(
                framework=framework,
                strategy=strategy,
                world=world,
                layout=layout,
                runs=len(members),
                folders=[str(Path(run.path).parent) for run in members],
                **folded(summaries),
                shared_cores=next((c for run in members if (c := run.shared_cores())), ""),
                samples_s_repeats=[s.samples_s for s in summaries if s.samples_s is not None],
                samples_s_mean=mean,
                samples_s_sem=error,
                samples_s_spread=spread([s.samples_s for s in summaries]),
                final_acc_spread=spread([s.final_acc for s in summaries]),
                gpu_nondeterministic=any(
                    run.start.device_type == "gpu"
                    and not (run.start.numerics or {}).get("deterministic")
                    for run in members
                ),
            )
        )
    add_efficiency(rows)
    return rows


def folded(summaries: list[RunSummary]) -> dict[str, Any]:
    """The repeats' `RunSummary` numbers folded into one row's, as each field's `fold` says."""
    out: dict[str, Any] = {}
    for spec in fields(RunSummary):
        values = [getattr(summary, spec.name) for summary in summaries]
        fold = spec.metadata["fold"]
        if fold == "interval":
            middle, low, high, _ = interval(values)
            out |= {spec.name: middle, f"{spec.name}_low": low, f"{spec.name}_high": high}
        elif fold == "median":
            out[spec.name] = median_of(values)
        elif fold == "join":
            out[spec.name] = ",".join(sorted(set(values)))
        elif fold == "any":
            out[spec.name] = any(values)
        elif fold == "first":
            out[spec.name] = values[0]
    return out


def _mean_and_error(values: list[float | None]) -> tuple[float | None, float | None]:
    """The repeats' mean and its standard error (both None below 2 repeats)."""
    present = [value for value in values if value is not None]
    if len(present) < 2:
        return None, None
    return statistics.mean(present), statistics.stdev(present) / math.sqrt(len(present))


def add_efficiency(rows: list[Row]) -> None:
    """Scaling efficiency S_N / (N * S_1) against the same framework's 1-worker row (the same
    strategy if it ran on one worker, else that framework's other 1-worker run). With a global
    batch this is strong scaling; with a per-rank batch, weak scaling."""
    for row in rows:
        ones = [r for r in rows if r.framework == row.framework and r.world == 1]
        same = [r for r in ones if r.strategy == row.strategy]
        candidates = same or ones
        base = candidates[0] if candidates else None
        if base is not None and base.samples_s and row.samples_s:
            row.efficiency = row.samples_s / (row.world * base.samples_s)
            row.baseline = f"{base.strategy} x1"
