"""One epoch of training, for both frameworks: the steps grouped into calls into the framework
(`train.steps_per_call`), timed by the trainer's step clock with the clock paused for step
records and progress lines, and the epoch's mean loss summed once over the ranks. The epoch's
sample order is drawn before its clock starts; each batch is fetched inside it.
`common.core.train.loop` runs the epochs."""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Iterator
from typing import SupportsFloat

import numpy as np

from common.core.config.config import Config
from common.core.measure import cpu_time
from common.core.measure.traffic import Call
from common.core.records.entries import StepSplit
from common.core.records.records import Step
from common.core.run import recorder
from common.core.run.lifecycle import Run
from common.core.train.contract import Trainer
from common.core.train.mid_epoch import MidEpoch
from common.core.train.optim import learning_rate
from common.core.train.progress import Progress
from common.core.train.tracing import Traces


def train_epoch(
    cfg: Config,
    trainer: Trainer,
    epoch: int,
    run: Run,
    progress: Progress,
    counted: list[Call] | None = None,
    *,
    start_step: int = 0,
    carried: float = 0.0,
    mid: MidEpoch | None = None,
    traces: Traces | None = None,
) -> recorder.EpochResult:
    """Train one epoch (0-based) under the train clock; the clock pauses for step records,
    progress lines and `mid`'s checkpoints. `counted` collects the collectives of the second
    step this launch takes in it; that step and the `output.split_steps` - 1 after it are
    profiled, each a call of its own, and the result's `step_split` is the split of the one of
    median wall time (one profiled step is one sample of a noisy clock). A resumed epoch starts
    at `start_step`, this rank's loss sum of the earlier steps `carried`. `traces` traces the
    calls after the profiled ones (after the first, when none is profiled) until it has its
    steps."""
    steps = trainer.steps_per_epoch
    every = cfg.train.log_every_steps
    losses: list[SupportsFloat] = []
    clock = trainer.step_clock()
    paused = 0.0
    lr = learning_rate(cfg.optim, epoch, start_step, steps, cfg.train.epochs)
    share = trainer.dims.dp_size  # the chief's loss is its share of the global mean
    trainer.barrier()
    trainer.synchronize()
    # the epoch's sample order, drawn before the clock as a plain loop draws its own (a
    # permutation of the whole training set: several steps' time on MNIST)
    batches = iter(trainer.train_batches(epoch, start_step))
    # past the first step's set-up
    alone = start_step + min(1, steps - start_step - 1) if counted is not None else None
    cuts = mid.cuts(epoch) if mid is not None else []
    apart = min(cfg.output.split_steps, steps - alone) if alone is not None else 0
    splits: list[StepSplit] = []
    # checkpoints or stops inside this epoch: else no call of `mid` between the steps
    acting = mid if mid is not None and (mid.every or cuts) else None
    # The calls and each step's rate, worked out before the clock: on the clock, between two
    # steps, the loop only fetches a batch, steps and reads the time (docs/performance.md,
    # "A tiny model to see the harness")
    planned = list(calls(steps, cfg.train.steps_per_call, alone, start_step, cuts, apart))
    schedule = functools.partial(learning_rate, cfg.optim, epoch)
    rates = [schedule(step, steps, cfg.train.epochs) for step in range(steps)]
    progress.start_epoch(start_step)
    cpu_before = cpu_time.read()
    start = time.perf_counter()
    clock.step_started()
    # the last call a trace leaves out: its profiler and the split's must not overlap
    set_up = alone + apart - 1 if alone is not None else start_step
    for first, count in planned:
        if traces is not None and first > set_up:
            traces.before_call()
        taken = list(itertools.islice(batches, count))
        lrs = rates[first : first + count]
        if alone is not None and counted is not None and alone <= first < alone + apart:
            loss, calls_made = trainer.count_calls(
                functools.partial(trainer.train_step, taken[0], lrs[0])
            )
            if first == alone:
                counted += calls_made
            split = trainer.step_split()
            if split is not None:
                splits.append(split)
            done = [loss]
        elif count == 1:
            done = [trainer.train_step(taken[0], lrs[0])]
        else:
            done = trainer.train_steps(taken, lrs)
        clock.step_done(count)
        if traces is not None:
            traces.after_call(count)
        losses += done
        if every:
            paused += _write_steps(trainer, run, done, epoch * steps + first, epoch, every, lrs)
        if acting is not None and first + count < steps:
            running = functools.partial(_running_sum, carried, losses)
            paused += acting.after(epoch, first + count, running)
        if progress.due():
            paused += progress.update(
                epoch=epoch,
                step=first + count,
                train_s=time.perf_counter() - start - paused,
                loss=functools.partial(_chief_mean, done[-1], share),
            )
        clock.step_started()
    next(batches, None)  # let the batches' generator finish, as a for loop would
    trainer.synchronize()
    train_time = time.perf_counter() - start - paused
    cpu = cpu_time.spent(cpu_before, cpu_time.read())
    progress.end_epoch()
    total = trainer.all_reduce_sum(np.array([_running_sum(carried, losses)]))[0]
    step_times = clock.step_times(train_time)
    trained = steps - start_step
    ordered = sorted(splits, key=lambda split: split.wall_s)
    return recorder.EpochResult(
        loss=float(total) / steps,
        time_s=train_time,
        step_times=step_times,
        lr=rates[-1] if planned else lr,  # the last step's
        steps=trained,
        step_split=ordered[len(ordered) // 2] if ordered else None,
        cpu=cpu,
    )


def _write_steps(
    trainer: Trainer,
    run: Run,
    done: list[SupportsFloat],
    before: int,
    epoch: int,
    every: int,
    lrs: list[float],
) -> float:
    """A step record for each step of `done` that `every` (train.log_every_steps) picks: its
    loss summed over the ranks. `before`: the run's steps before the first of them. Returns
    the seconds the records took, for the caller to take off its clock."""
    spent = 0.0
    for index, loss in enumerate(done):
        global_step = before + index + 1
        if global_step % every == 0:
            start = time.perf_counter()
            step_loss = trainer.all_reduce_sum(np.array([float(loss)]))[0]
            record = Step(epoch=epoch + 1, step=global_step, loss=float(step_loss), lr=lrs[index])
            run.write(record, echo=False)
            spent += time.perf_counter() - start
    return spent


def _running_sum(carried: float, losses: list[SupportsFloat]) -> float:
    """This rank's loss sum in step order, in float64, from what earlier launches carried: the
    same additions however the epoch was split into launches."""
    local = carried
    for loss in losses:
        local += float(loss)
    return local


def calls(
    steps: int,
    per_call: int,
    alone: int | None = None,
    start: int = 0,
    cuts: list[int] | None = None,
    apart: int = 1,
) -> Iterator[tuple[int, int]]:
    """(first step, steps) of each call into the framework in an epoch of `steps`, from step
    `start`: `per_call` steps a call, the epoch's last call what is left, a call ending after
    each of `cuts` steps (where a checkpoint falls), and step `alone` (the one whose
    collectives are counted) and the `apart` - 1 after it (profiled) a call of its own each."""
    first = start
    while first < steps:
        end = min([first + per_call, steps, *(cut for cut in cuts or [] if cut > first)])
        if alone is not None and first < alone < end:
            end = alone
        elif alone is not None and alone <= first < alone + apart:
            end = first + 1
        yield first, end - first
        first = end


def _chief_mean(share_of_loss: SupportsFloat, shares: int) -> float:
    """The chief's own mean loss from its share of the global mean."""
    return float(share_of_loss) * shares
