"""Whether two runs' loss curves agree (`compare.py --assert-close`): the golden curves, parity
between the frameworks and bitwise resume are checked with it."""

from __future__ import annotations

import sys

from common.report.inputs import load_runs
from common.report.runs import RecordedRun


def curve(run: RecordedRun, by: str) -> list[tuple[int, float]]:
    if by == "step":
        return [(step.step, step.loss) for step in run.steps]
    return [(epoch.epoch, epoch.train_loss) for epoch in run.epochs]


def assert_close(a: str, b: str, rtol: float, steps: int) -> int:
    """compare --assert-close A B: the loss curves of two runs step by step (epoch by epoch when
    either has no step records), the first point apart by more than `rtol` named; 0 when they
    agree, 1 otherwise."""
    runs, problems, _ = load_runs([a, b], once=False)
    if problems or len(runs) != 2:
        for problem in problems or [f"expected one run in each of {a} and {b}"]:
            print(f"problem: {problem}", file=sys.stderr)
        return 1
    first, second = runs
    by = "step" if first.steps and second.steps else "epoch"
    left, right = curve(first, by), curve(second, by)
    count = min(len(left), len(right), steps or len(left))
    if count == 0 or (steps and count < steps):
        print(f"not enough {by}s to compare: {len(left)} and {len(right)}", file=sys.stderr)
        return 1
    worst = 0.0
    for (number, x), (other, y) in zip(left[:count], right[:count], strict=True):
        if number != other:
            print(f"{by} numbers differ: {number} vs {other}", file=sys.stderr)
            return 1
        relative = abs(x - y) / max(abs(y), 1e-12)
        worst = max(worst, relative)
        if not relative <= rtol:  # NaN fails too
            print(
                f"diverged at {by} {number}: {x!r} vs {y!r} (relative {relative:.3e} > "
                f"rtol {rtol:g})",
                file=sys.stderr,
            )
            return 1
    print(
        f"{count} {by}s agree: max relative difference {worst:.3e} <= rtol {rtol:g} "
        f"({first.label} vs {second.label})"
    )
    return 0
