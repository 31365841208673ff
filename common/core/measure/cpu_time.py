"""What the chief's CPU did while an epoch trained: its process's CPU seconds (every thread, the
backend's collective threads included) and, where its cgroup holds a CPU quota (a node of the
test cluster's --node-cpu, a container's limit), the share of the quota's periods in which the
group ran out of it: how often the CPU, not the links, held the step (docs/communication.md,
section 4). Both cover the epoch's pauses for step records and checkpoints too."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from common.core.config.devices import cpu_group


@dataclass(frozen=True, slots=True)
class Reading:
    cpu_s: float  # the process's CPU seconds so far
    periods: int | None  # the quota's periods in which the group ran (None: no quota counted)
    throttled: int | None  # of those, the periods in which it ran out of quota


@dataclass(frozen=True, slots=True)
class Spent:
    cpu_s: float
    throttled: float | None  # a fraction of the periods; None without a quota or a period


def quota_counts(folder: Path | None) -> tuple[int, int] | None:
    """(nr_periods, nr_throttled) of the group's cpu.stat (cgroup v1 and v2 alike; both stay 0
    without a quota), None where the file cannot be read."""
    if folder is None:
        return None
    try:
        fields = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
        return int(fields["nr_periods"]), int(fields["nr_throttled"])
    except (OSError, KeyError, ValueError):
        return None


def read(folder: Path | None = None) -> Reading:
    """Now: the process's CPU seconds and its group's quota counts (`folder`: the group; by
    default this process's own)."""
    counts = quota_counts(folder if folder is not None else cpu_group())
    periods, throttled = counts if counts is not None else (None, None)
    return Reading(time.process_time(), periods, throttled)


def spent(before: Reading, after: Reading) -> Spent:
    """What went between two readings."""
    throttled = None
    if before.periods is not None and after.periods is not None:
        periods = after.periods - before.periods
        if periods > 0 and before.throttled is not None and after.throttled is not None:
            throttled = (after.throttled - before.throttled) / periods
    return Spent(after.cpu_s - before.cpu_s, throttled)
