"""Where a run's files go and where the run came from (provenance for the run_start record).

Both frameworks call these with their own version strings; nothing here imports them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from common.cluster import ClusterSpec
from common.config import Config
from common.config_io import add_config_arguments, config_hash, save_config, to_dict
from common.metrics import SCHEMA_VERSION, console_line, percentiles, time_to_target

REPO_ROOT = Path(__file__).resolve().parent.parent


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


def run_name(cfg: Config, framework: str, strategy: str, cluster: ClusterSpec) -> str:
    """output.run_name, else <framework>-<strategy>-<model>-w<world>-<launch id>.

    Every rank must reach the same name; the launch id (SLURM job, launcher run id) is shared by
    all ranks. Without one (a bare torchrun) the time is used, which only the chief may rely on:
    the frameworks then broadcast the chief's name.
    """
    if cfg.output.run_name:
        return cfg.output.run_name
    stamp = cluster.launch_id or time.strftime("%Y%m%d-%H%M%S")
    return f"{framework}-{strategy}-{cfg.model.name}-w{cluster.world_size}-{stamp}"


def prepare_run_dir(cfg: Config, name: str, is_chief: bool) -> Path:
    """The run folder; the chief creates it and writes the resolved config into it."""
    run_dir = Path(cfg.output.dir) / name
    if is_chief:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir)
    return run_dir


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
        "dataset": "mnist",
        "precision": precision,
        "world_size": cluster.world_size,
        "global_batch_size": cfg.train.global_batch_size(cluster.world_size),
        "launcher": cluster.launcher,
        "hosts": list(cluster.hosts) or [socket.gethostname()],
        "device_type": device_type,
        "devices": devices,
        "config": to_dict(cfg),
        "config_hash": config_hash(cfg),
        "git_commit": git_commit(),
        "seed": cfg.train.seed,
    }


def run_end_record(
    cfg: Config,
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


# ---- what both training programs share ---------------------------------------------------------


class Aborted(Exception):
    """SIGTERM or SIGINT arrived (a launcher stopping its ranks, SLURM preemption), or
    --stop-after-epoch was reached."""


class Preempted(Aborted):
    """SIGUSR1 (SLURM's warning before the time limit) arrived on some rank: the run
    checkpointed at the end of the epoch and stops with PREEMPTED_EXIT, to be requeued."""


# The exit status of a preempted run: "try again later" (EX_TEMPFAIL). slurm/run_slurm.sh
# requeues the job when its step ends with it.
PREEMPTED_EXIT = 75
_preemption = {"requested": False}


def _abort(signum: int, frame) -> None:
    raise Aborted(f"stopped by signal {signal.Signals(signum).name}")


def _request_preemption(signum: int, frame) -> None:
    _preemption["requested"] = True


def install_signal_handlers() -> None:
    """SIGTERM and SIGINT raise `Aborted` in the training loop, so the run can write its run_end
    record before it leaves. SIGUSR1 only asks for a checkpoint and a stop at the end of the
    current epoch (`preemption_requested`), which every rank must agree on."""
    signal.signal(signal.SIGTERM, _abort)
    signal.signal(signal.SIGINT, _abort)
    signal.signal(signal.SIGUSR1, _request_preemption)


def preemption_requested() -> bool:
    """Whether SIGUSR1 reached this process; reduce it over the ranks before acting on it."""
    return _preemption["requested"]


def parse_train_args(prog: str, description: str | None, argv: list[str] | None):
    """The command line of `torch_impl.train` and `tf_impl.train` (the same on both sides)."""
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
    return parser.parse_args(argv)


def epoch_record(
    epoch: int,
    trained: dict,
    evaluated: tuple[float, float, float],
    global_batch: int,
    clock: str,
    elapsed_s: float,
    memory: list[dict],
) -> dict:
    """The epoch record from one epoch's training summary (`loss`, `time`, `step_times`, `lr`,
    `steps`) and its evaluation (val loss, val accuracy, eval seconds)."""
    val_loss, val_accuracy, eval_time = evaluated
    p50, p90 = percentiles(trained["step_times"], [50, 90])
    samples = trained["steps"] * global_batch
    return {
        "record": "epoch", "time": utc_now(), "epoch": epoch,
        "train_loss": trained["loss"], "val_loss": val_loss, "val_accuracy": val_accuracy,
        "lr": trained["lr"], "steps": trained["steps"], "samples": samples,
        "train_time_s": trained["time"], "train_clock": clock,
        "eval_time_s": eval_time, "samples_per_s": samples / trained["time"],
        "step_time_p50_s": p50, "step_time_p90_s": p90,
        "elapsed_s": elapsed_s, "memory": memory,
    }  # fmt: skip


def execute(cfg: Config, args, start, train, describe_failure) -> tuple[str, int]:
    """Run one training program's body the same way on both sides: signal handlers, then
    `start() -> (run_dir, writer or None)` and `train(run_dir, state)`; every way out
    (success, --stop-after-epoch, preemption, a signal, a failure described by
    `describe_failure(exception)`) ends with a run_end record from the chief.
    Returns (status, exit code); the caller decides how to leave its process."""
    install_signal_handlers()
    state: dict = {"epochs": []}
    status, error, code = "success", None, 0
    started = time.perf_counter()
    try:
        run_dir, state["writer"] = start()
        train(run_dir, state)
    except Preempted as stop:
        status, error, code = "aborted", str(stop), PREEMPTED_EXIT
    except Aborted as stop:
        status, error, code = "aborted", str(stop), 0 if args.stop_after_epoch else 143
    except Exception as failure:  # a dead or hung peer surfaces here as a collective error
        status, code = "failed", 1
        error = describe_failure(failure)
        print(f"error: {error}", file=sys.stderr)
        traceback.print_exc()
    writer = state.get("writer")
    if writer:
        end = run_end_record(cfg, status, state["epochs"], time.perf_counter() - started, error)
        print(console_line(writer.write(end)), flush=True)
        writer.close()
    sys.stdout.flush()
    sys.stderr.flush()
    return status, code
