"""The human line printed from the same record that is written to the metrics file."""

from __future__ import annotations

from common.core.records.records import Epoch, Record, Resume, RunEnd, RunStart, Step


def console_line(record: Record) -> str:
    if isinstance(record, Epoch):
        peak = max((entry.peak_bytes for entry in record.memory), default=0)
        return (
            f"epoch {record.epoch:>3} | train loss {record.train_loss:.4f} | "
            f"val loss {record.val_loss:.4f} acc {record.val_accuracy:.4f} | "
            f"train {record.train_time_s:.2f}s eval {record.eval_time_s:.2f}s | "
            f"{record.samples_per_s:,.0f} samples/s | peak {peak / 2**20:,.0f} MiB/rank"
        )
    if isinstance(record, Step):
        return f"step {record.step:>6} | loss {record.loss:.4f} | lr {record.lr:.3g}"
    if isinstance(record, RunStart):
        emulated = (
            f"\nwarning: this CPU has no {record.precision} instructions, so "
            f"{record.framework} emulates {record.precision}: many times slower than fp32, and "
            "its timings measure the emulation, not what the precision gives on a GPU"
            if record.precision_emulated
            else ""
        )
        return (
            f"run {record.run_id}: {record.framework} {record.framework_version} "
            f"{record.strategy} x{record.world_size} on {record.device_type}, "
            f"{record.model}, global batch {record.global_batch_size}, "
            f"config {record.config_hash}{emulated}"
        )
    if isinstance(record, Resume):
        where = f"step {record.step}" if record.step else f"epoch {record.epoch}"
        before = record.world_size_before
        size = f", saved by {before} rank(s)" if before is not None else ""
        return f"resume from {record.checkpoint} (after {where}{size})"
    return _end_line(record)


def _end_line(record: RunEnd) -> str:
    target = record.time_to_target_s
    reached = f"{target:.1f}s" if target is not None else "not reached"
    line = (
        f"run {record.status}: {record.epochs_completed} epochs in "
        f"{record.total_time_s:.1f}s, best acc {record.best_val_accuracy}, "
        f"time to {record.target_accuracy:.3f}: {reached}"
    )
    return line + (f" | error: {record.error}" if record.error else "")
