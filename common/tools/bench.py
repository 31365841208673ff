"""Training throughput of every torch strategy and TensorFlow's MultiWorkerMirroredStrategy, for
both pipelines, beside each framework's plain-loop baselines, in one run.

    python -m common.tools.bench [--models mlp,cnn] [--frameworks torch,tf] [--nproc 2]
        [--compile eager,compiled] [--tf-ranks 1,2] [--set torch.wrap=size]

Every measurement is repeated --repeats times, interleaved (each round measures every cell
once), and reported as median and spread. Nothing here imports a framework. Each framework's
baselines run in a process of their own (`python -m torch_impl.bench`, `python -m
tf_impl.bench`), which prints one JSON line: {"model": ..., "samples_per_s": {baseline name:
samples/s}}. Strategies run as real launches (`common.launch`) for two epochs; their samples/s
and MFU are the second epoch's (the first includes warm-up, tracing and compiling). --compile
adds torch.compile / tf.jit_compile cells. Prints a table.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
from collections.abc import Callable
from typing import Any

from common.core.config import strategies
from common.core.train import frameworks
from common.core.train.progress import TERMINAL_EVERY_S
from common.tools.measure import BATCH, SPREAD_WARNING, baselines, launched, progress_cost

# variant -> (samples/s, {"mfu": training MFU, "eval": evaluation MFU} or {})
Measured = dict[str, tuple[float, dict[str, float | None]]]
Cell = tuple[str, str, int, Callable[[], Measured]]  # model, variant, ranks, measure


def _without_mfu(measure: Callable[..., dict[str, float]], *args: Any) -> Measured:
    return {name: (speed, {}) for name, speed in measure(*args).items()}


def _labelled(label: str, measure: Callable[[], tuple[float, dict[str, float | None]]]) -> Measured:
    return {label: measure()}


def measurements(args: argparse.Namespace, chosen: list[str]) -> list[Cell]:
    """(model, variant, ranks, measure) for every cell."""
    cells: list[Cell] = []
    for model_name in args.models.split(","):
        for framework in chosen:
            cells.append(
                (
                    model_name,
                    f"{framework} baselines",
                    1,
                    functools.partial(
                        _without_mfu,
                        baselines,
                        framework,
                        model_name,
                        args.train_limit,
                        1,
                        args.device,
                    ),
                )
            )
            own = strategies.of(framework)
            listed = [name for name in args.strategies.split(",") if name in own]
            tf_ranks = [int(n) for n in args.tf_ranks.split(",")] if args.tf_ranks else None
            for strategy, compiled, pipeline in itertools.product(
                listed, args.compile.split(","), args.pipelines.split(",")
            ):
                default = 1 if own[strategy].processes == "one" else args.nproc
                for ranks in tf_ranks if framework == "tf" and tf_ranks else [default]:
                    flag = frameworks.get(framework).compile_key + (
                        "=true" if compiled == "compiled" else "=false"
                    )
                    # an option of other strategies (torch.sharding for ddp) is left out
                    taken = [o for o in args.set if strategies.takes(own[strategy], o)]
                    shown = f" x{ranks}" if framework == "tf" and tf_ranks else ""
                    shown += " compiled" if compiled == "compiled" else ""
                    label = f"{framework} {strategy}{shown} / {pipeline}"
                    measure = functools.partial(
                        launched,
                        framework,
                        strategy,
                        model_name=model_name,
                        pipeline=pipeline,
                        nproc=ranks,
                        limit=args.train_limit,
                        device=args.device,
                        extra=(*taken, flag),
                    )
                    cells.append(
                        (
                            model_name,
                            label,
                            ranks,
                            functools.partial(_labelled, label, measure),
                        )
                    )
    return cells


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
        "--repeats",
        type=int,
        default=3,
        help="interleaved repeats of every measurement (median and spread)",
    )
    args = parser.parse_args(argv)
    chosen = args.frameworks.split(",")
    unknown = sorted(set(chosen) - set(frameworks.FRAMEWORKS))
    if unknown:
        parser.error(
            f"--frameworks: unknown {unknown}; choose from {','.join(frameworks.FRAMEWORKS)}"
        )
    unknown = sorted(set(args.strategies.split(",")) - set(strategies.names()))
    if unknown:
        known = ",".join(strategies.names())
        parser.error(f"--strategies: unknown {unknown}; choose from {known}")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if not set(args.compile.split(",")) <= {"eager", "compiled"}:
        parser.error("--compile takes eager, compiled or eager,compiled")
    print(
        f"{args.train_limit} samples, batch {BATCH} (global), {args.nproc} ranks for "
        f"ddp/fsdp/tf, {args.repeats} interleaved repeats",
        flush=True,
    )
    cells = measurements(args, chosen)
    found: dict[tuple[str, str], list[float]] = {}
    mfus: dict[tuple[str, str, str], list[float]] = {}
    ranks_of: dict[tuple[str, str], int] = {}
    for repeat in range(args.repeats):  # every cell once per round: drift hits all alike
        for model_name, _, ranks, measure in cells:
            for variant, (speed, utilization) in measure().items():
                found.setdefault((model_name, variant), []).append(speed)
                for kind, value in utilization.items():
                    if value is not None:
                        mfus.setdefault((model_name, variant, kind), []).append(value)
                ranks_of[(model_name, variant)] = ranks
                print(
                    f"  round {repeat + 1}: {model_name} {variant}: {speed:,.0f} samples/s",
                    flush=True,
                )
    print(
        f"\n{'model':<6} {'variant':<36} {'ranks':>5} {'samples/s':>10} {'spread':>7} "
        f"{'vs plain':>8} {'MFU':>6} {'eval MFU':>8}"
    )
    print(
        "(MFU: training, eval MFU: the evaluation's forward passes, both against the ranks' "
        "summed GEMM peak, common.core.measure.peak)"
    )
    print(
        "(median of the repeats; spread = (max - min) / median; vs plain: against the same "
        "framework's plain loop, only from 2 repeats on)"
    )
    noisy = []
    for (model_name, variant), speeds in found.items():
        middle = statistics.median(speeds)
        spread = (max(speeds) - min(speeds)) / middle
        framework = variant.split()[0]
        plain = found.get((model_name, f"{framework} plain loop"))
        ratio = (
            f"{middle / statistics.median(plain):8.2f}"
            if plain and len(speeds) > 1
            else f"{'-':>8}"
        )
        spread_text = f"{spread:7.0%}" if len(speeds) > 1 else f"{'-':>7}"
        train, forward = (mfus.get((model_name, variant, kind)) for kind in ("mfu", "eval"))
        mfu_text = f"{statistics.median(train):6.1%}" if train else f"{'-':>6}"
        mfu_text += f" {statistics.median(forward):8.1%}" if forward else f" {'-':>8}"
        print(
            f"{model_name:<6} {variant:<36} {ranks_of[(model_name, variant)]:>5} "
            f"{middle:>10,.0f} {spread_text} {ratio} {mfu_text}"
        )
        if spread > SPREAD_WARNING:
            noisy.append(f"{model_name} {variant} ({spread:.0%})")
    if noisy:
        print(
            f"warning: spread over {SPREAD_WARNING:.0%}, the machine was busy: " + ", ".join(noisy)
        )
    per_line, fraction = progress_cost()
    print(
        f"progress: {per_line * 1e6:.1f} us per line, {fraction:.4%} of the time at one line "
        f"every {TERMINAL_EVERY_S} s (and off the train clock)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
