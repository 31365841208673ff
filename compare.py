"""Line up runs of both frameworks from their metrics files.

    python compare.py RESULTS... [--out DIR] [--format terminal|markdown|csv|json]
    python compare.py --assert-close A B [--rtol 1e-4] [--steps N]

RESULTS are run folders, metrics.jsonl files, folders of run folders, or sweep manifests
(slurm/sweep.py). Every file is validated against common.core.metrics' schema; a broken or
partial file is reported by name and line, and the rest are still compared. Runs are grouped
when they are comparable (model, dataset, precision, epochs, batch); the others are named with
the reason.
--out DIR writes report.html (self-contained), report.md, report.csv, report.json and the plots.
--assert-close compares two loss curves step by step (epoch by epoch when either run has no step
records) and names the first point that differs by more than --rtol.
Exit status: 0 when every input was valid (or the curves agree), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from common.core.metrics import METRICS_FILENAME, scan
from common.core.records import RunStart
from common.report import sizes, tables
from common.report.rows import Group, Row, group_runs, rows_for
from common.report.runs import RecordedRun
from common.report.sizes import SizeRow


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
        label = (
            f"{run.get('framework')}/{run.get('strategy')} x{run.get('tasks')} "
            f"repeat {run.get('repeat')}"
        )
        metrics_file = Path(run.get("result_dir") or "") / METRICS_FILENAME
        if run.get("result_dir") and metrics_file.is_file():
            found.append(metrics_file)
        else:
            problems.append(
                f"{path}: sweep run {label} (job {run.get('job_id')}, state "
                f"{run.get('state')}) has no {METRICS_FILENAME}"
            )
    return found, problems


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
        if not result.records or not isinstance(result.records[0], RunStart):
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


def curve(run: RecordedRun, by: str) -> list[tuple[int, float]]:
    if by == "step":
        return [(step.step, step.loss) for step in run.steps]
    return [(epoch.epoch, epoch.train_loss) for epoch in run.epochs]


def assert_close(a: str, b: str, rtol: float, steps: int) -> int:
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


def write_outputs(
    out: Path,
    groups: list[Group],
    runs_by_group: list[list[Row]],
    notes: list[str],
    problems: list[str],
    target: float,
    size_rows: list[SizeRow],
) -> Path:
    from common.report import pages, plots, sizeplot

    out.mkdir(parents=True, exist_ok=True)
    rendered = []
    for index, ((key, members), rows) in enumerate(zip(groups, runs_by_group, strict=True)):
        folder = out / ("plots" if index == 0 else f"plots-group{index + 1}")
        pictures = plots.write_plots(rows, members, folder, target)
        rendered.append(pages.Group(key, rows, members, pictures))
    size = None
    if size_rows:
        picture = sizeplot.plot_sizes(size_rows, out / "size.png")
        size = pages.SizeAxis(sizes.size_table_lines(size_rows), picture, sizeplot.CAPTION)
    for write, name in ((pages.write_html, "report.html"), (pages.write_markdown, "report.md")):
        write(rendered, notes, problems, path=out / name, target=target, size=size)
    all_rows = [{**group.key, **asdict(row)} for group in rendered for row in group.rows]
    (out / "report.csv").write_text(tables.csv_table(all_rows), encoding="utf-8")
    document = {
        "target_accuracy": target,
        "groups": [
            {"key": group.key, "rows": [asdict(row) for row in group.rows]} for group in rendered
        ],
        "model_sizes": [asdict(row) for row in size_rows],
        "not_side_by_side": notes,
        "problems": problems,
    }
    (out / "report.json").write_text(json.dumps(document, indent=2), encoding="utf-8")
    return out / "report.html"


def default_target(runs: list[RecordedRun]) -> float:
    """The train.target_accuracy most of the runs were given (0.98 when none says)."""
    targets = [run.start.config["train"].get("target_accuracy", 0.98) for run in runs]
    return max(set(targets), key=targets.count) if targets else 0.98


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `compare ... | head` closed the pipe: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="*", help="run folders, metrics files, manifests")
    parser.add_argument("--out", type=Path, help="write the report files and plots here")
    parser.add_argument(
        "--format", default="terminal", choices=["terminal", "markdown", "csv", "json"]
    )
    parser.add_argument(
        "--target",
        type=float,
        metavar="ACC",
        help="accuracy (a fraction) for the time to target, from the epoch records "
        "(default: the runs' train.target_accuracy)",
    )
    parser.add_argument("--tensorboard", type=Path, metavar="DIR", help="write event files here")
    parser.add_argument("--assert-close", nargs=2, metavar=("A", "B"))
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=0, help="compare only the first N points")
    args = parser.parse_args(argv)
    if args.target is not None and not 0 < args.target <= 1:
        parser.error(f"--target is an accuracy in (0, 1], got {args.target}")
    if args.assert_close:
        first, second = args.assert_close
        return assert_close(first, second, args.rtol, args.steps)
    if not args.results:
        parser.error("give result folders, metrics files or sweep manifests to compare")
    runs, problems, warnings = load_runs(args.results)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    target = args.target if args.target is not None else default_target(runs)
    groups, notes = group_runs(runs)
    runs_by_group = [rows_for(members, target) for _, members in groups]
    for (key, _), rows in zip(groups, runs_by_group, strict=True):
        title = ", ".join(f"{name} {value}" for name, value in key.items())
        if args.format == "terminal":
            print(f"== {title}\n{tables.terminal_table(rows)}")
        elif args.format == "markdown":
            print(f"## {title}\n\n{tables.markdown_table(rows)}\n")
        elif args.format == "csv":
            print(tables.csv_table([{**key, **asdict(row)} for row in rows]), end="")
        else:
            shown = [asdict(row) for row in rows]
            print(json.dumps({"key": key, "target_accuracy": target, "rows": shown}))
    size_rows = sizes.size_rows(runs)
    if size_rows and args.format in ("terminal", "markdown"):
        print(f"== model-size axis\n{tables.aligned(sizes.size_table_lines(size_rows))}")
    all_rows = [row for rows in runs_by_group for row in rows]
    if args.format in ("terminal", "markdown") and all_rows:
        bullet = "  *" if args.format == "terminal" else "-"
        print("\n".join(f"{bullet} {note}" for note in tables.footnotes(all_rows, target)))
    for note in notes:
        print(f"not side by side: {note}", file=sys.stderr)
    if args.out and runs:
        try:
            html_path = write_outputs(
                args.out, groups, runs_by_group, notes, problems, target, size_rows
            )
        except RuntimeError as error:  # matplotlib missing
            problems.append(str(error))
        else:
            print(f"report: {html_path}")
    if args.tensorboard and runs:
        from common.report import tensorboard

        try:
            written = tensorboard.write_events(runs, args.tensorboard)
        except RuntimeError as error:  # tensorboardX missing
            problems.append(str(error))
        else:
            print(
                f"tensorboard: {len(written)} runs in {args.tensorboard} "
                f"(tensorboard --logdir {args.tensorboard})"
            )
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    if not runs:
        print(f"problem: no valid run found in {', '.join(args.results)}", file=sys.stderr)
    return 1 if problems or not runs else 0


if __name__ == "__main__":
    raise SystemExit(main())
