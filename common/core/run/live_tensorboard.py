"""Live TensorBoard scalars of a run (output.tensorboard=true): the chief writes each record's
scalars (`common.core.records.scalars`) as the record is written, into event files in the run
folder itself, so that `tensorboard --logdir results/` shows every run, of both frameworks, under
its folder's name while it trains. Written with tensorboardX (the 'tensorboard' extra)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from common.core.records.records import Epoch, Record, Step
from common.core.records.scalars import STEP_TAG, epoch_scalars

FLUSH_S = 5  # how often the event file reaches the disk, at the latest


def available() -> bool:
    """Whether tensorboardX can be imported (checked before a run starts)."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        return False
    return True


class Board:
    """The run's event file, written as its records are."""

    def __init__(self, run_dir: Path) -> None:
        from tensorboardX import SummaryWriter

        self.writer: Any = SummaryWriter(logdir=str(run_dir), flush_secs=FLUSH_S)

    def write(self, record: Record) -> None:
        if isinstance(record, Step):
            self.writer.add_scalar(STEP_TAG, record.loss, record.step)
        elif isinstance(record, Epoch):
            stamp = dt.datetime.fromisoformat(record.time).timestamp()
            for tag, value in epoch_scalars(record).items():
                self.writer.add_scalar(tag, value, record.epoch, stamp)
            self.writer.flush()  # an epoch's points are there as soon as its line is

    def close(self) -> None:
        self.writer.close()
