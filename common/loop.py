"""The epoch loop of both frameworks: one driver here, one small contract per framework.

The driver owns, once, everything that does not depend on the framework: the run's start (a
name all ranks agree on, its folder, the run_start record), resume from the latest complete
checkpoint, the learning-rate schedule, step timing and step records, the epoch record and its
console line, checkpoint cadence, the preemption vote, the stop rules, and a run_end record on
every way out. A framework hands it one `Trainer` (`torch_impl.train.TorchTrainer`,
`tf_impl.train.TfTrainer`): build, step, evaluate, measure memory, checkpoint, export, and the
few collectives the driver needs.
"""

from __future__ import annotations

import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import SupportsFloat

import numpy as np

from common import collectives, memory, run
from common.config import Config
from common.metrics import METRICS_FILENAME, MetricsWriter, console_line
from common.optim import learning_rate
from common.trainer import Trainer


class Aborted(Exception):
    """SIGTERM or SIGINT arrived (a launcher stopping its ranks, SLURM preemption), or
    --stop-after-epoch was reached."""


class Preempted(Aborted):
    """SIGUSR1 (SLURM's warning before the time limit) arrived on some rank: the run
    checkpointed at the end of the epoch and stops with PREEMPTED_EXIT, to be requeued."""


# The exit status of a preempted run: "try again later" (EX_TEMPFAIL). slurm/run_slurm.sh
# requeues the job when its step ends with it.
PREEMPTED_EXIT = 75


class Preemption:
    """Whether SIGUSR1 reached this process. One per run; the ranks vote on it at the end of
    every epoch, since it may reach only some of them."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        """SIGUSR1 asks for a checkpoint and a stop at the end of the epoch; SIGTERM and SIGINT
        raise `Aborted` at once, so the run still writes its run_end record."""
        signal.signal(signal.SIGUSR1, self._request)
        signal.signal(signal.SIGTERM, _abort)
        signal.signal(signal.SIGINT, _abort)

    def _request(self, signum: int, frame) -> None:
        self.requested = True


def _abort(signum: int, frame) -> None:
    raise Aborted(f"stopped by signal {signal.Signals(signum).name}")


@dataclass(kw_only=True)
class Run:
    """One run as this process sees it."""

    run_id: str
    run_dir: Path
    writer: MetricsWriter | None
    """The metrics file, on the chief; None on every other rank."""
    epochs: list[dict] = field(default_factory=list)
    """The epoch records so far, including those of earlier launches of a resumed run."""

    def write(self, record: dict, *, echo: bool = True) -> None:
        if self.writer:
            self.writer.write(record)
            if echo:
                print(console_line(record), flush=True)


def _exchange(trainer: Trainer) -> dict:
    """The keyword arguments of `common.collectives` for this trainer's ranks."""
    spec = trainer.spec
    return {
        "rank": spec.rank,
        "world_size": spec.world_size,
        "all_reduce_sum": trainer.all_reduce_sum,
    }


def start_run(cfg: Config, trainer: Trainer) -> Run:
    """Agree on the run's name, make its folder, write run_start (collective)."""
    spec = trainer.spec
    exchange = _exchange(trainer)
    proposed = run.run_name(cfg, trainer.framework, trainer.strategy, spec)
    name = collectives.broadcast_text(proposed, **exchange)
    run_dir = run.prepare_run_dir(cfg, name, spec.is_chief)
    where = f"{spec.node}:{trainer.device_type}:{trainer.device_name}"
    devices = collectives.gather_texts(where, **exchange)
    writer = MetricsWriter(run_dir / METRICS_FILENAME) if spec.is_chief else None
    started = Run(run_id=name, run_dir=run_dir, writer=writer)
    record = run.run_start_record(
        cfg,
        spec,
        run_id=name,
        framework=trainer.framework,
        framework_version=trainer.framework_version,
        strategy=trainer.strategy,
        device_type=trainer.device_type,
        devices=devices,
        versions=trainer.versions(),
        precision=trainer.precision,
    )
    started.write(record)
    return started


def train_epoch(cfg: Config, trainer: Trainer, epoch: int, current: Run) -> run.EpochResult:
    """Train one epoch (0-based) under the train clock; the clock pauses for step records."""
    steps = trainer.steps_per_epoch
    every = cfg.train.log_every_steps
    losses: list[SupportsFloat] = []
    step_times: list[float] = []
    paused = 0.0
    lr = learning_rate(cfg.optim, epoch, 0, steps, cfg.train.epochs)
    trainer.barrier()
    trainer.synchronize()
    start = last = time.perf_counter()
    for step, batch in enumerate(trainer.train_batches(epoch)):
        lr = learning_rate(cfg.optim, epoch, step, steps, cfg.train.epochs)
        loss = trainer.train_step(batch, lr)
        trainer.synchronize()
        now = time.perf_counter()
        step_times.append(now - last)
        losses.append(loss)
        global_step = epoch * steps + step + 1
        if every and global_step % every == 0:
            step_loss = trainer.all_reduce_sum(np.array([float(loss)]))[0]
            step_record = {
                "record": "step",
                "epoch": epoch + 1,
                "step": global_step,
                "loss": float(step_loss),
                "lr": lr,
            }
            current.write(step_record, echo=False)
            paused += time.perf_counter() - now
        last = time.perf_counter()
    train_time = time.perf_counter() - start - paused
    local = 0.0
    for loss in losses:  # in step order, in float64: the same sum on every launch
        local += float(loss)
    total = trainer.all_reduce_sum(np.array([local]))[0]
    return run.EpochResult(
        loss=float(total) / steps, time_s=train_time, step_times=step_times, lr=lr, steps=steps
    )


def _resume(trainer: Trainer, options: run.RunOptions, current: Run) -> tuple[int, float]:
    """(first epoch to train, seconds the earlier launches took) after restoring the latest
    complete checkpoint when the options ask for it."""
    latest = trainer.latest_checkpoint(current.run_dir)
    if options.resume and latest is None:
        root = trainer.checkpoint_root(current.run_dir)
        raise RuntimeError(f"--resume: no complete checkpoint under {root}")
    if latest is None or not (options.resume or options.auto_resume):
        return 0, 0.0
    extras = trainer.load_checkpoint(latest)
    current.epochs[:] = extras["epoch_records"]
    return extras["epoch"], extras["elapsed_s"]


def train_epochs(
    cfg: Config,
    trainer: Trainer,
    *,
    options: run.RunOptions,
    current: Run,
    preemption: Preemption,
) -> None:
    """Build, resume, then train, evaluate, record and checkpoint epoch by epoch; export."""
    trainer.build()
    start_epoch, elapsed_before = _resume(trainer, options, current)
    exchange = _exchange(trainer)
    loop_start = time.perf_counter()
    for epoch in range(start_epoch, cfg.train.epochs):
        done = epoch + 1
        trainer.reset_peak_memory()
        trained = train_epoch(cfg, trainer, epoch, current)
        trainer.synchronize()
        eval_start = time.perf_counter()
        val_loss, val_accuracy = trainer.evaluate()
        evaluated = run.Evaluation(
            loss=val_loss, accuracy=val_accuracy, time_s=time.perf_counter() - eval_start
        )
        record = run.epoch_record(
            epoch=done,
            trained=trained,
            evaluated=evaluated,
            global_batch=trainer.global_batch,
            clock=trainer.train_clock,
            elapsed_s=elapsed_before + time.perf_counter() - loop_start,
            memory=memory.gather_memory(trainer.memory_use(), **exchange),
        )
        current.epochs.append(record)
        current.write(record)
        preempted = trainer.all_reduce_sum(np.array([float(preemption.requested)]))[0] > 0
        stopping = options.stop_after_epoch == done or preempted
        every = cfg.train.checkpoint_every_epochs
        if (every and done % every == 0) or stopping:
            extras = {"elapsed_s": record["elapsed_s"], "epoch_records": current.epochs}
            trainer.save_checkpoint(current.run_dir, done, extras)
        if preempted and done < cfg.train.epochs:
            raise Preempted(f"preempted (SIGUSR1): checkpointed epoch {done}; resume")
        if stopping and done < cfg.train.epochs:
            raise Aborted(f"stopped after epoch {done} (--stop-after-epoch); --resume")
    if cfg.output.save_model:
        trainer.export_model(current.run_dir)
    trainer.leave_together()


def execute(cfg: Config, options: run.RunOptions, trainer: Trainer) -> tuple[str, int]:
    """One training program's body, the same on both sides. Every way out (success,
    --stop-after-epoch, preemption, a signal, a failure) ends with the chief's run_end record.
    Returns (status, exit code); the caller decides how to leave its process."""
    preemption = Preemption()
    preemption.install()
    current: Run | None = None
    status, error, code = "success", None, 0
    started = time.perf_counter()
    try:
        current = start_run(cfg, trainer)
        train_epochs(cfg, trainer, options=options, current=current, preemption=preemption)
    except Preempted as stop:
        status, error, code = "aborted", str(stop), PREEMPTED_EXIT
    except Aborted as stop:
        status, error, code = "aborted", str(stop), 0 if options.stop_after_epoch else 143
    except Exception as failure:  # a dead or hung peer surfaces here as a collective error
        status, code = "failed", 1
        error = trainer.describe_failure(failure)
        print(f"error: {error}", file=sys.stderr)
        traceback.print_exc()
    if current is not None and current.writer:
        end = run.run_end_record(
            cfg,
            status=status,
            epochs=current.epochs,
            total_time_s=time.perf_counter() - started,
            error=error,
        )
        current.write(end)
        current.writer.close()
    sys.stdout.flush()
    sys.stderr.flush()
    return status, code
