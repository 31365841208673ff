"""A rank killed at a chosen step, as a lost node would be: `SUITE_KILL_AT=RANK:STEP` SIGKILLs
rank RANK right after the STEP-th optimizer step of a launch's first attempt. Restarted ranks
(TORCHELASTIC_RESTART_COUNT > 0) are left alone: the fault happened once. For the tests and
the failure-cost bench; a wrapper around the trainer, so that the step itself carries no hook.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any, SupportsFloat, cast

from common.core.train.contract import Trainer
from common.launch.cluster import ClusterSpec

KILL_VARIABLE = "SUITE_KILL_AT"


def kill_step(spec: ClusterSpec, env: Mapping[str, str]) -> int | None:
    """The step after which this rank is to die, if the variable names it (ValueError for a
    value that is not RANK:STEP)."""
    text = env.get(KILL_VARIABLE, "")
    if not text or spec.attempt:
        return None
    rank, _, step = text.partition(":")
    if not (rank.isdigit() and step.isdigit() and int(step) >= 1):
        raise ValueError(f"{KILL_VARIABLE}={text!r}: write RANK:STEP, e.g. 1:15 (STEP >= 1)")
    return int(step) if int(rank) == spec.rank else None


class KilledAtStep:
    """The trainer, but SIGKILLed after its `step`-th optimizer step (this launch's steps)."""

    def __init__(self, trainer: Trainer, step: int) -> None:
        self._trainer, self._left = trainer, step

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)

    def train_step(self, batch: Any, lr: float) -> SupportsFloat:
        loss = self._trainer.train_step(batch, lr)
        self._count(1)
        return loss

    def train_steps(self, batches: list[Any], lrs: list[float]) -> list[Any]:
        losses = self._trainer.train_steps(batches, lrs)
        self._count(len(batches))
        return losses

    def _count(self, steps: int) -> None:
        self._left -= steps
        if self._left <= 0:
            rank = self._trainer.spec.rank
            print(f"[{KILL_VARIABLE}] rank {rank}: SIGKILL at {time.time():.3f}", file=sys.stderr)
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)


def wrap(trainer: Trainer, env: Mapping[str, str] | None = None) -> Trainer:
    """`trainer`, or the one that dies at the step `KILL_VARIABLE` names for this rank."""
    step = kill_step(trainer.spec, os.environ if env is None else env)
    return trainer if step is None else cast(Trainer, KilledAtStep(trainer, step))
