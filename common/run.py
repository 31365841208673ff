"""Where a run's files go and where the run came from (provenance for the run_start record).

Both frameworks call these with their own version strings; nothing here imports them.
"""

from __future__ import annotations

import datetime as dt
import platform
import socket
import subprocess
import time
from pathlib import Path

import numpy as np

from common.cluster import ClusterSpec
from common.config import Config
from common.config_io import config_hash, save_config, to_dict
from common.metrics import SCHEMA_VERSION, time_to_target

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
