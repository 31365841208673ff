"""Checkpoints and stops inside an epoch: every `train.checkpoint_every_steps` global steps,
after `--stop-after-step`, and at the first step boundary after a SIGUSR1 reached any rank.

The epoch's end keeps its own rules (`common.core.train.loop`): what falls on an epoch's last
step is decided there, after the evaluation. Without a step cadence the ranks vote on SIGUSR1
only at epoch ends, as before: the vote is an all-reduce, and a run that never checkpoints
inside an epoch has nothing to save there.
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
        voted = self.every > 0 and self._stop_requested()
        stopping = self.options.stop_after_step == global_step
        if voted or stopping or (self.every and global_step % self.every == 0):
            self.trainer.synchronize()
            self.run.checkpoint(epoch, done, elapsed_s=self.elapsed_s(), loss_sum=loss_sum())
        if voted:
            raise Preempted(
                f"preempted (SIGUSR1): checkpointed step {global_step} (epoch {epoch + 1}); resume"
            )
        if stopping:
            raise Aborted(f"stopped after step {global_step} (--stop-after-step); --resume")
        return time.perf_counter() - start

    def _stop_requested(self) -> bool:
        """Collective: whether SIGUSR1 reached any rank."""
        requested = np.array([float(self.stops.requested)])
        return bool(self.trainer.all_reduce_sum(requested)[0] > 0)
