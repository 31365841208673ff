"""Faults forced for tests, kept out of the step: an fp16 overflow on one rank at chosen steps
(`common.core.measure.precision.FORCE_OVERFLOW_VARIABLE`), for the CPU, where fp16 rarely
overflows. `loss_scale_optimizer` builds the run's plain loss-scaling optimizer unless the
variable names this worker. Its twin is `torch_impl.faults`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tensorflow as tf

from common.core.config.config import Config
from common.core.measure import precision
from tf_impl.optim import AgreedLossScaleOptimizer


@dataclass(frozen=True)
class Overflows:
    """The steps at which this worker's gradients overflow, and its count of steps taken."""

    steps: frozenset[int]
    counter: tf.Variable


def forced_overflows(cfg: Config, rank: int) -> Overflows | None:
    """This worker's forced overflows, or None without the variable; ValueError when the run has
    no loss scaling to exercise. Call it outside the strategy's scope: there, creating a
    variable is a collective (MWMS broadcasts its initial value), which only this worker would
    join."""
    steps = precision.forced_overflow_steps(rank)
    if not steps:
        return None
    if cfg.tf.mixed_precision != "fp16":
        raise ValueError(
            f"{precision.FORCE_OVERFLOW_VARIABLE} forces an fp16 overflow; it needs "
            "tf.mixed_precision=fp16"
        )
    return Overflows(steps, tf.Variable(0, dtype=tf.int64, trainable=False))


def loss_scale_optimizer(inner, overflows: Overflows | None) -> AgreedLossScaleOptimizer:
    """fp16's loss-scaling optimizer; one that overflows where `overflows` says."""
    settings = {
        "initial_scale": precision.LOSS_SCALE_INIT,
        "dynamic_growth_steps": precision.LOSS_SCALE_GROWTH_INTERVAL,
    }
    if overflows is None:
        return AgreedLossScaleOptimizer(inner, **settings)
    return ForcedOverflow(inner, overflows, **settings)


class ForcedOverflow(AgreedLossScaleOptimizer):
    """Scales the loss by infinity at the step-th step this launch takes (from 1), as an
    overflow in this worker's backward would: every gradient of the step becomes inf or NaN,
    and the agreed check makes every worker skip it."""

    def __init__(self, inner, overflows: Overflows, **settings):
        super().__init__(inner, **settings)
        counter = overflows.counter  # in a closure, not an attribute: checkpoints do not hold it
        overflow_at = tf.constant(sorted(overflows.steps), dtype=tf.int64)

        def factor() -> tf.Tensor:
            step = counter.assign_add(1)
            hit = tf.reduce_any(tf.equal(overflow_at, step))
            return tf.where(hit, tf.constant(math.inf), tf.constant(1.0))

        self._forced_factor = factor

    def scale_loss(self, loss):
        scaled = super().scale_loss(loss)
        return scaled * tf.cast(self._forced_factor(), scaled.dtype)
