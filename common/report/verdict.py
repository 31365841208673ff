"""What a report says before its tables: the answer in sentences, computed from the rows, and
the environment the runs came from, taken from their run_start records."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from common.report.rows import Row
from common.report.runs import RecordedRun

AGREE_POINTS = 0.5  # final accuracies within this many percentage points "agree"


def _name(row: Row) -> str:
    return f"{row.framework} {row.strategy} x{row.world}"


def _interval(row: Row, key: str, scale: float = 1.0, digits: int = 0) -> str:
    low, high = getattr(row, f"{key}_low", None), getattr(row, f"{key}_high", None)
    if low is None or high is None:
        return ""
    return f" [95% interval {low / scale:,.{digits}f}-{high / scale:,.{digits}f}]"


def sentences(rows: list[Row], target: float) -> list[str]:
    """The verdict of one group of comparable runs."""
    timed = [row for row in rows if row.samples_s]
    if not timed:
        return ["No run of this group finished a timed epoch."]
    said = []
    fastest = max(timed, key=lambda row: row.samples_s)
    said.append(
        f"Fastest: {_name(fastest)} at {fastest.samples_s:,.0f} samples/s"
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
            speedup = row.samples_s / base.samples_s
            said.append(
                f"{_name(row)} runs at {speedup:.2f}x {_name(base)}"
                f"{_interval(row, 'samples_s', base.samples_s, 2)}: scaling efficiency "
                f"{row.efficiency:.0%}."
            )
    for world in sorted({row.world for row in timed}):
        best = {}
        for row in timed:
            if row.world == world and (
                row.framework not in best or row.samples_s > best[row.framework].samples_s
            ):
                best[row.framework] = row
        if len(best) == 2:
            first, second = sorted(best.values(), key=lambda row: -row.samples_s)
            ratio = first.samples_s / second.samples_s
            said.append(
                f"At {world} worker(s) the faster framework is {first.framework}: "
                f"{_name(first)} is {ratio:.2f}x {_name(second)}."
            )
    said += _memory(rows) + _accuracy(rows, target)
    return said


def _memory(rows: list[Row]) -> list[str]:
    said = []
    for world in sorted({row.world for row in rows}):
        held = [row for row in rows if row.world == world and row.state_mib]
        if len(held) < 2:
            continue
        least = min(held, key=lambda row: row.state_mib)
        # against the same framework's largest when it has one (fsdp2 vs ddp), else any
        same = [row for row in held if row.framework == least.framework and row != least]
        most = max(same or held, key=lambda row: row.state_mib)
        ratio = least.state_mib / most.state_mib
        if ratio < 0.9:
            said.append(
                f"At {world} worker(s), {_name(least)} holds {ratio:.2f}x the training state "
                f"per rank of {_name(most)} ({least.state_mib:.1f} vs "
                f"{most.state_mib:.1f} MiB)."
            )
    return said


def _accuracy(rows: list[Row], target: float) -> list[str]:
    finals = [(row.final_acc, _name(row)) for row in rows if row.final_acc is not None]
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
    reached = [(row.target_s, _name(row)) for row in rows if row.target_s is not None]
    if reached:
        seconds, name = min(reached)
        said.append(f"First to {target:.2%} validation accuracy: {name}, after {seconds:.1f} s.")
    else:
        said.append(f"No run reached {target:.2%} validation accuracy.")
    return said


def environment(runs: list[RecordedRun]) -> list[tuple[str, str]]:
    """(what, value) lines about where and with what the runs ran."""
    starts = [run.start for run in runs]

    def counted(values) -> str:
        counts = Counter(values)
        return ", ".join(f"{value} ({n})" if n > 1 else str(value) for value, n in counts.items())

    versions: dict[str, set] = {}
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
