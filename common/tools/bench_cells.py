"""The cells of the benchmark (`common.tools.bench`): each framework's baselines, and a real
launch of every chosen strategy, pipeline and execution mode, with one more cell for every
`--vary KEY=VALUE` that the strategy reads. A cell measures the suite's tree it is given: this
one, or the tree of `--against REF`."""

from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.core.config import strategies
from common.report.harness_ratio import AGAIN
from common.tools import programs
from common.tools.measure import baselines, launched

# variant -> (samples/s, {"mfu": training MFU, "eval": evaluation MFU, "step_s": median step
# seconds}, each where measured)
Measured = dict[str, tuple[float, dict[str, float | None]]]


@dataclass(frozen=True, slots=True)
class Cell:
    """One measurement of the table: `measure(root=root)` runs it on the suite's tree at `root`
    (None: this one)."""

    model: str
    label: str
    ranks: int
    measure: Callable[..., Measured]  # measure(root=...)
    here_only: bool = False  # not measured on the tree of --against


def _labelled(label: str, measure: Callable[..., Any], root: Path | None) -> Measured:
    return {label: measure(root=root)}


def _again(framework: str, measure: Callable[..., Any], root: Path | None) -> Measured:
    return {f"{framework} {AGAIN}": measure(root=root)[f"{framework} plain loop"]}


def reaches(framework: str, strategy: strategies.Strategy, override: str) -> bool:
    """Whether `override` means something to `strategy` of `framework`: it is not the other
    framework's, and it is not an option of other strategies only (torch.sharding for ddp)."""
    return bool(programs.get(framework).own([override])) and strategies.takes(strategy, override)


def shown(framework: str, override: str) -> str:
    """How a varied setting is named in a row: without its framework's section."""
    return override.removeprefix(f"{framework}.")


def measurements(args: argparse.Namespace, chosen: list[str]) -> list[Cell]:
    """Every cell, in the order of the table."""
    cells: list[Cell] = []
    varied: list[str] = args.vary
    for model_name in args.models.split(","):
        for framework in chosen:
            measure = functools.partial(
                baselines,
                framework,
                model_name,
                args.train_limit,
                args.timed_epochs,
                args.device,
            )
            plain_only = functools.partial(measure, plain_only=True)  # --floor's, after these
            cells.append(Cell(model_name, f"{framework} baselines", 1, measure))
            own = strategies.of(framework)
            listed = [name for name in args.strategies.split(",") if name in own]
            tf_ranks = [int(n) for n in args.tf_ranks.split(",")] if args.tf_ranks else None
            for strategy, compiled, pipeline in itertools.product(
                listed, args.compile.split(","), args.pipelines.split(",")
            ):
                default = 1 if own[strategy].processes == "one" else args.nproc
                flag = programs.get(framework).compile_key + (
                    "=true" if compiled == "compiled" else "=false"
                )
                # an option of other strategies (torch.sharding for ddp) is left out
                taken = [o for o in args.set if strategies.takes(own[strategy], o)]
                variants = [("", ())] + [
                    (f" {shown(framework, o)}", (o,))
                    for o in varied
                    if reaches(framework, own[strategy], o)
                ]
                for ranks in tf_ranks if framework == "tf" and tf_ranks else [default]:
                    for suffix, more in variants:
                        name = f" x{ranks}" if framework == "tf" and tf_ranks else ""
                        name += " compiled" if compiled == "compiled" else ""
                        label = f"{framework} {strategy}{name}{suffix} / {pipeline}"
                        run = functools.partial(
                            launched,
                            framework,
                            strategy,
                            model_name=model_name,
                            pipeline=pipeline,
                            nproc=ranks,
                            limit=args.train_limit,
                            timed=args.timed_epochs,
                            device=args.device,
                            extra=(*taken, flag, *more),  # a varied setting wins
                        )
                        measure = functools.partial(_labelled, label, run)
                        cells.append(Cell(model_name, label, ranks, measure))
            if args.floor:
                measure = functools.partial(_again, framework, plain_only)
                cells.append(Cell(model_name, f"{framework} {AGAIN}", 1, measure, here_only=True))
    return cells
