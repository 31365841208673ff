"""compare.py --tensorboard DIR: every run's curves as TensorBoard event files, one folder per
run, named by run, so that `tensorboard --logdir DIR` shows both frameworks side by side.

Written with tensorboardX (the 'tensorboard' extra), which needs neither framework; the tags are
`common.core.records.scalars`', the same as a live run writes (output.tensorboard). Each epoch
point carries the wall-clock time of its record.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from common.core.records.records import Epoch
from common.core.records.scalars import STEP_TAG, epoch_scalars
from common.report.runs import RecordedRun


def _walltime(record: Epoch) -> float | None:
    try:
        return dt.datetime.fromisoformat(record.time).timestamp()
    except ValueError:
        return None


def folder_name(run: RecordedRun) -> str:
    """The run's name as a folder: framework, strategy and workers, then its run_id (alone
    when it says them already, as the runs' default names and the demo's do)."""
    start = run.start
    prefix = f"{start.framework}-{start.strategy}-"
    name = (
        start.run_id
        if start.run_id.startswith(prefix)
        else f"{prefix}w{start.world_size}-{start.run_id}"
    )
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
                writer.add_scalar(STEP_TAG, step.loss, step.step)  # steps carry no time
            for epoch in run.epochs:
                for tag, value in epoch_scalars(epoch).items():
                    writer.add_scalar(tag, value, epoch.epoch, _walltime(epoch))
            start = run.start
            writer.add_text(
                "run",
                f"{start.framework} {start.framework_version} {start.strategy} "
                f"x{start.world_size} on {start.device_type}, config "
                f"{start.config_hash}, {run.path}",
            )
        written.append(logdir)
    return written
