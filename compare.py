"""Line up runs of both frameworks from their metrics files.

    python compare.py RESULTS... [--out DIR] [--format terminal|markdown|csv|json]
    python compare.py --assert-close A B [--rtol 1e-4] [--steps N]

RESULTS are run folders, metrics.jsonl files, folders of run folders, or sweep manifests
(slurm/sweep.py). Every file is validated against common.core.records.metrics' schema; a broken or
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
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from common.projection import chart, levers, memory_at_n, profiles, summary
from common.projection.levers import Lever
from common.projection.memory_at_n import MemoryRow
from common.report import agreement, lost_rank_table, size_table, trace_files, verdict
from common.report.harness_ratio import attach as attach_harness_ratios
from common.report.inputs import load_runs
from common.report.render import files, pages, tables
from common.report.rows import RunGroup, group_runs, rows_for
from common.report.runs import RecordedRun


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


def _parser() -> argparse.ArgumentParser:
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
    _projection_options(parser)
    return parser


def _projection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project",
        metavar="N,N,...",
        help="project each run to these worker counts with a link profile (e.g. 2,8,64,512); "
        f"default {summary.DEFAULT_WORKERS} when --links is given or the results hold a "
        "links*.json (the preflight writes one)",
    )
    parser.add_argument(
        "--scaling",
        choices=["strong", "weak"],
        help="how --project grows the batch: strong keeps the global batch (shared by more "
        "ranks; a world larger than it is not projected), weak keeps each rank's; default: as "
        "each run ran (train.batch_mode)",
    )
    parser.add_argument(
        "--device-memory",
        metavar="SIZE",
        help="with --project: each run's memory per rank at every worker count (torch's "
        "trackers, python -m torch_impl.memory_plan) and whether it fits a device of SIZE, "
        "e.g. 80GiB",
    )
    parser.add_argument(
        "--links",
        type=Path,
        action="append",
        metavar="PROFILE",
        help="a link profile for --project (torch_impl.links, tf_impl.links); again for one of "
        "more nodes, each size priced from its own; default: the results' links*.json",
    )


def _checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int | None:
    """Refuse bad options before any work (parser.error exits 2); the device's bytes, if
    --device-memory was given."""
    if args.target is not None and not 0 < args.target <= 1:
        parser.error(f"--target is an accuracy in (0, 1], got {args.target}")
    if args.project is not None:  # an empty or malformed list is refused
        try:
            summary.worlds(args.project)
        except ValueError as error:
            parser.error(str(error))
    if args.device_memory is None:
        return None
    try:
        device = memory_at_n.device_bytes(args.device_memory)
    except ValueError as error:
        parser.error(str(error))
    if args.project is None and not args.links and not profiles.profiles_in(args.results):
        parser.error(
            "--device-memory prices the projection's worker counts: give --project N,N,... "
            "and a link profile (--links, or a links*.json among the results)"
        )
    return device


@dataclasses.dataclass
class Compared:
    """What was loaded and grouped, for the printed tables and the report files."""

    runs: list[RecordedRun]
    problems: list[str]
    target: float
    groups: list[RunGroup]
    notes: list[str]
    size_rows: list[size_table.SizeRow]
    lost_rank: pages.LostRank | None = None
    traces: list[tuple[str, list[Path]]] = dataclasses.field(default_factory=list)


def _load(args: argparse.Namespace) -> Compared:
    runs, problems, warnings = load_runs(args.results)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    target = args.target if args.target is not None else default_target(runs)
    groups, notes = group_runs(runs)
    for group in groups:
        group.rows = rows_for(group.runs, target)
    cells, cell_notes, unreadable = lost_rank_table.gathered(args.results)
    problems += unreadable + attach_harness_ratios(groups, args.results)
    compared = Compared(runs, problems, target, groups, notes, size_table.size_rows(runs))
    compared.lost_rank = pages.LostRank(cells, cell_notes) if cells else None
    compared.traces = trace_files.found(runs)
    return compared


def _print_tables(compared: Compared, form: str) -> None:
    target = compared.target
    for group in compared.groups:
        key, rows = group.key, group.rows
        title = ", ".join(f"{name} {value}" for name, value in key.items())
        said = verdict.of_group(group, target)
        if form == "terminal":
            print(f"== {title}\n{tables.terminal_table(rows)}")
            print("\n".join(f"  > {sentence}" for sentence in said))
        elif form == "markdown":
            print(f"## {title}\n\n{tables.markdown_table(rows)}\n")
            print("\n".join(f"- {sentence}" for sentence in said) + "\n")
        elif form == "csv":
            print(tables.csv_table([{**key, **row.as_dict()} for row in rows]), end="")
        else:
            shown = [row.as_dict() for row in rows]
            print(json.dumps({"key": key, "target_accuracy": target, "rows": shown}))
    if compared.size_rows and form in ("terminal", "markdown"):
        lines = tables.size_table_lines(compared.size_rows)
        print(f"== model-size axis\n{tables.aligned(lines)}")
    if compared.lost_rank and form in ("terminal", "markdown"):
        lost = compared.lost_rank
        print(tables.section_text(pages.LOST_RANK_TITLE, lost.cells, lost.notes, form))
    if compared.traces and form in ("terminal", "markdown"):
        listed = trace_files.lines(compared.traces)
        print("\n".join(["== traces", *(f"  {line}" for line in listed), f"  * {trace_files.HOW}"]))
    all_rows = [row for group in compared.groups for row in group.rows]
    if form in ("terminal", "markdown") and all_rows:
        bullet = "  *" if form == "terminal" else "-"
        print("\n".join(f"{bullet} {note}" for note in tables.footnotes(all_rows, target)))


def _project(
    args: argparse.Namespace, runs: list[RecordedRun], device: int | None
) -> tuple[summary.Report, list[MemoryRow], list[Lever]]:
    """The projection and, with --device-memory, memory per rank at each count and the levers
    where a run does not fit; ValueError, RuntimeError, OSError or TimeoutExpired if it fails."""
    projected = summary.report(runs, args.project, args.links, args.results, args.scaling)
    memory: list[MemoryRow] = []
    found: list[Lever] = []
    if device is not None:
        memory = memory_at_n.memory_rows(runs, summary.worlds(args.project), args.scaling, device)
        found = levers.levers(runs, memory, args.scaling, device, projected.rows, projected.of)
    return projected, memory, found


def _print_projection(
    report: summary.Report, rows: list[MemoryRow], device: int | None, form: str, found: list[Lever]
) -> None:
    if form == "json":  # one more JSON line, so that the output stays JSON lines
        as_data = report.as_dict()
        if device is not None:
            as_data["memory"] = [dataclasses.asdict(row) for row in rows]
            largest = memory_at_n.largest_fitting(rows)
            as_data["largest_fitting"] = [dataclasses.asdict(fit) for fit in largest]
            as_data["levers"] = [dataclasses.asdict(lever) for lever in found]
        print(json.dumps({"projection": as_data}))
        return
    print(report.text)
    if device is not None:
        print("\n".join([*memory_at_n.lines(rows, device), *levers.lines(found, rows)]))


def _write_report(out: Path, compared: Compared, projected: summary.Report | None) -> None:
    """The report files, with the projection's section and plot; a failure is a problem."""
    section = None
    if projected is not None:
        if picture := chart.plot(projected, out):
            print(f"projection plot: {picture}")
        section = pages.Projection(projected.sentences, projected.table, projected.caveats, picture)
    try:
        html_path = files.write_report(
            out,
            compared.groups,
            compared.notes,
            compared.problems,
            compared.target,
            compared.size_rows,
            section,
            compared.lost_rank,
            compared.traces,
        )
    except RuntimeError as error:  # matplotlib missing
        compared.problems.append(str(error))
    except OSError as error:  # a file in the way, a read-only or full file system
        compared.problems.append(f"cannot write {out}: {error.strerror or error}")
    else:
        print(f"report: {html_path}")


def _write_events(folder: Path, compared: Compared) -> None:
    from common.report.render import tensorboard

    try:
        written = tensorboard.write_events(compared.runs, folder)
    except RuntimeError as error:  # tensorboardX missing
        compared.problems.append(str(error))
    except OSError as error:
        compared.problems.append(f"cannot write {folder}: {error.strerror or error}")
    else:
        print(f"tensorboard: {len(written)} runs in {folder} (tensorboard --logdir {folder})")


def _main(argv: list[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    device = _checked(parser, args)
    if args.assert_close:
        first, second = args.assert_close
        return agreement.assert_close(first, second, args.rtol, args.steps)
    if not args.results:
        parser.error("give result folders, metrics files or sweep manifests to compare")
    compared = _load(args)
    _print_tables(compared, args.format)
    if args.project is None and (args.links or profiles.profiles_in(args.results)):
        args.project = summary.DEFAULT_WORKERS
    projected = None
    if args.project:
        try:
            projected, memory, found = _project(args, compared.runs, device)
        except (ValueError, RuntimeError, OSError, subprocess.TimeoutExpired) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        _print_projection(projected, memory, device, args.format, found)
    for note in compared.notes:
        print(f"not side by side: {note}", file=sys.stderr)
    if args.out and compared.runs:
        _write_report(args.out, compared, projected)
    if args.tensorboard and compared.runs:
        _write_events(args.tensorboard, compared)
    for problem in compared.problems:
        print(f"problem: {problem}", file=sys.stderr)
    if not compared.runs:
        print(f"problem: no valid run found in {', '.join(args.results)}", file=sys.stderr)
    return 1 if compared.problems or not compared.runs else 0


if __name__ == "__main__":
    raise SystemExit(main())
