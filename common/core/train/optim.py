"""Optimizer constants and the learning-rate schedule, shared so that both frameworks agree.

Keras' defaults differ from PyTorch's (Adam epsilon 1e-7 vs 1e-8, Adadelta rho 0.95 vs 0.9):
both sides take these values instead. The schedule is a pure function both sides evaluate
before every step and write into the optimizer, so no framework scheduler (with its own
off-by-one conventions) is involved.
"""

from __future__ import annotations

import math

from common.core.config.config import OptimConfig

ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8
ADADELTA_RHO = 0.9
ADADELTA_EPSILON = 1e-6
# onecycle, PyTorch's OneCycleLR definition (learning rate only, no momentum cycling)
ONECYCLE_PCT_START = 0.3
ONECYCLE_DIV_FACTOR = 25.0
ONECYCLE_FINAL_DIV_FACTOR = 1e4


def _cosine(start: float, end: float, fraction: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * fraction) + 1.0)


def changes_every_step(optim: OptimConfig) -> bool:
    """Whether the schedule gives each step a rate of its own (else one per epoch or run)."""
    return optim.schedule == "onecycle"


def learning_rate(
    optim: OptimConfig, epoch: int, step: int, steps_per_epoch: int, epochs: int
) -> float:
    """The learning rate of step `step` (0-based, within epoch `epoch`, 0-based)."""
    if optim.schedule == "none":
        return optim.lr
    if optim.schedule == "step":
        return optim.lr * optim.gamma ** (epoch // optim.step_epochs)
    total = epochs * steps_per_epoch
    current = epoch * steps_per_epoch + step
    initial = optim.lr / ONECYCLE_DIV_FACTOR
    final = initial / ONECYCLE_FINAL_DIV_FACTOR
    warm_end = float(ONECYCLE_PCT_START * total) - 1
    if current <= warm_end:
        return _cosine(initial, optim.lr, current / warm_end if warm_end > 0 else 1.0)
    span = (total - 1) - warm_end
    return _cosine(optim.lr, final, (current - warm_end) / span if span > 0 else 1.0)
