"""What compare.py reads: run folders, metrics files, folders of run folders and sweep
manifests (slurm/sweep.py), each turned into runs read back, or into one-line problems that
name the file (and the sweep run) at fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common.checks.error_lines import quote
from common.core.records.metrics import METRICS_FILENAME, scan
from common.core.records.records import RunStart
from common.report.runs import RecordedRun, mixed_runs


def read_manifest(path: Path) -> tuple[list[Path], list[str]]:
    """The metrics files of a sweep manifest, and a problem for every run of the sweep that
    has none (failed before writing, never submitted, still queued) or that the manifest does
    not describe."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        return [], [f"{path}: not a sweep manifest ({quote(str(error))})"]
    if not isinstance(manifest, dict) or "runs" not in manifest:
        return [], [f"{path}: not a sweep manifest (a JSON object with 'runs')"]
    runs = manifest["runs"]
    if not isinstance(runs, list):
        return [], [f"{path}: 'runs' is not a list of runs, it is {quote(runs)}"]
    found, problems = [], []
    for index, run in enumerate(runs, start=1):
        problem = _sweep_run(run, index)
        if isinstance(problem, Path):
            found.append(problem)
        else:
            problems.append(f"{path}: {problem}")
    return found, problems


def _sweep_run(run: Any, index: int) -> Path | str:
    """The metrics file of one sweep run, or what is wrong with it."""
    if not isinstance(run, dict):
        return f"sweep run {quote(run)} is not an object (number {index} in 'runs')"
    label = (
        f"{quote(run.get('framework'))}/{quote(run.get('strategy'))} x{quote(run.get('tasks'))}"
        f" repeat {quote(run.get('repeat'))}"
    )
    folder = run.get("result_dir")
    if folder is not None and not isinstance(folder, str):
        return f"sweep run {label}: its result_dir is not a folder name: {quote(folder)}"
    metrics_file = Path(folder or "") / METRICS_FILENAME
    if folder and metrics_file.is_file():
        return metrics_file
    return (
        f"sweep run {label} (job {quote(run.get('job_id'))}, state {quote(run.get('state'))}) "
        f"has no {METRICS_FILENAME}"
    )


def find_metrics_files(paths: list[str]) -> tuple[list[Path], list[str]]:
    found: list[Path] = []
    problems: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files = sorted(path.rglob(METRICS_FILENAME))
            found.extend(files)
            if not files:
                problems.append(f"{path}: no {METRICS_FILENAME} in this folder")
        elif path.suffix == ".json":
            files, trouble = read_manifest(path)
            found.extend(files)
            problems.extend(trouble)
        else:
            found.append(path)  # a missing file is reported by scan()
    return found, problems


def load_runs(
    paths: list[str], once: bool = True
) -> tuple[list[RecordedRun], list[str], list[str]]:
    """(runs, problems, warnings). With `once`, a file read twice, or a copy of a run's file,
    counts once."""
    files, problems = find_metrics_files(paths)
    runs: dict[tuple[str, str], RecordedRun] = {}
    warnings = []
    for path in dict.fromkeys(path.resolve() for path in files) if once else files:
        result = scan(path)
        problems.extend(result.problems)
        warnings.extend(result.cut)  # a problem of that line only: the rest is read
        if not result.records or not isinstance(result.records[0], RunStart):
            continue
        mixed = mixed_runs(result.records, result.lines)
        if mixed is not None:
            line, why = mixed
            problems.append(
                f"{path}:{line}: a run_start that is not a resume of the run above it ({why}): "
                "two runs were written into one file, and their numbers cannot be told apart; "
                "left out. Compare runs from folders of their own"
            )
            continue
        run = RecordedRun(str(path), result.records)
        if once and run.identity in runs:
            warnings.append(
                f"{path} is the run {run.identity[0]} of {runs[run.identity].path} again "
                "(same run_id and start time): counted once"
            )
            continue
        runs[run.identity if once else (str(len(runs)), "")] = run
    return list(runs.values()), problems, warnings
