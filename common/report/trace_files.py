"""The traces a run folder holds (`output.profile_steps`, `common.core.train.tracing`), for the
report to name beside the runs: torch's Chrome traces (one per rank) and TensorFlow's XSpace
files (one per rank, under the folder TensorBoard reads)."""

from __future__ import annotations

from pathlib import Path

from common.report.runs import RecordedRun

FOLDER = "traces"
HOW = (
    "torch's traces open in Perfetto (ui.perfetto.dev) or chrome://tracing; TensorFlow's in "
    "TensorBoard's Profile tab: tensorboard --logdir <run folder>/traces (with xprof installed)"
)


def of_run(run_dir: Path) -> list[Path]:
    """The run folder's trace files: torch's, then TensorFlow's, each by rank."""
    folder = run_dir / FOLDER
    torch = sorted(folder.glob("torch-rank-*.json"))
    tf = sorted(folder.glob("tf-rank-*/plugins/profile/*/*.xplane.pb"))
    return torch + tf


def found(runs: list[RecordedRun]) -> list[tuple[str, list[Path]]]:
    """(a run's label and folder name, its traces) for every run that has any."""
    listed = []
    for run in runs:
        run_dir = Path(run.path).parent
        files = of_run(run_dir)
        if files:
            listed.append((f"{run.label} ({run_dir.name})", files))
    return listed


def lines(listed: list[tuple[str, list[Path]]]) -> list[str]:
    """A line per run: its traces' paths."""
    return [f"{label}: {', '.join(str(path) for path in files)}" for label, files in listed]
