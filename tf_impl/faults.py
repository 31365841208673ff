"""Faults forced for tests, kept out of the step: an fp16 overflow on one rank at chosen steps
(`common.core.measure.precision.FORCE_OVERFLOW_VARIABLE`), for the CPU, where fp16 rarely
overflows. `loss_scale_optimizer` builds the run's plain loss-scaling optimizer unless the
variable names this worker. Its twin is `torch_impl.faults`.
"""

from __future__ import annotations

import math

import tensorflow as tf

from common.core.config.config import Config
from common.core.measure import precision
from tf_impl.optim import AgreedLossScaleOptimizer


def forced_steps(cfg: Config, rank: int) -> frozenset[int]:
    """The steps at which this worker's gradients overflow (none without the variable);
    ValueError when the run has no loss scaling to exercise."""
    steps = precision.forced_overflow_steps(rank)
    if steps and cfg.tf.mixed_precision != "fp16":
        raise ValueError(
            f"{precision.FORCE_OVERFLOW_VARIABLE} forces an fp16 overflow; it needs "
            "tf.mixed_precision=fp16"
        )
    return steps


def loss_scale_optimizer(inner, steps: frozenset[int]) -> AgreedLossScaleOptimizer:
    """fp16's loss-scaling optimizer; one that overflows at `steps` where there are some."""
    settings = {
        "initial_scale": precision.LOSS_SCALE_INIT,
        "dynamic_growth_steps": precision.LOSS_SCALE_GROWTH_INTERVAL,
    }
    if not steps:
        return AgreedLossScaleOptimizer(inner, **settings)
    return ForcedOverflow(inner, steps, **settings)


class ForcedOverflow(AgreedLossScaleOptimizer):
    """Scales the loss by infinity at the step-th step this launch takes (from 1), as an
    overflow in this worker's backward would: every gradient of the step becomes inf or NaN,
    and the agreed check makes every worker skip it."""

    def __init__(self, inner, steps: frozenset[int], **settings):
        super().__init__(inner, **settings)
        # Each worker counts its own steps (a variable read on its replica), kept in a closure
        # rather than an attribute so that checkpoints do not hold it.
        counter = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        overflow_at = tf.constant(sorted(steps), dtype=tf.int64)

        def factor() -> tf.Tensor:
            step = counter.assign_add(1)
            hit = tf.reduce_any(tf.equal(overflow_at, step))
            return tf.where(hit, tf.constant(math.inf), tf.constant(1.0))

        self._forced_factor = factor

    def scale_loss(self, loss):
        scaled = super().scale_loss(loss)
        return scaled * tf.cast(self._forced_factor(), scaled.dtype)
