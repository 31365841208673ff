"""The sizes a link profile measures besides its powers of 8: each call a recorded run's training
step issues, at the size it would have at the launch's world size (`--sizes-of RUN`).

A profile prices a call between its two nearest points. Where the time bends between them (a
backend that changes protocol, a host whose CPU, not its link, sets the pace), the price
misses; measured at its own size, the call is read off its own point. docs/communication.md
has a case: gloo's all-reduce on 8 nodes of the test cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.projection.step_model import calls_at
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
