"""Faults forced for tests, kept out of the step and of `Amp`: an fp16 overflow on one rank at
chosen steps (`common.core.measure.precision.FORCE_OVERFLOW_VARIABLE`), for the CPU, where fp16
rarely overflows. `amp_for` builds a plain `Amp` unless the variable names this rank. Its twin
is `tf_impl.faults`.
"""

from __future__ import annotations

import math

import torch
from torch.distributed.tensor import DTensor

from common.core.config.config import Config
from common.core.config.strategies import Strategy
from common.core.measure import precision
from torch_impl.precision import Amp


class ForcedOverflow(Amp):
    """`Amp` whose gradients overflow at `steps` on this rank, as a real overflow would:
    replicated gradients are summed before the scaler sees them, so an overflow in this rank's
    backward reaches every rank; sharded ones are reduce-scattered, so it may land in this
    rank's shard alone (`step` puts it there), and the scaler must tell the others."""

    def __init__(self, cfg: Config, strategy: Strategy, device: torch.device, steps: frozenset):
        super().__init__(cfg, strategy, device)
        if self.scaler is None:
            raise ValueError(
                f"{precision.FORCE_OVERFLOW_VARIABLE} forces an fp16 overflow; it needs "
                "torch.mixed_precision=fp16"
            )
        self.steps = steps

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        if self.skips.taken + 1 in self.steps and not self.sharded:
            loss = loss * math.inf
        return super().scale(loss)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.skips.taken in self.steps and self.sharded:
            _overflow_own_shard(optimizer)
        super().step(optimizer)


def amp_for(cfg: Config, strategy: Strategy, device: torch.device, rank: int) -> Amp:
    """The run's `Amp`; the forced-overflow one where the variable names this rank."""
    steps = precision.forced_overflow_steps(rank)
    if not steps:
        return Amp(cfg, strategy, device)
    return ForcedOverflow(cfg, strategy, device, steps)


def _overflow_own_shard(optimizer: torch.optim.Optimizer) -> None:
    """One element of this rank's first non-empty gradient shard becomes inf."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            grad = param.grad
            local = grad.to_local() if isinstance(grad, DTensor) else grad
            if local is not None and local.numel():
                with torch.no_grad():
                    local.view(-1)[0] = math.inf
                return
