"""Where each run's step goes, in the parts its framework's profiler measured: the epoch records'
`step_split` (one profiled step per launch: torch's profiler, or TensorFlow's read by xprof), in
percent of that step, and the part that differs most between the runs of a group. The verdict
says both, on every framework that records a split (a CPU run of either; not a GPU run).
"""

from __future__ import annotations

from common.core.records.entries import StepSplit
from common.report.runs import RecordedRun

# (field, what the sentence calls it)
PARTS = [
    ("compute_s", "compute"),
    ("optimizer_s", "optimizer"),
    ("input_s", "input"),
    ("framework_s", "sharding wrapper"),
    ("collectives_s", "collectives"),
]
REST = "the rest"


def split_of(run: RecordedRun) -> StepSplit | None:
    """The split of the run's latest launch that recorded one."""
    return next((e.step_split for e in reversed(run.epochs) if e.step_split), None)


def seconds(split: StepSplit) -> dict[str, float]:
    """Seconds of each measured part (those the framework has), and the rest of the wall time."""
    found = {
        said: float(getattr(split, field))
        for field, said in PARTS
        if getattr(split, field) is not None
    }
    found[REST] = max(0.0, split.wall_s - sum(found.values()))
    return found


def sentence(label: str, split: StepSplit) -> str:
    """'tf mwms x2: compute 61%, collectives 30%, the rest 9% of a 9.52 ms profiled step'
    (the percentages of the parts and the rest, which add up to the step)."""
    parts = seconds(split)
    total = sum(parts.values()) or 1.0
    shown = [f"{said} {100 * value / total:.0f}%" for said, value in parts.items() if value > 0]
    return f"{label}: {', '.join(shown)} of a {1000 * split.wall_s:.3g} ms profiled step"


def sentences(runs: list[RecordedRun]) -> list[str]:
    """A sentence a run with a split, then the part that differs most between the fastest and
    the slowest of them (by profiled step)."""
    labelled: list[tuple[str, StepSplit]] = []
    for run in runs:  # the first run of each setup (repeats share a label)
        split = split_of(run)
        if split is not None and run.label not in {label for label, _ in labelled}:
            labelled.append((run.label, split))
    if not labelled:
        return []
    said = ["Where the step goes, measured: " + "; ".join(sentence(*one) for one in labelled)]
    if len(labelled) < 2:
        return said
    fast = min(labelled, key=lambda one: one[1].wall_s)
    slow = max(labelled, key=lambda one: one[1].wall_s)
    if fast is slow:
        return said
    mine, theirs = seconds(slow[1]), seconds(fast[1])
    gaps = {part: mine.get(part, 0.0) - theirs.get(part, 0.0) for part in {*mine, *theirs}}
    part = max(gaps, key=lambda name: gaps[name])
    said.append(
        f"The part that makes the difference: {part}, {1000 * mine.get(part, 0.0):.3g} ms a "
        f"step in {slow[0]} against {1000 * theirs.get(part, 0.0):.3g} ms in {fast[0]} "
        f"(their profiled steps differ by {1000 * (slow[1].wall_s - fast[1].wall_s):.3g} ms)."
    )
    return said
