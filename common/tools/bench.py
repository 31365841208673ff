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
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from common.core import metrics
from common.core.progress import TERMINAL_EVERY_S, Progress
from common.core.records import METRICS_FILENAME, Epoch
from common.data import mnist

BATCH = 64
TIMEOUT_S = 1800
TRAIN_MODULE = {"torch": "torch_impl.train", "tf": "tf_impl.train"}


def baselines(
    framework: str, model_name: str, limit: int, repeats: int, device: str = "auto"
) -> dict[str, float]:
    """{"<framework> <baseline name>": samples/s} from `python -m <framework>_impl.bench`."""
    command = [
        sys.executable,
        "-m",
        f"{framework}_impl.bench",
        "--model",
        model_name,
        "--train-limit",
        str(limit),
        "--repeats",
        str(repeats),
        "--batch",
        str(BATCH),
        "--device",
        device,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{framework} baselines failed:\n{done.stderr[-2000:]}")
    speeds = json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"]
    return {f"{framework} {name}": speed for name, speed in speeds.items()}


def launched(
    framework: str,
    strategy: str,
    *,
    model_name: str,
    pipeline: str,
    nproc: int,
    limit: int,
    device: str = "auto",
    extra: tuple[str, ...] = (),
) -> tuple[float, float | None]:
    """(samples/s, {"mfu": training MFU, "eval": forward-only MFU of the evaluation}) of epoch 2
    of a real launch of the framework's training program;
    `extra`: more `--set` overrides (torch.* ones only reach torch, tf.* only TensorFlow)."""
    with tempfile.TemporaryDirectory() as out:
        overrides = [
            f"model.name={model_name}",
            "optim.name=adam",
            f"data.pipeline={pipeline}",
            f"data.train_limit={limit}",
            "train.epochs=2",
            f"train.batch_size={BATCH}",
            "train.batch_mode=global",
            f"output.dir={out}",
            "output.run_name=bench",
            f"dist.device={device}",
        ]
        if framework == "torch":
            overrides.append(f"torch.strategy={strategy}")
        overrides += [
            item for item in extra if framework == "torch" or not item.startswith("torch.")
        ]
        command = [sys.executable, "-m", TRAIN_MODULE[framework]]
        for override in overrides:
            command += ["--set", override]
        if nproc > 1:
            command = [sys.executable, "-m", "common.launch", "--nproc", str(nproc), "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{framework} {strategy}/{pipeline} failed:\n{done.stdout[-2000:]}")
        records = metrics.read_records(Path(out) / "bench" / METRICS_FILENAME)
        last = [record for record in records if isinstance(record, Epoch)][-1]
        # Evaluation is a forward pass (a third of a training sample's FLOPs) over the whole
        # test set (10,000 samples: no data.test_limit here).
        flops, peak = last.flops_per_sample or 0, last.peak_flops or 0.0
        forward = flops / 3 * mnist.TEST_SAMPLES / last.eval_time_s
        return last.samples_per_s, {"mfu": last.mfu, "eval": forward / peak if peak else None}


SPREAD_WARNING = 0.10  # (max - min) / median above this: the machine was busy


def progress_cost(repeats: int = 2000) -> tuple[float, float]:
    """(seconds per progress line, fraction of time at the terminal default of one line every
    TERMINAL_EVERY_S): the real Progress.update writing real lines to a file."""
    with tempfile.TemporaryFile("w") as sink:
        shown = Progress(
            enabled=True,
            epochs=1,
            steps_per_epoch=repeats,
            global_batch=BATCH,
            every_s=0,
            stream=sink,
        )
        shown.start_epoch()
        for step in range(1, repeats + 1):
            shown.update(epoch=0, step=step, train_s=0.01 * step, loss=lambda: 0.1)
    per_line = shown.spent_s / repeats
    return per_line, per_line / TERMINAL_EVERY_S


COMPILE_KEY = {"torch": "torch.compile", "tf": "tf.jit_compile"}


def _without_mfu(measure: Callable[..., dict[str, float]], *args) -> dict[str, tuple]:
    return {name: (speed, {}) for name, speed in measure(*args).items()}


def measurements(args, frameworks: list[str]) -> list[tuple[str, str, int, Callable[[], dict]]]:
    """(model, variant, ranks, measure) for every cell; measure() -> {variant: (samples/s,
    {"mfu": ..., "eval": ...} or {})}."""
    cells = []
    for model_name in args.models.split(","):
        for framework in frameworks:
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
            strategies = args.strategies.split(",") if framework == "torch" else ["mwms"]
            tf_ranks = [int(n) for n in args.tf_ranks.split(",")] if args.tf_ranks else None
            for strategy, compiled, pipeline in itertools.product(
                strategies, args.compile.split(","), args.pipelines.split(",")
            ):
                default = 1 if strategy == "single" else args.nproc
                for ranks in tf_ranks if framework == "tf" and tf_ranks else [default]:
                    flag = COMPILE_KEY[framework] + (
                        "=true" if compiled == "compiled" else "=false"
                    )
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
                        extra=(*args.set, flag),
                    )
                    cells.append(
                        (
                            model_name,
                            label,
                            ranks,
                            lambda measure=measure, label=label: {label: measure()},
                        )
                    )
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m common.tools.bench", description=__doc__)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--frameworks", default="torch,tf")
    parser.add_argument("--strategies", default="single,ddp,fsdp2,fsdp1", help="torch strategies")
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
    frameworks = args.frameworks.split(",")
    unknown = sorted(set(frameworks) - set(TRAIN_MODULE))
    if unknown:
        parser.error(f"--frameworks: unknown {unknown}; choose from torch,tf")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if not set(args.compile.split(",")) <= {"eager", "compiled"}:
        parser.error("--compile takes eager, compiled or eager,compiled")
    print(
        f"{args.train_limit} samples, batch {BATCH} (global), {args.nproc} ranks for "
        f"ddp/fsdp/tf, {args.repeats} interleaved repeats",
        flush=True,
    )
    cells = measurements(args, frameworks)
    found: dict[tuple[str, str], list[float]] = {}
    mfus: dict[tuple[str, str, str], list[float]] = {}
    ranks_of: dict[tuple[str, str], int] = {}
    for repeat in range(args.repeats):  # every cell once per round: drift hits all alike
        for model_name, _, ranks, measure in cells:
            for variant, (speed, utilization) in measure().items():
                found.setdefault((model_name, variant), []).append(speed)
                for kind, value in utilization.items():
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
        "summed GEMM peak, common.core.peak)"
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
