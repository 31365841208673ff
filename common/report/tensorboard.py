"""compare.py --tensorboard DIR: every run's curves as TensorBoard event files, one folder per
run, named by run, so that `tensorboard --logdir DIR` shows both frameworks side by side.

Written with tensorboardX (the 'tensorboard' extra), which needs neither framework. Tags:
loss/train_step (x: global step); per epoch (x: epoch): loss/train, loss/val, accuracy/val,
throughput/samples_per_s, time/train_epoch_s, time/eval_s, memory/peak_mib (largest rank),
memory/state_mib (largest rank), lr. Each epoch point carries the wall-clock time of its
record.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path

from common.core.records.records import Epoch
from common.report.runs import MIB, RecordedRun

EPOCH_TAGS: dict[str, Callable[[Epoch], float]] = {
    "loss/train": lambda e: e.train_loss,
    "loss/val": lambda e: e.val_loss,
    "accuracy/val": lambda e: e.val_accuracy,
    "throughput/samples_per_s": lambda e: e.samples_per_s,
    "time/train_epoch_s": lambda e: e.train_time_s,
    "time/eval_s": lambda e: e.eval_time_s,
    "memory/peak_mib": lambda e: max(m.peak_bytes for m in e.memory) / MIB,
    "memory/state_mib": lambda e: max(m.state_bytes for m in e.memory) / MIB,
    "lr": lambda e: e.lr,
}


def _walltime(record: Epoch) -> float | None:
    try:
        return dt.datetime.fromisoformat(record.time).timestamp()
    except ValueError:
        return None


def folder_name(run: RecordedRun) -> str:
    """The run's name as a folder: framework, strategy and workers, then its run_id."""
    start = run.start
    name = f"{start.framework}-{start.strategy}-w{start.world_size}-{start.run_id}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def write_events(runs: list[RecordedRun], folder: Path) -> list[Path]:
    """One event folder per run under `folder`; returns them."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise RuntimeError(
            "--tensorboard needs tensorboardX: pip install tensorboardX (the 'tensorboard' extra)"
        ) from None
    written = []
    for run in runs:
        logdir = folder / folder_name(run)
        with SummaryWriter(logdir=str(logdir)) as writer:
            for step in run.steps:
                writer.add_scalar("loss/train_step", step.loss, step.step)  # steps carry no time
            for epoch in run.epochs:
                for tag, value in EPOCH_TAGS.items():
                    writer.add_scalar(tag, value(epoch), epoch.epoch, _walltime(epoch))
            start = run.start
            writer.add_text(
                "run",
                f"{start.framework} {start.framework_version} {start.strategy} "
                f"x{start.world_size} on {start.device_type}, config "
                f"{start.config_hash}, {run.path}",
            )
        written.append(logdir)
    return written
