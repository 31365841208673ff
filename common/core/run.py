"""A run's identity, options and records: its name and folder, where it came from (the
run_start record), how each epoch went (epoch), and how it ended (run_end).

`common.core.loop` calls these for both frameworks; nothing here imports either of them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.core import peak
from common.core.config import Config
from common.core.config_io import add_config_arguments, config_hash, to_dict
from common.core.metrics import SCHEMA_VERSION, percentiles, time_to_target
from common.data import mnist
from common.launch.cluster import ClusterSpec, unique_stamp
from common.models import weights

REPO_ROOT = Path(__file__).resolve().parents[2]


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def git_commit(repo: Path = REPO_ROOT) -> str | None:
    """HEAD of the suite's checkout, with '-dirty' when tracked files changed; None outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def check_launch(cfg: Config, world_size: int) -> None:
    """Everything that can be checked before a run folder or a process group exists, on every
    rank alike: the batch against the world and the data, and the data files' checksums.
    Raises ValueError naming the fix."""
    global_batch = cfg.train.global_batch_size(world_size)
    samples = min(cfg.data.train_limit or mnist.TRAIN_SAMPLES, mnist.TRAIN_SAMPLES)
    if samples < global_batch:
        raise ValueError(
            f"data.train_limit={cfg.data.train_limit} leaves {samples} training samples, fewer "
            f"than one global batch of {global_batch}; raise data.train_limit or lower "
            "train.batch_size"
        )
    if cfg.data.name == "synthetic":  # no files: generated in memory
        return
    try:
        mnist.check_files(cfg.data.dir)
    except mnist.DataError as error:
        raise ValueError(str(error)) from None


def run_name(cfg: Config, framework: str, strategy: str, cluster: ClusterSpec) -> str:
    """output.run_name, else <framework>-<strategy>-<model>-w<world>-<launch id>.

    Every rank must reach the same name; the launch id (SLURM job, launcher run id) is shared by
    all ranks. Without one (a bare torchrun) a unique stamp is drawn, which only the chief's
    counts: `common.core.session.start_run` broadcasts the chief's name.
    """
    if cfg.output.run_name:
        return cfg.output.run_name
    stamp = cluster.launch_id or unique_stamp()
    return f"{framework}-{strategy}-{cfg.model.name}-w{cluster.world_size}-{stamp}"


def run_start_record(
    cfg: Config,
    cluster: ClusterSpec,
    *,
    run_id: str,
    framework: str,
    framework_version: str,
    strategy: str,
    device_type: str,
    devices: list[str],
    versions: dict[str, str],
    precision: str,
    numerics: dict,
    hosts: list[str] | None = None,
    threads: dict,
) -> dict:
    return {
        "record": "run_start",
        "schema_version": SCHEMA_VERSION,
        "time": utc_now(),
        "run_id": run_id,
        "framework": framework,
        "framework_version": framework_version,
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            **versions,
        },
        "strategy": strategy,
        "model": cfg.model.name,
        "model_params": weights.parameter_count(cfg.model),
        "dataset": cfg.data.name,
        "precision": precision,
        "numerics": numerics,
        "threads": threads,
        "world_size": cluster.world_size,
        "global_batch_size": cfg.train.global_batch_size(cluster.world_size),
        "launcher": cluster.launcher,
        "hosts": hosts or list(cluster.hosts) or [socket.gethostname()],
        "device_type": device_type,
        "devices": devices,
        "config": to_dict(cfg),
        "config_hash": config_hash(cfg),
        "git_commit": git_commit(),
        "seed": cfg.train.seed,
    }


def run_end_record(
    cfg: Config,
    *,
    status: str,
    epochs: list[dict],
    total_time_s: float,
    error: str | None = None,
) -> dict:
    """The closing record, computed from the epoch records written so far."""
    accuracies = [record["val_accuracy"] for record in epochs]
    return {
        "record": "run_end",
        "time": utc_now(),
        "status": status,
        "epochs_completed": len(epochs),
        "total_time_s": total_time_s,
        "final_val_accuracy": accuracies[-1] if accuracies else None,
        "best_val_accuracy": max(accuracies) if accuracies else None,
        "target_accuracy": cfg.train.target_accuracy,
        "time_to_target_s": time_to_target(epochs, cfg.train.target_accuracy),
        "error": error,
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class EpochResult:
    """One epoch's training, as the driver measured it."""

    loss: float
    """Mean training loss over the global batches of the epoch."""
    time_s: float
    """What the train clock read (see the framework's `train_clock`)."""
    step_times: list[float]
    lr: float
    """The learning rate of the epoch's last step."""
    steps: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Evaluation:
    """The whole test set, summed over the ranks."""

    loss: float
    accuracy: float
    time_s: float


def epoch_record(
    *,
    epoch: int,
    trained: EpochResult,
    evaluated: Evaluation,
    global_batch: int,
    clock: str,
    elapsed_s: float,
    memory: list[dict],
    replicas: dict,
    flops_per_sample: int,
    peak_flops: float,
) -> dict:
    """The epoch record (1-based `epoch`); `clock` says what `train_time_s` covers; `replicas`
    is `common.core.precision.gather_replica_state`'s; `peak_flops` the ranks' summed peak."""
    p50, p90 = percentiles(trained.step_times, [50, 90])
    samples = trained.steps * global_batch
    return {
        "record": "epoch",
        "time": utc_now(),
        "epoch": epoch,
        "train_loss": trained.loss,
        "val_loss": evaluated.loss,
        "val_accuracy": evaluated.accuracy,
        "lr": trained.lr,
        "steps": trained.steps,
        "samples": samples,
        "train_time_s": trained.time_s,
        "train_clock": clock,
        "eval_time_s": evaluated.time_s,
        "samples_per_s": samples / trained.time_s,
        "step_time_p50_s": p50,
        "step_time_p90_s": p90,
        "elapsed_s": elapsed_s,
        "memory": memory,
        **replicas,
        "first_step_s": trained.step_times[0] if trained.step_times else None,
        "flops_per_sample": flops_per_sample,
        "peak_flops": peak_flops,
        "mfu": peak.mfu(samples / trained.time_s, flops_per_sample, peak_flops),
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    """How this launch relates to the run's earlier launches (the training command line)."""

    resume: bool = False
    """Go on from the run's latest complete checkpoint; fail if there is none."""
    auto_resume: bool = False
    """Go on from the latest complete checkpoint if there is one, else start afresh."""
    stop_after_epoch: int = 0
    """Checkpoint after this epoch and stop (0: never)."""
    progress: bool = True
    """Show live progress inside each epoch (the chief only)."""
    progress_every_s: float | None = None
    """Seconds between progress lines (default: 0.5 on a terminal, 30 in a log file)."""


def answer_help_early(prog: str, description: str | None) -> None:
    """`--help` of a training program without importing its framework first (seconds): call
    it before the framework imports. Prints the help and exits when asked for it."""
    if {"-h", "--help"} & set(sys.argv[1:]):
        parse_train_args(prog, description, ["--help"])


def parse_train_args(
    prog: str, description: str | None, argv: list[str] | None
) -> tuple[argparse.Namespace, RunOptions]:
    """The command line of `torch_impl.train` and `tf_impl.train` (the same on both sides):
    the config arguments for `config_io.config_from_args`, and the run options."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_config_arguments(parser)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on from the run's latest complete checkpoint (the run folder is "
        "output.dir/output.run_name)",
    )
    parser.add_argument(
        "--stop-after-epoch",
        type=int,
        default=0,
        metavar="N",
        help="checkpoint after epoch N and stop (status aborted)",
    )
    parser.add_argument(
        "--auto-resume",
        action="store_true",
        help="like --resume when the run has a complete checkpoint, else start afresh "
        "(what a requeued SLURM job wants)",
    )
    parser.add_argument("--quiet", action="store_true", help="no live progress inside the epochs")
    parser.add_argument(
        "--progress-every",
        type=float,
        metavar="S",
        help="seconds between progress lines (default 0.5 on a terminal, 30 in a log)",
    )
    args = parser.parse_args(argv)
    if args.progress_every is not None and not args.progress_every >= 0:
        parser.error(f"--progress-every must be >= 0 seconds, got {args.progress_every}")
    if args.stop_after_epoch < 0:
        parser.error(
            f"--stop-after-epoch must be 0 (never) or an epoch >= 1, got {args.stop_after_epoch}"
        )
    options = RunOptions(
        resume=args.resume,
        auto_resume=args.auto_resume,
        stop_after_epoch=args.stop_after_epoch,
        progress=not args.quiet,
        progress_every_s=args.progress_every,
    )
    return args, options
