"""What a report says before its tables: the answer in sentences, computed from the rows, and
the environment the runs came from, taken from their run_start records."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable

from common.report.rows import Row
from common.report.runs import RecordedRun

AGREE_POINTS = 0.5  # final accuracies within this many percentage points "agree"


def _interval(row: Row, key: str, scale: float = 1.0, digits: int = 0) -> str:
    low, high = getattr(row, f"{key}_low", None), getattr(row, f"{key}_high", None)
    if low is None or high is None:
        return ""
    return f" [95% interval {low / scale:,.{digits}f}-{high / scale:,.{digits}f}]"


def _label(row: Row) -> str:
    return row.name


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
    said.append(
        f"Fastest: {_label(fastest)} at {fastest.speed:,.0f} samples/s"
        f"{_interval(fastest, 'samples_s')} (median of {fastest.runs} run(s))."
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
            said.append(
                f"{_label(row)} runs at {speedup:.2f}x {_label(base)}"
                f"{_interval(row, 'samples_s', base.speed, 2)}: scaling efficiency "
                f"{row.efficiency:.0%}."
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
            ratio = first.speed / second.speed
            said.append(
                f"At {world} worker(s) the faster framework is {first.framework}: "
                f"{_label(first)} is {ratio:.2f}x {_label(second)}."
            )
    said += _memory(rows) + _accuracy(rows, target)
    return said


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
        if points <= AGREE_POINTS:
            said.append(
                f"Final accuracies agree within {points:.2f} points ({low:.2%} to {high:.2%})."
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
        ("devices", counted(device.split(":", 1)[1] for s in starts for device in s.devices)),
        ("launchers", counted(start.launcher for start in starts)),
        (
            "versions",
            "; ".join(f"{lib} {', '.join(sorted(v))}" for lib, v in sorted(versions.items())),
        ),
        ("git commits", counted(start.git_commit or "outside git" for start in starts)),
    ]
