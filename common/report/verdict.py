"""What a report says before its tables: the answer in sentences, computed from the rows, and
the environment the runs came from, taken from their run_start records."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable

from common.core.config import strategies
from common.report import launch_history, significance, step_parts
from common.report.rows import Row, RunGroup
from common.report.runs import RecordedRun

AGREE_POINTS = 0.5  # final accuracies within this many percentage points "agree"


def _interval(row: Row, key: str, scale: float = 1.0, digits: int = 0) -> str:
    low, high = getattr(row, f"{key}_low", None), getattr(row, f"{key}_high", None)
    if low is None or high is None:
        return ""
    return f" [95% interval {low / scale:,.{digits}f}-{high / scale:,.{digits}f}]"


def _label(row: Row) -> str:
    return row.name


def of_group(group: RunGroup, target: float) -> list[str]:
    """The verdict of a group, then what the later launches of its runs did (restarts, size
    changes: `launch_history.history`)."""
    said = sentences(group.rows, target)
    # the bench's harness ratios beside the one-worker framework comparison
    at = next(
        (i + 1 for i, line in enumerate(said) if line.startswith("At 1 worker(s)")), len(said)
    )
    said[at:at] = group.harness
    said += step_parts.sentences(group.runs)
    for run in group.runs:
        said += [
            f"{run.label} ({run.start.run_id}): {line}."
            for line in launch_history.history(run.records)
        ]
    return said


def sentences(rows: list[Row], target: float) -> list[str]:
    """The verdict of one group of comparable runs."""
    said = [
        f"{_label(row)} diverged (its loss became NaN or infinite): its accuracy and time to "
        "target are not results."
        for row in rows
        if "diverged" in row.status.split(",")
    ]
    timed = [row for row in rows if row.speed]
    if not timed:
        return [*said, "No run of this group finished a timed epoch."]
    fastest = max(timed, key=lambda row: row.speed)
    repeats = f"median of {fastest.runs} runs" if fastest.runs > 1 else "one run: no interval"
    said.append(
        f"Fastest: {_label(fastest)} at {fastest.speed:,.0f} samples/s"
        f"{_interval(fastest, 'samples_s')} ({repeats})."
    )
    if all(row.runs == 1 for row in timed) and len(timed) > 1:
        said.append(
            "Every row is a single run, so no comparison here has an interval or a significance "
            "test: differences "
            "within a run's epoch-to-epoch noise are not findings. Repeat each setup (5 runs "
            "give a 95% interval) before drawing conclusions."
        )
    for row in timed:
        if row.world > 1 and row.efficiency is not None:
            base = next(
                (
                    r
                    for r in timed
                    if r.framework == row.framework and f"{r.strategy} x{r.world}" == row.baseline
                ),
                None,
            )
            if base is None:
                continue
            speedup = row.speed / base.speed
            caveat = (
                f"; but its ranks shared one host's cores ({row.shared_cores}), the cores "
                f"{_label(base)} had alone, so this figure measures the shared cores, not the "
                "strategy"
                if row.shared_cores
                else ""
            )
            said.append(
                f"{_label(row)} runs at {speedup:.2f}x {_label(base)}"
                f"{_interval(row, 'samples_s', base.speed, 2)}: scaling efficiency "
                f"{row.efficiency:.0%}{caveat}."
            )
    for world in sorted({row.world for row in timed}):
        best: dict[str, Row] = {}
        for row in timed:
            if row.world == world and (
                row.framework not in best or row.speed > best[row.framework].speed
            ):
                best[row.framework] = row
        if len(best) == 2:
            first, second = sorted(best.values(), key=lambda row: -row.speed)
            if floor := _within_noise(first, second):
                said.append(f"At {world} worker(s), {floor}")
            else:
                _, tested = significance.welch(first, second)
                said.append(
                    f"At {world} worker(s) the faster framework is {first.framework}: "
                    f"{_label(first)} is {first.speed / second.speed:.2f}x {_label(second)}"
                    f"{f' ({tested})' if tested else ''}."
                )
        said += [
            f"Within {first.framework} at {world} worker(s), {floor}"
            for first, second in _strategy_pairs(timed, world)
            if (floor := _within_noise(first, second))
        ]
        said += _sharded_against_replicated(timed, world)
    if any(row.gpu_nondeterministic for row in rows):
        said.append(
            "These GPU runs were not deterministic (dist.deterministic=false): two runs of one "
            "setup end with different weights and curves, so a difference smaller than the "
            "spread of repeats is noise. "
            "Repeat each setup, or set dist.deterministic=true to compare bit for bit."
        )
    said += _traffic(timed) + _memory(rows) + _accuracy(rows, target)
    return said


def _traffic(rows: list[Row]) -> list[str]:
    """Why a strategy is slower, in what it sends: the rows of one worker count that send the
    most and the least per step."""
    said = []
    for world in sorted({row.world for row in rows if row.world > 1}):
        sending = [row for row in rows if row.world == world and row.sent_mb is not None]
        if len(sending) < 2:
            continue
        most = max(sending, key=lambda row: row.sent_mb or 0.0)
        least = min(sending, key=lambda row: row.sent_mb or 0.0)
        if most is least:
            continue
        said.append(
            f"Per training step, {_label(most)} sends {most.sent_mb:.2f} MB per rank in "
            f"{most.collectives:.0f} collectives, against {least.sent_mb:.2f} MB in "
            f"{least.collectives:.0f} for {_label(least)}: at a link's fixed cost per "
            "collective and per byte, the first pays more per step."
        )
    return said


def _sharded_against_replicated(rows: list[Row], world: int) -> list[str]:
    """Where a sharded strategy stands beside a replicated one of the other framework: they
    differ in more than the framework (TensorFlow has no sharded counterpart)."""
    here = [row for row in rows if row.world == world and world > 1]
    shards = {row.framework: row.strategy for row in here if _shards(row)}
    replicas = {row.framework: row.strategy for row in here if not _shards(row)}
    said = []
    for framework, sharded in shards.items():
        for other, replicated in replicas.items():
            if other != framework:
                said.append(
                    f"At {world} worker(s), {framework} {sharded} shards the parameters, "
                    f"gradients and optimizer state while {other} {replicated} replicates them: "
                    "TensorFlow 2.21 and Keras 3 have no FSDP counterpart, so this pair differs "
                    "in more than the framework (memory per rank above all; "
                    "docs/frameworks.md)."
                )
    return said


def _shards(row: Row) -> bool:
    try:
        return strategies.get(row.framework, row.strategy).shards
    except ValueError:  # a strategy of another version of the suite
        return False


def _strategy_pairs(rows: list[Row], world: int) -> list[tuple[Row, Row]]:
    """Rows of one framework at `world` workers, in pairs (faster first)."""
    same = sorted((row for row in rows if row.world == world), key=lambda row: -row.speed)
    return [
        (first, second)
        for i, first in enumerate(same)
        for second in same[i + 1 :]
        if first.framework == second.framework
    ]


def _within_noise(first: Row, second: Row) -> str:
    """ "no measurable difference" with the figures, when `first` is not faster than `second`
    at p < P_FINDING (`significance`: Welch's t-test on their repeats), or, without a test, by
    less than the larger spread of their repeats; "" when it is, or no row has repeats."""
    p_value, tested = significance.welch(first, second)
    if p_value is not None:
        if p_value < significance.P_FINDING:
            return ""
        return (
            f"{_label(first)} and {_label(second)} show no measurable difference: "
            f"{tested}, not below {significance.P_FINDING}."
        )
    spreads = [row.samples_s_spread for row in (first, second) if row.samples_s_spread]
    if not spreads or first.speed - second.speed >= max(spreads):
        return ""
    return (
        f"{_label(first)} and {_label(second)} show no measurable difference: "
        f"{first.speed:,.0f} and {second.speed:,.0f} samples/s differ by "
        f"{first.speed - second.speed:,.0f}, less than the spread of their repeats "
        f"({max(spreads):,.0f} samples/s)."
    )


def _memory(rows: list[Row]) -> list[str]:
    said = []
    for world in sorted({row.world for row in rows}):
        held = [row for row in rows if row.world == world and row.state]
        if len(held) < 2:
            continue
        least = min(held, key=lambda row: row.state)
        # against the same framework's largest when it has one (fsdp2 vs ddp), else any
        same = [row for row in held if row.framework == least.framework and row != least]
        most = max(same or held, key=lambda row: row.state)
        ratio = least.state / most.state
        if ratio < 0.9:
            said.append(
                f"At {world} worker(s), {_label(least)} holds {ratio:.2f}x the training state "
                f"per rank of {_label(most)} ({least.state:.1f} vs {most.state:.1f} MiB)."
            )
    return said


def _accuracy(rows: list[Row], target: float) -> list[str]:
    finals = [(row.final_acc, _label(row)) for row in rows if row.final_acc is not None]
    said = []
    if finals:
        (low, low_name), (high, high_name) = min(finals), max(finals)
        points = 100 * (high - low)
        spreads = [100 * row.final_acc_spread for row in rows if row.final_acc_spread]
        if points <= AGREE_POINTS:
            said.append(
                f"Final accuracies agree within {points:.2f} points ({low:.2%} to {high:.2%})."
            )
        elif spreads and points < max(spreads):
            said.append(
                f"Final accuracies show no measurable difference: {high_name} {high:.2%} and "
                f"{low_name} {low:.2%} differ by {points:.2f} points, less than the spread of "
                f"repeats ({max(spreads):.2f} points)."
            )
        else:
            said.append(
                f"Final accuracies differ by {points:.2f} points: {high_name} {high:.2%}, "
                f"{low_name} {low:.2%}."
            )
    reached = [(row.target_s, _label(row)) for row in rows if row.target_s is not None]
    if reached:
        seconds, name = min(reached)
        said.append(f"First to {target:.2%} validation accuracy: {name}, after {seconds:.1f} s.")
    else:
        said.append(f"No run reached {target:.2%} validation accuracy.")
    return said


def environment(runs: list[RecordedRun]) -> list[tuple[str, str]]:
    """(what, value) lines about where and with what the runs ran."""
    starts = [run.start for run in runs]

    def counted(values: Iterable[str]) -> str:
        counts = Counter(values)
        return ", ".join(f"{value} ({n})" if n > 1 else str(value) for value, n in counts.items())

    versions: dict[str, set[str]] = {}
    for start in starts:
        for library, version in start.versions.items():
            versions.setdefault(library, set()).add(version)
    times = sorted(start.time for start in starts)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return [
        ("report written", now),
        ("runs started", f"{times[0]} to {times[-1]}" if times else "-"),
        ("hosts", counted(host for start in starts for host in dict.fromkeys(start.hosts))),
        (
            "processors",
            counted(
                f"{start.processor or 'unknown'}, {start.host_cores or '?'} logical CPUs"
                for start in starts
            ),
        ),
        ("devices", counted(device.split(":", 1)[-1] for s in starts for device in s.devices)),
        ("launchers", counted(start.launcher for start in starts)),
        (
            "versions",
            "; ".join(f"{lib} {', '.join(sorted(v))}" for lib, v in sorted(versions.items())),
        ),
        ("git commits", counted(start.git_commit or "outside git" for start in starts)),
    ]
