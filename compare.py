"""Line up runs of both frameworks from their metrics files.

    compare RESULTS...   (run folders, metrics.jsonl files, folders of run folders, or sweep
                         manifests written by slurm/sweep.py)

Every metrics file is validated against the schema in common.metrics; a broken or partial file
is reported by file and line and the valid runs are still shown. Exit status: 0 when every file
was valid, 1 when some were not (or none was found).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from common.metrics import METRICS_FILENAME, scan


def read_manifest(path: Path) -> tuple[list[Path], list[str]]:
    """The metrics files of a sweep manifest (slurm/sweep.py), and a problem for every run of
    the sweep that has none (failed before writing, never submitted, still queued)."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        runs = manifest["runs"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return [], [f"{path}: not a sweep manifest ({error})"]
    found, problems = [], []
    for run in runs:
        label = f"{run.get('framework')}/{run.get('strategy')} x{run.get('tasks')} " \
                f"repeat {run.get('repeat')}"  # fmt: skip
        metrics_file = Path(run.get("result_dir") or "") / METRICS_FILENAME
        if run.get("result_dir") and metrics_file.is_file():
            found.append(metrics_file)
        else:
            problems.append(f"{path}: sweep run {label} (job {run.get('job_id')}, state "
                            f"{run.get('state')}) has no {METRICS_FILENAME}")  # fmt: skip
    return found, problems


def find_metrics_files(paths: list[str]) -> tuple[list[Path], list[str]]:
    found: list[Path] = []
    problems: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.rglob(METRICS_FILENAME)))
        elif path.suffix == ".json":
            files, trouble = read_manifest(path)
            found.extend(files)
            problems.extend(trouble)
        else:
            found.append(path)  # a missing file is reported by scan()
    return found, problems


def summarize(records: list[dict]) -> dict:
    """One row per run: what ran, how fast (first epoch excluded when there are more), result."""
    start = records[0]
    # a resumed run appends: the last record of each epoch and the last run_end count
    by_number = {record["epoch"]: record for record in records if record["record"] == "epoch"}
    epochs = [by_number[number] for number in sorted(by_number)]
    ends = [record for record in records if record["record"] == "run_end"]
    end = ends[-1] if ends else None
    timed = epochs[1:] if len(epochs) > 1 else epochs
    return {
        "framework": start["framework"],
        "strategy": start["strategy"],
        "world": start["world_size"],
        "model": start["model"],
        "batch": start["global_batch_size"],
        "epochs": len(epochs),
        "epoch_s": statistics.median(e["train_time_s"] for e in timed) if timed else None,
        "samples_s": statistics.median(e["samples_per_s"] for e in timed) if timed else None,
        "accuracy": epochs[-1]["val_accuracy"] if epochs else None,
        "status": end["status"] if end else "unfinished",
    }


def _cell(value: object, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def format_table(rows: list[dict]) -> str:
    header = ["framework", "strategy", "world", "model", "batch", "epochs", "epoch_s",
              "samples_s", "accuracy", "status"]  # fmt: skip
    cells = [header] + [
        [
            _cell(row[key], 4 if key == "accuracy" else 1 if key == "samples_s" else 2)
            for key in header
        ]  # fmt: skip
        for row in rows
    ]
    widths = [max(len(line[column]) for line in cells) for column in range(len(header))]
    return "\n".join(
        "  ".join(text.rjust(width) for text, width in zip(line, widths, strict=True))
        for line in cells
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compare", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="run folders or metrics.jsonl files")
    args = parser.parse_args(argv)
    files, problems = find_metrics_files(args.results)
    rows = []
    for path in files:
        result = scan(path)
        problems.extend(result.problems)
        if result.records and result.records[0]["record"] == "run_start":
            rows.append(summarize(result.records))
    if not files:
        problems.append(f"no {METRICS_FILENAME} found under {', '.join(args.results)}")
    if rows:
        print(format_table(rows))
        print("epoch_s and samples_s are medians over epochs 2.. (epoch 1 only when it is alone)")
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems or not rows else 0


if __name__ == "__main__":
    raise SystemExit(main())
