"""The scalars TensorBoard shows of the records, one mapping for the live writer
(`common.core.run.live_tensorboard`) and for compare --tensorboard
(`common.report.render.tensorboard`): per step (x: global step) the step's loss; per epoch (x:
epoch) losses, accuracy, throughput, MFU, times, memory of the largest rank, the bytes a rank
sends per step, and the learning rate."""

from __future__ import annotations

from collections.abc import Callable

from common.core.records.records import Epoch

MIB = 1024 * 1024
STEP_TAG = "loss/train_step"
EPOCH_TAGS: dict[str, Callable[[Epoch], float | None]] = {
    "loss/train": lambda e: e.train_loss,
    "loss/val": lambda e: e.val_loss,
    "accuracy/val": lambda e: e.val_accuracy,
    "throughput/samples_per_s": lambda e: e.samples_per_s,
    "throughput/mfu": lambda e: e.mfu,
    "time/train_epoch_s": lambda e: e.train_time_s,
    "time/eval_s": lambda e: e.eval_time_s,
    "memory/peak_mib": lambda e: max(m.peak_bytes for m in e.memory) / MIB,
    "memory/state_mib": lambda e: max(m.state_bytes for m in e.memory) / MIB,
    "traffic/sent_mb_per_step": lambda e: (
        sum(t.wire_bytes for t in e.traffic if t.phase == "train") / 1e6 if e.traffic else None
    ),
    "lr": lambda e: e.lr,
}


def epoch_scalars(record: Epoch) -> dict[str, float]:
    """Every tag that has a value in this epoch record."""
    found = {tag: value(record) for tag, value in EPOCH_TAGS.items()}
    return {tag: float(value) for tag, value in found.items() if value is not None}
