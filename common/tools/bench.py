"""Training throughput of every strategy of both frameworks beside each one's plain loop.

    python -m common.tools.bench [--models mlp,cnn] [--frameworks torch,tf] [--nproc 2]
        [--compile eager,compiled] [--tf-ranks 1,2] [--set torch.wrap=size]
        [--vary torch.sharding=shard_grad_op] [--against REF] [--floor] [--out RESULTS/bench.json]

Each round measures every cell once, --repeats rounds interleaved; a cell is a real launch, its
figures the medians over the epochs after its first, a one-process launch's taken in turn with
its plain loop's passes (`common.core.run.turns`). The table gives each cell's median, spread
and ratio to its plain loop, also round by round and step by step, and what its epoch pays once
beyond its steps (`common.tools.bench_table`). The baselines run in a process of their own (no
framework is imported here). --against REF measures the cells on that commit too, --floor each
plain loop once more: the host's noise. --out writes the rows for compare.py's verdict.
docs/performance.md says what each row means.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import sys
from pathlib import Path

from common.core.config import strategies
from common.core.train.progress import TERMINAL_EVERY_S
from common.report import harness_ratio, measured_files
from common.tools import programs, worktree
from common.tools.bench_cells import Cell, measurements
from common.tools.bench_table import Tally, change_table, main_table, rows
from common.tools.measure import BATCH, TIMED, progress_cost


def reason(failed: Exception) -> str:
    """The line of a failed program's output that says why (its last "error" line), else the
    first line of the failure."""
    lines = [line.strip() for line in str(failed).splitlines() if line.strip()]
    said = [line for line in lines if line.lower().startswith("error")]
    return said[-1] if said else lines[0] if lines else type(failed).__name__


def measure_rounds(
    cells: list[Cell], repeats: int, before: Path | None, steps: int = 0
) -> tuple[Tally, Tally]:
    """Every cell once per round (drift hits all alike), on this tree and, given `before`, on
    that one right after it. A cell the other tree cannot run (a setting it lacks) is said once
    and left out there; a failure on this tree stops the bench."""
    now, then = Tally(steps=steps, batch=BATCH), Tally(steps=steps, batch=BATCH)
    lacking: set[str] = set()
    for repeat in range(repeats):
        for cell in cells:
            trees = [(now, None, "")] + ([(then, before, " (before)")] if before else [])
            for tally, root, said in trees:
                if root is not None and (cell.here_only or cell.label in lacking):
                    continue
                try:
                    measured = cell.measure(root=root)
                except RuntimeError as failed:
                    if root is None:
                        raise
                    lacking.add(cell.label)
                    print(
                        f"  before: {cell.model} {cell.label} not measured: {reason(failed)}",
                        flush=True,
                    )
                    continue
                for variant, (speed, figures) in measured.items():
                    tally.add((cell.model, variant), cell.ranks, speed, figures)
                    print(
                        f"  round {repeat + 1}: {cell.model} {variant}{said}: "
                        f"{speed:,.0f} samples/s",
                        flush=True,
                    )
    return now, then


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m common.tools.bench", description=__doc__)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--frameworks", default="torch,tf")
    parser.add_argument(
        "--strategies",
        default=",".join(strategies.names()),
        help="strategies of any framework (common.core.config.strategies); each framework runs "
        "those it has",
    )
    parser.add_argument("--pipelines", default="tensor,loader")
    parser.add_argument(
        "--compile",
        default="eager",
        help="eager, compiled or both (eager,compiled): torch.compile / tf.jit_compile",
    )
    parser.add_argument(
        "--tf-ranks", default="", help="TensorFlow worker counts, e.g. 1,2 (default: --nproc)"
    )
    parser.add_argument("--nproc", type=int, default=2, help="ranks of ddp, fsdp and TF runs")
    parser.add_argument("--train-limit", type=int, default=6400, help="training samples used")
    parser.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "gpu"],
        help="dist.device of every run and baseline (auto: a GPU when the framework sees one)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for every launched run, e.g. torch.wrap=size",
    )
    parser.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more cell per strategy that reads KEY, beside its plain one, e.g. "
        "torch.sharding=shard_grad_op or train.steps_per_call=16 (repeatable)",
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="also measure every cell on this commit of the suite (a hash, tag or HEAD~N), in "
        "the same rounds, and print both side by side",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="measure each plain loop once more in every round, after its framework's launches "
        "(row 'plain loop, again'): its ratio to the plain loop is what this host's noise alone "
        "gives, the floor under which no other ratio means anything",
    )
    parser.add_argument(
        "--timed-epochs",
        type=int,
        default=TIMED,
        help="epochs (plain loops: passes) timed after the first in every measurement; its "
        "figure is their median",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="interleaved repeats of every measurement (median and spread)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="also write the rows here (a bench*.json among compare.py's results: its verdict "
        "gives each framework's harness ratio)",
    )
    args = parser.parse_args(argv)
    if args.out is not None and not fnmatch.fnmatch(args.out.name, harness_ratio.PATTERN):
        parser.error(f"--out {args.out}: name it {harness_ratio.PATTERN}, as compare.py finds it")
    chosen = args.frameworks.split(",")
    unknown = sorted(set(chosen) - set(programs.FRAMEWORKS))
    if unknown:
        parser.error(
            f"--frameworks: unknown {unknown}; choose from {','.join(programs.FRAMEWORKS)}"
        )
    unknown = sorted(set(args.strategies.split(",")) - set(strategies.names()))
    if unknown:
        known = ",".join(strategies.names())
        parser.error(f"--strategies: unknown {unknown}; choose from {known}")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.timed_epochs < 1:
        parser.error("--timed-epochs must be >= 1")
    if not set(args.compile.split(",")) <= {"eager", "compiled"}:
        parser.error("--compile takes eager, compiled or eager,compiled")
    for setting in [*args.set, *args.vary]:
        if "=" not in setting:
            parser.error(f"{setting!r}: give KEY=VALUE, e.g. torch.wrap=size")
    try:
        commit = worktree.commit_of(args.against) if args.against else ""
    except worktree.UnknownRef as unknown:
        parser.error(str(unknown))
    print(
        f"{args.train_limit} samples, batch {BATCH} (global), {args.nproc} ranks for "
        f"ddp/fsdp/tf, {args.repeats} interleaved repeats of {args.timed_epochs} timed epochs",
        flush=True,
    )
    cells = measurements(args, chosen)
    with contextlib.ExitStack() as stack:
        before = stack.enter_context(worktree.checked_out(commit)) if commit else None
        now, then = measure_rounds(cells, args.repeats, before, args.train_limit // BATCH)
    print("\n".join(main_table(now)))
    if args.out is not None:
        given = sys.argv[1:] if argv is None else argv
        measured_files.write(args.out, rows(now), ["python -m common.tools.bench", *given])
        print(f"rows written to {args.out} (compare.py reads it among the results)")
    if commit:
        print("\n".join(change_table(then, now, f"{args.against} ({commit[:10]})")))
    per_line, fraction = progress_cost()
    print(
        f"progress: {per_line * 1e6:.1f} us per line, {fraction:.4%} of the time at one line "
        f"every {TERMINAL_EVERY_S} s (and off the train clock)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
