"""The sizes a link profile measures besides its powers of 8: each call a recorded run's training
step issues, at the size it would have at the launch's world size (`--sizes-of RUN`); and, for a
step of several kinds, each call's time when the step's calls are issued in their own order.

A profile prices a call between its two nearest points. Where the time bends between them (a
backend that changes protocol, a host whose CPU, not its link, sets the pace), the price
misses; measured at its own size, the call is read off its own point. docs/communication.md
has a case: gloo's all-reduce on 8 nodes of the test cluster.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from common.projection.link_profile import KindFit
from common.projection.step_model import calls_at, sequence_at
from common.report.inputs import load_runs

ELEMENT = 4  # the link tools time float32 tensors


def payloads(paths: Sequence[str], world: int) -> dict[str, list[int]]:
    """Each collective kind's payloads per call (bytes a rank hands one call, to the float32
    element) that the runs of `paths` (run folders or their metrics.jsonl) issue per training
    step at `world` ranks; ValueError naming a run that cannot say."""
    runs, problems, _ = load_runs(list(paths))
    if problems:
        raise ValueError(f"--sizes-of: {'; '.join(problems)}")
    if not runs:
        raise ValueError(
            f"--sizes-of {','.join(paths)}: no run there (a run folder or its metrics.jsonl)"
        )
    found: dict[str, set[int]] = {}
    for run in runs:
        calls = calls_at(run, world)
        if not calls:
            raise ValueError(
                f"--sizes-of {run.start.run_id}: it recorded no collectives (one process, or a "
                "run older than the epoch records' traffic); give a run of 2 ranks or more"
            )
        for each in calls:
            if each.calls and each.payload >= ELEMENT:
                size = round(each.payload / ELEMENT) * ELEMENT
                found.setdefault(each.kind, set()).add(size)
    return {kind: sorted(sizes) for kind, sizes in found.items()}


def sequences(
    paths: Sequence[str], world: int, kinds: Sequence[str]
) -> list[list[tuple[str, int]]]:
    """Each run's step at `world` ranks call by call, (kind, payload), in the order it issued
    them, of the `kinds` a tool times (not DDP's broadcasts), for the runs whose step issues
    several of them over the whole launch: a step of one kind is a row of its own calls, as
    the tool times each size, and a group of fewer ranks (hsdp's shards) is not the launch's."""
    runs, _, _ = load_runs(list(paths))
    found = []
    for run in runs:
        order = [e for e in sequence_at(run, world) if e.payload >= ELEMENT and e.kind in kinds]
        if len({each.kind for each in order}) > 1 and all(e.group == world for e in order):
            found.append([(e.kind, round(e.payload / ELEMENT) * ELEMENT) for e in order])
    return found


def in_step(
    timer: Callable[[list[tuple[str, int]], int], list[float]],
    kinds: dict[str, KindFit],
    steps: list[list[tuple[str, int]]],
    rounds: int = 12,
) -> dict[str, KindFit]:
    """`kinds` with each call of `steps` timed as its step issues it: `timer(calls, rounds)`
    gives each call's median seconds over `rounds` rounds of the step's calls in their order,
    and a size's `in_step_s` is the mean over every place it came (a call after another kind
    can cost more than in a row of its own). Every rank calls it alike."""
    times: dict[tuple[str, int], list[float]] = {}
    for step in steps:
        for call, seconds in zip(step, timer(step, rounds), strict=True):
            times.setdefault(call, []).append(seconds)
    found = {}
    for kind, fit in kinds.items():
        points = [
            point.model_copy(update={"in_step_s": statistics.mean(times[key])})
            if (key := (kind, point.payload_bytes)) in times
            else point
            for point in fit.points
        ]
        found[kind] = fit.model_copy(update={"points": points})
    return found
