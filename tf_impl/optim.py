"""The optimizer of `optim.name`, stepping exactly as torch.optim does.

Keras' own update rules differ from PyTorch's in three places that change the numbers:
  SGD momentum  Keras keeps velocity = momentum * v - lr * g (the learning rate is baked into
                the buffer); torch keeps buf = momentum * buf + g and steps lr * buf. They differ
                as soon as the learning rate changes (step and onecycle schedules).
  Adam epsilon  Keras adds epsilon to sqrt(v) before the bias correction ("epsilon hat");
                torch adds it after.
  weight decay  Keras' weight_decay is decoupled (AdamW style); torch's is coupled L2, added to
                the gradient. optim.weight_decay means torch's.
So the update steps below are torch's formulas on Keras optimizers (which keep the distribution
logic: gradients summed across workers, then one update per mirrored variable). Adadelta's rule
is the same in both; only the coupled weight decay is added.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from common.core.config.config import OptimConfig
from common.core.train import optim as common_optim


class _CoupledWeightDecay:
    """g <- g + weight_decay * w before the update, as torch.optim does."""

    l2: float = 0.0

    def _decayed(self, gradient, variable):
        gradient = ops.cast(gradient, variable.dtype)
        if self.l2:
            gradient = gradient + ops.cast(self.l2, variable.dtype) * variable
        return gradient


class TorchSGD(_CoupledWeightDecay, keras.optimizers.SGD):
    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = self._decayed(gradient, variable)
        if self.momentum == 0:
            self.assign_sub(variable, lr * gradient)
            return
        buffer = self.momentums[self._get_variable_index(variable)]
        # torch starts the buffer at the first gradient; buffer starts at 0 here, and
        # momentum * 0 + g is the same first value.
        self.assign(buffer, ops.cast(self.momentum, variable.dtype) * buffer + gradient)
        self.assign_sub(variable, lr * buffer)


class TorchAdam(_CoupledWeightDecay, keras.optimizers.Adam):
    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = self._decayed(gradient, variable)
        step = ops.cast(self.iterations + 1, variable.dtype)
        beta_1 = ops.cast(self.beta_1, variable.dtype)
        beta_2 = ops.cast(self.beta_2, variable.dtype)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign(m, beta_1 * m + (1 - beta_1) * gradient)
        self.assign(v, beta_2 * v + (1 - beta_2) * ops.square(gradient))
        bias_1 = 1 - ops.power(beta_1, step)
        bias_2 = 1 - ops.power(beta_2, step)
        denominator = ops.sqrt(v) / ops.sqrt(bias_2) + ops.cast(self.epsilon, variable.dtype)
        self.assign_sub(variable, (lr / bias_1) * m / denominator)


class TorchAdadelta(_CoupledWeightDecay, keras.optimizers.Adadelta):
    def update_step(self, gradient, variable, learning_rate):
        super().update_step(self._decayed(gradient, variable), variable, learning_rate)


def build_optimizer(optim: OptimConfig) -> keras.optimizers.Optimizer:
    """Build inside `strategy.scope()`; the learning rate is set before every step."""
    if optim.name == "sgd":
        optimizer = TorchSGD(learning_rate=optim.lr, momentum=optim.momentum)
    elif optim.name == "adam":
        beta_1, beta_2 = common_optim.ADAM_BETAS
        optimizer = TorchAdam(
            learning_rate=optim.lr, beta_1=beta_1, beta_2=beta_2, epsilon=common_optim.ADAM_EPSILON
        )
    else:
        optimizer = TorchAdadelta(
            learning_rate=optim.lr,
            rho=common_optim.ADADELTA_RHO,
            epsilon=common_optim.ADADELTA_EPSILON,
        )
    optimizer.l2 = optim.weight_decay
    return optimizer


class AgreedLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras' dynamic loss scaling, with one skip decision for all workers.

    Keras 3.15's LossScaleOptimizer checks the worker's own gradients for inf/NaN before they
    are summed over the workers (`_common_apply`, the path MultiWorkerMirroredStrategy takes,
    since it supports no merge_call), then applies, and all-reduces, only when they are finite.
    A worker that overflowed alone skipped the step and halved its scale, while the others
    waited for it in the gradient all-reduce until dist.timeout_s. Here every worker's flag is
    summed first, so all of them take the same branch: every one skips, or none does.
    """

    def check_finite(self, grads):
        finite = super().check_finite(grads)
        replica = tf.distribute.get_replica_context()
        if replica is None:  # cross-replica context: no per-worker gradients to agree on
            return finite
        overflowed = replica.all_reduce("sum", tf.cast(tf.logical_not(finite), tf.float32))
        return tf.equal(overflowed, 0.0)


def set_learning_rate(optimizer: keras.optimizers.Optimizer, lr: float) -> None:
    optimizer.learning_rate.assign(lr)
