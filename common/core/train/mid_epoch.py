"""Checkpoints and stops inside an epoch: every `train.checkpoint_every_steps` global steps,
after `--stop-after-step`, and at the first step boundary after a SIGUSR1 reached any rank.

The epoch's end keeps its own rules (`common.core.train.loop`): what falls on an epoch's last
step is decided there, after the evaluation. Without a step cadence the ranks vote on SIGUSR1
only at epoch ends, as before: the vote is an all-reduce, and a run that never checkpoints
inside an epoch has nothing to save there.

With a step cadence, how the ranks agree on a SIGUSR1 at every boundary is the trainer's
(`Trainer.stop_agreement`): torch votes after every call (`Vote`, one 8-byte all-reduce);
TensorFlow's workers agree through the coordination service (`tf_impl.preemption`), which
costs a step nothing (docs/runs.md has the measurement).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from common.core.config.cli import RunOptions
from common.core.config.config import Config
from common.core.run.lifecycle import Run
from common.core.run.stop_signals import Aborted, Preempted, Stops
from common.core.train.contract import Trainer


class MidEpoch:
    """The step boundaries of one launch where the driver may checkpoint and stop."""

    def __init__(
        self,
        cfg: Config,
        trainer: Trainer,
        run: Run,
        options: RunOptions,
        stops: Stops,
        elapsed_s: Callable[[], float],
    ) -> None:
        self.every = cfg.train.checkpoint_every_steps
        self.trainer, self.run, self.options, self.stops = trainer, run, options, stops
        self.elapsed_s = elapsed_s
        self.agreement = trainer.stop_agreement(lambda: stops.requested) if self.every else None

    def cuts(self, epoch: int) -> list[int]:
        """The steps done inside epoch `epoch` (0-based) after which a call into the framework
        must end, so that a checkpoint or a stop falls on its boundary."""
        steps = self.trainer.steps_per_epoch
        first = epoch * steps  # global steps done before the epoch
        cuts = [done for done in range(1, steps) if self.every and (first + done) % self.every == 0]
        if first < self.options.stop_after_step < first + steps:
            cuts.append(self.options.stop_after_step - first)
        return sorted(cuts)

    def after(self, epoch: int, done: int, loss_sum: Callable[[], float]) -> float:
        """After `done` steps of epoch `epoch` (fewer than the epoch's): checkpoint and stop
        where a rule says so (collective). Seconds spent here (outside the train clock)."""
        start = time.perf_counter()
        global_step = epoch * self.trainer.steps_per_epoch + done
        saved = []

        def checkpoint() -> None:
            self.trainer.synchronize()
            self.run.checkpoint(epoch, done, elapsed_s=self.elapsed_s(), loss_sum=loss_sum())
            saved.append(global_step)

        agreed = self.agreement is not None and self.agreement.at_boundary(checkpoint)
        stopping = self.options.stop_after_step == global_step
        if not saved and (stopping or (self.every and global_step % self.every == 0)):
            checkpoint()
        if agreed and self.agreement is not None:
            raise Preempted(
                f"preempted (SIGUSR1): checkpointed step {global_step} (epoch {epoch + 1}); "
                f"resume (agreed through {self.agreement.how})"
            )
        if stopping:
            raise Aborted(f"stopped after step {global_step} (--stop-after-step); --resume")
        return time.perf_counter() - start


class Vote:
    """The suite's stop agreement: after every call the ranks sum whether a stop reached each
    (one float64), and all checkpoint and stop at the boundary where the sum is not 0."""

    how = "the suite's vote"

    def __init__(
        self, all_reduce_sum: Callable[[np.ndarray], np.ndarray], requested: Callable[[], bool]
    ) -> None:
        self.all_reduce_sum, self.requested = all_reduce_sum, requested

    def at_boundary(self, checkpoint: Callable[[], None]) -> bool:
        if self.all_reduce_sum(np.array([float(self.requested())]))[0] > 0:
            checkpoint()
            return True
        return False
