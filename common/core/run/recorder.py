"""What goes into each record, computed once for both frameworks: where a run came from
(`run_start`), how an epoch went (`epoch`), and how a launch ended (`run_end`)."""

from __future__ import annotations

import math
import os
import platform
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from common.core.config.config import Config
from common.core.config.config_io import config_hash, to_dict
from common.core.config.devices import cpu_quota, emulated_on_cpu
from common.core.measure import peak
from common.core.measure.clocks import percentiles
from common.core.measure.cpu_time import Spent
from common.core.measure.replicas import ReplicaState
from common.core.records import provenance
from common.core.records.entries import StepSplit, TrafficEntry
from common.core.records.records import SCHEMA_VERSION, Epoch, MemoryEntry, RunEnd, RunStart, Status
from common.core.train.contract import Trainer
from common.models import weights


def run_start(
    cfg: Config, trainer: Trainer, *, run_id: str, devices: list[str], hosts: list[str]
) -> RunStart:
    """`devices` and `hosts`: every rank's, gathered (a torchrun rank knows only its own)."""
    spec = trainer.spec
    return RunStart(
        schema_version=SCHEMA_VERSION,
        time=provenance.utc_now(),
        run_id=run_id,
        framework=trainer.framework,
        framework_version=trainer.framework_version,
        versions={
            "python": platform.python_version(),
            "numpy": np.__version__,
            **trainer.versions(),
        },
        strategy=trainer.strategy.name,
        model=cfg.model.name,
        model_params=weights.parameter_count(cfg.net()),
        dataset=cfg.data.name,
        precision=trainer.precision,
        precision_emulated=emulated_on_cpu(trainer.precision)
        if trainer.device_type == "cpu"
        else None,
        processor=peak.processor() or None,
        host_cores=os.cpu_count(),
        cpu_quota_cores=cpu_quota(),
        numerics=trainer.numerics(),
        threads=trainer.threads(),
        world_size=spec.world_size,
        global_batch_size=cfg.train.global_batch_size(spec.world_size),
        launcher=spec.launcher,
        hosts=hosts or list(spec.hosts) or [socket.gethostname()],
        device_type=trainer.device_type,
        devices=devices,
        config=to_dict(cfg),
        config_hash=config_hash(cfg),
        git_commit=provenance.git_commit(),
        seed=cfg.train.seed,
    )


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
    step_split: StepSplit | None = None
    """Where a profiled step's time went (the median of those profiled; None: none was)."""
    cpu: Spent | None = None
    """The chief's CPU while the epoch trained (its pauses included)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Evaluation:
    """The whole test set, summed over the ranks."""

    loss: float
    accuracy: float
    time_s: float


def epoch(
    *,
    number: int,
    trained: EpochResult,
    evaluated: Evaluation,
    global_batch: int,
    clock: str,
    elapsed_s: float,
    memory: list[MemoryEntry],
    replicas: ReplicaState,
    flops_per_sample: int,
    peak_flops: float,
    traffic: list[TrafficEntry] | None = None,
    step_split: StepSplit | None = None,
) -> Epoch:
    """The record of epoch `number` (from 1); `clock` says what `train_time_s` covers;
    `peak_flops` is the ranks' summed peak."""
    p50, p90 = percentiles(trained.step_times, [50, 90])
    samples = trained.steps * global_batch
    return Epoch(
        time=provenance.utc_now(),
        epoch=number,
        train_loss=trained.loss,
        val_loss=evaluated.loss,
        val_accuracy=evaluated.accuracy,
        lr=trained.lr,
        steps=trained.steps,
        samples=samples,
        train_time_s=trained.time_s,
        train_clock=clock,
        eval_time_s=evaluated.time_s,
        samples_per_s=samples / trained.time_s,
        step_time_p50_s=p50,
        step_time_p90_s=p90,
        elapsed_s=elapsed_s,
        memory=memory,
        replicas_in_sync=replicas.in_sync,
        loss_scale=replicas.loss_scale,
        skipped_steps=replicas.skipped_steps,
        first_step_s=trained.step_times[0] if trained.step_times else None,
        flops_per_sample=flops_per_sample,
        peak_flops=peak_flops,
        mfu=peak.mfu(samples / trained.time_s, flops_per_sample, peak_flops),
        traffic=traffic,
        step_split=step_split,
        cpu_time_s=trained.cpu.cpu_s if trained.cpu else None,
        quota_throttled=trained.cpu.throttled if trained.cpu else None,
    )


def time_to_target(epochs: Iterable[Epoch], target: float) -> float | None:
    """Run time (elapsed_s) at the end of the first epoch whose val accuracy reached target."""
    for record in epochs:
        if record.val_accuracy >= target:
            return record.elapsed_s
    return None


def diverged_at(epochs: Iterable[Epoch]) -> int | None:
    """The first epoch whose train or val loss is NaN or infinite; None if none is."""
    for record in epochs:
        if not (math.isfinite(record.train_loss) and math.isfinite(record.val_loss)):
            return record.epoch
    return None


def divergence(epochs: list[Epoch]) -> str | None:
    """run_end's error for a diverged run; None for one that did not diverge."""
    at = diverged_at(epochs)
    if at is None:
        return None
    record = next(r for r in epochs if r.epoch == at)
    losses = f"train loss {record.train_loss}, val loss {record.val_loss}"
    return f"the loss diverged at epoch {at} ({losses})"


def run_end(
    cfg: Config, *, status: Status, epochs: list[Epoch], total_time_s: float, error: str | None
) -> RunEnd:
    """The closing record of a launch, computed from the epoch records written so far."""
    accuracies = [record.val_accuracy for record in epochs]
    return RunEnd(
        time=provenance.utc_now(),
        status=status,
        epochs_completed=len(epochs),
        total_time_s=total_time_s,
        final_val_accuracy=accuracies[-1] if accuracies else None,
        best_val_accuracy=max(accuracies) if accuracies else None,
        target_accuracy=cfg.train.target_accuracy,
        time_to_target_s=time_to_target(epochs, cfg.train.target_accuracy),
        error=error,
        diverged_at_epoch=diverged_at(epochs),
    )
