"""One measurement of the benchmark (`common.tools.bench`): a framework's baselines in a process
of their own, a real launch of its training program, or what a progress line costs."""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common.core.config.cli import check_socket
from common.core.records import metrics
from common.core.records.records import METRICS_FILENAME, Epoch
from common.core.train.progress import TERMINAL_EVERY_S, Progress
from common.data import mnist
from common.models import zoo
from common.report.harness_ratio import PAIRED
from common.tools import programs
from common.tools.paired_launch import in_turn

BATCH = 64
# Epochs (plain loops: passes) timed after the first, each cell's figure their median: a small
# model's epoch can last a fraction of a second, which one slow spell of a busy host moves a
# lot. A one-process launch takes its epochs in turn with its plain loop's passes, so a round's
# ratio is the median of TIMED pairs, each a fraction of a second apart.
TIMED = 5
TIMEOUT_S = 1800
TAIL = 2000  # characters of a failed program's output that are shown


def _tails(done: subprocess.CompletedProcess[str]) -> str:
    """The end of a failed program's standard output and of its standard error: a launcher
    writes which rank failed to stderr, a rank's traceback goes to the output it relays."""
    parts = []
    for name, text in (("stdout", done.stdout), ("stderr", done.stderr)):
        if text and text.strip():
            parts.append(f"\n--- end of its {name} ---\n{text[-TAIL:]}")
    return "".join(parts) or " (it printed nothing)"


def in_tree(root: Path | None) -> dict[str, Any]:
    """subprocess.run's arguments that run a program of the suite's tree at `root` (None: this
    one): its folder first on the path, and this tree's MNIST."""
    if root is None:
        return {}
    # A relative $MNIST_DIR (the Makefile exports data/mnist) names this tree's folder.
    data = Path(os.environ.get("MNIST_DIR") or mnist.DEFAULT_DIR).resolve()
    env = {**os.environ, "PYTHONPATH": str(root), "MNIST_DIR": str(data)}
    return {"cwd": root, "env": env}


def baseline_arguments(
    prog: str, description: str | None, argv: list[str] | None
) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The command line of both frameworks' baselines (`torch_impl.bench`, `tf_impl.bench`),
    parsed and checked: (the parser, for errors found later, such as the device; the args)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--model", default="mlp", choices=sorted(zoo.MODELS))
    parser.add_argument("--train-limit", type=int, default=6400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument(
        "--timed", type=int, default=1, help="the plain loop's passes timed after its first"
    )
    parser.add_argument(
        "--paired", action="store_true", help=f"also the {PAIRED!r} row (paired_steps)"
    )
    parser.add_argument(
        "--plain-only",
        action="store_true",
        help="the plain loop alone (the bench's --floor measures it again after the launches)",
    )
    parser.add_argument(
        "--in-turn",
        type=int,
        metavar="FD",
        help="take each pass in turn with a launched run's epochs over the socket FD, this "
        "loop first (common.core.run.turns; the bench passes it, with --plain-only)",
    )
    args = parser.parse_args(argv)
    if args.in_turn is not None:
        if not args.plain_only or args.repeats != 1:
            parser.error("--in-turn: one plain loop alone, beside the run; add --plain-only")
        try:
            check_socket(args.in_turn)
        except ValueError as error:
            parser.error(f"--in-turn {args.in_turn}: {error}; only the bench passes it")
    if args.timed < 1:
        parser.error(f"--timed {args.timed}: time at least one pass after the first")
    if args.paired and args.plain_only:
        parser.error("--paired and --plain-only: the paired steps are not the plain loop alone")
    return parser, args


def baselines(
    framework: str,
    model_name: str,
    limit: int,
    timed: int = TIMED,
    device: str = "auto",
    root: Path | None = None,
    plain_only: bool = False,
) -> dict[str, tuple[float, dict[str, float | None]]]:
    """{"<framework> <baseline name>": (samples/s, {"step_s": median step seconds, where the
    baseline times its steps, "paired": plain step / the suite's, for the suite's step taken in
    turn with the plain loop's})} from the framework's baseline program (of the tree at `root`,
    None: this one; only this one's is asked for the paired steps, which an older tree lacks),
    its plain loop's figure the median of `timed` passes after the first. A tree older than
    `--timed` times one pass after each of `timed` fresh starts (`--repeats`) instead.
    `plain_only`: the plain loop alone (this tree only)."""
    command = [
        *_baseline_command(framework, model_name, limit, device),
        *(["--plain-only"] if plain_only else ["--paired"] if root is None else []),
    ]
    ran = functools.partial(
        subprocess.run, capture_output=True, text=True, timeout=TIMEOUT_S, **in_tree(root)
    )
    done = ran([*command, "--repeats", "1", "--timed", str(timed)])
    if done.returncode == 2 and "unrecognized arguments: --timed" in done.stderr:
        done = ran([*command, "--repeats", str(timed)])
    if done.returncode != 0:
        raise RuntimeError(f"{framework} baselines failed (exit {done.returncode}):{_tails(done)}")
    said = json.loads(done.stdout.strip().splitlines()[-1])
    # an --against tree's baselines may not time their steps
    steps, paired = said.get("step_s", {}), said.get("paired", {})
    return {
        f"{framework} {name}": (
            speed,
            {"step_s": steps.get(name), "paired": paired.get(name)} if name in steps else {},
        )
        for name, speed in said["samples_per_s"].items()
    }


def _baseline_command(framework: str, model_name: str, limit: int, device: str) -> list[str]:
    """The framework's baselines program (`<framework>_impl.bench`) on a cell's data."""
    return [
        sys.executable,
        "-m",
        programs.get(framework).bench_module,
        "--model",
        model_name,
        "--train-limit",
        str(limit),
        "--batch",
        str(BATCH),
        "--device",
        device,
    ]


def cell_settings(model_name: str, pipeline: str, limit: int, batch: int) -> list[str]:
    """The config overrides of a cell's training, launched or paired with a plain loop's steps
    (torch_impl.bench, tf_impl.bench)."""
    return [
        f"model.name={model_name}",
        "optim.name=adam",
        f"data.pipeline={pipeline}",
        f"data.train_limit={limit}",
        f"train.batch_size={batch}",
        "train.batch_mode=global",
    ]


def launched(
    framework: str,
    strategy: str,
    *,
    model_name: str,
    pipeline: str,
    nproc: int,
    limit: int,
    timed: int = TIMED,
    device: str = "auto",
    extra: tuple[str, ...] = (),
    root: Path | None = None,
) -> tuple[float, dict[str, float | None]]:
    """(samples/s, {"mfu": training MFU, "eval": forward-only MFU of the evaluation, "step_s":
    median step seconds, "timed_epochs": `timed`}) of a real launch of the framework's training
    program, each the median over the `timed` epochs after the first (which holds warm-up,
    tracing and compiling); `extra`: more `--set` overrides (torch.* ones only reach torch, tf.*
    only TensorFlow); `root`: the suite's tree whose programs run (None: this one)."""
    with tempfile.TemporaryDirectory() as out:
        overrides = [
            *cell_settings(model_name, pipeline, limit, BATCH),
            f"train.epochs={1 + timed}",
            f"output.dir={out}",
            "output.run_name=bench",
            f"dist.device={device}",
        ]
        side = programs.get(framework)
        overrides += side.own([f"{framework}.strategy={strategy}", *extra])
        command = side.train_command(overrides)
        if nproc > 1:
            command = [*programs.local_launch(nproc), *command]
        beside: dict[str, float] = {}
        if nproc == 1 and root is None:  # an older tree's programs lack --in-turn
            loop = [*_baseline_command(framework, model_name, limit, device), "--timed", str(timed)]
            done, loop_done = in_turn(command, loop, TIMEOUT_S)
            if loop_done.returncode != 0:
                raise RuntimeError(
                    f"{framework} plain loop beside {strategy}/{pipeline} failed (exit "
                    f"{loop_done.returncode}):{_tails(loop_done)}"
                )
            said = json.loads(loop_done.stdout.strip().splitlines()[-1])
            beside = {
                "loop_speed": said["samples_per_s"]["plain loop"],
                "loop_step_s": said["step_s"]["plain loop"],
            }
        else:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=TIMEOUT_S, **in_tree(root)
            )
        if done.returncode != 0:
            raise RuntimeError(
                f"{framework} {strategy}/{pipeline} failed (exit {done.returncode}):{_tails(done)}"
            )
        records = metrics.read_records(Path(out) / "bench" / METRICS_FILENAME)
        recorded = [record for record in records if isinstance(record, Epoch)]
        epochs = recorded[1:]
        if not epochs:
            raise RuntimeError(
                f"{framework} {strategy}/{pipeline} recorded {len(recorded)} epoch(s) of "
                f"{1 + timed}: nothing after its first to time"
            )
        speed, figures = _median_epoch(epochs)
        return speed, {**figures, **beside, "timed_epochs": float(len(epochs))}


def _median_epoch(epochs: list[Epoch]) -> tuple[float, dict[str, float | None]]:
    """(samples/s, {"mfu", "eval", "step_s"}), each the median over `epochs`."""
    # Evaluation is a forward pass (a third of a training sample's FLOPs) over the whole
    # test set (10,000 samples: no data.test_limit here).
    evals = [
        (epoch.flops_per_sample or 0)
        / 3
        * mnist.TEST_SAMPLES
        / epoch.eval_time_s
        / epoch.peak_flops
        for epoch in epochs
        if epoch.peak_flops
    ]
    mfus = [epoch.mfu for epoch in epochs if epoch.mfu is not None]
    return statistics.median(epoch.samples_per_s for epoch in epochs), {
        "mfu": statistics.median(mfus) if mfus else None,
        "eval": statistics.median(evals) if evals else None,
        "step_s": statistics.median(epoch.step_time_p50_s for epoch in epochs),
    }


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
