"""One optimizer step on this worker's batch (`optimizer_step`, the twin of
`torch_impl.step.optimizer_step`), and the compiled calls that run it: one step a call, or
several in one call for train.steps_per_call; then the evaluation step and pass.

The forward runs under the run's mixed-precision policy; the loss is the cross-entropy summed
over the worker's batch and divided by the global batch (`tf.nn.compute_average_loss`), so the
workers' shares add up to the global mean; under fp16 the loss-scale optimizer scales it and
skips an update whose gradients hold inf or NaN (every worker the same); `apply_gradients`
all-reduces the gradients (MWMS) and steps. With train.accumulation_steps k the batch's k parts
run forward and backward in turn, their gradients added, and one apply_gradients follows.
"""

from __future__ import annotations

import functools

import keras
import numpy as np
import tensorflow as tf

from tf_impl import dist
from tf_impl.data import TfData
from tf_impl.optim import set_learning_rate


def loss_and_gradients(model, optimizer, images, labels, global_batch: int):
    """A step's forward and backward: (this worker's share of the global mean loss, the
    gradients of its scaled loss)."""
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        scaled = optimizer.scale_loss(loss)  # loss scaling under fp16, else the loss
    return loss, tape.gradient(scaled, model.trainable_variables)


def accumulated(forward_backward, images, labels, micro_batches: int):
    """`forward_backward` over the batch in `micro_batches` equal parts, one after another: the
    summed loss and the summed gradients (the gradients of the batch's share of the mean)."""
    if micro_batches == 1:
        return forward_backward(images, labels)
    loss, gradients = None, None
    parts = zip(tf.split(images, micro_batches), tf.split(labels, micro_batches), strict=True)
    for part_images, part_labels in parts:
        part, part_gradients = forward_backward(part_images, part_labels)
        if gradients is None:
            loss, gradients = part, list(part_gradients)
        else:
            loss += part
            gradients = [sum_ + new for sum_, new in zip(gradients, part_gradients, strict=True)]
    return loss, gradients


def optimizer_step(model, optimizer, forward_backward, images, labels, micro_batches: int = 1):
    """One step on this worker's batch, run by `strategy.run` on each replica; returns its share
    of the global mean loss. `forward_backward(images, labels)` is this run's
    `loss_and_gradients`, compiled by XLA under tf.jit_compile; the all-reduce inside
    apply_gradients cannot be (MWMS's collective ops run outside XLA clusters), so the update
    stays outside it."""
    loss, gradients = accumulated(forward_backward, images, labels, micro_batches)
    # Keras sums the gradients over the workers: sum of (local sum / global batch) is the
    # gradient of the global mean, as DDP's average of local means is.
    optimizer.apply_gradients(list(zip(gradients, model.trainable_variables, strict=True)))
    return loss


def make_train_step(
    model: keras.Model,
    optimizer,
    info: dist.DistInfo,
    global_batch: int,
    jit_compile: bool = False,
    source: tuple = (),
    micro_batches: int = 1,
    rates: bool = True,
):
    """`train_step(images, labels[, lr])`, one step per call on every worker, and
    `train_steps(indices[, lrs])`, one or several steps over `source`, the preloaded (images,
    labels), in one call, the samples gathered inside it. Both trace the same per-step body
    (`one_step`): the step's learning rate when the calls take one (`rates`; `Rate` says
    when), then `optimizer_step` on every worker. Without `rates` they take no rate argument at
    all: one left to its default costs the call more than one passed.
    `jit_compile`: the forward and backward pass go through XLA in a tf.function of their own.
    Without XLA the forward is traced straight into the step: batch normalization all-reduces
    its statistics inside the forward, and TensorFlow refuses a cross-worker exchange (a
    merge_call) inside a nested tf.function."""
    forward_backward = functools.partial(
        loss_and_gradients, model, optimizer, global_batch=global_batch
    )
    if jit_compile:
        forward_backward = tf.function(forward_backward, jit_compile=True)

    def replica_step(images, labels):
        return optimizer_step(model, optimizer, forward_backward, images, labels, micro_batches)

    def one_step(images, labels, lr):
        if lr is not None:
            optimizer.learning_rate.assign(lr)
        per_replica = info.distribution.run(replica_step, args=(images, labels))
        return info.distribution.experimental_local_results(per_replica)[0]

    def steps(indices, lrs):
        """The steps whose samples are indices[i] of `source` (images, labels) at lrs[i] (at
        the optimizer's rate, lrs None), unrolled in one graph (one trace per call length) as
        Keras's steps_per_execution runs them: the same gathers as train_batches, the same body
        as train_step, no eager op between. One step's indices [batch] at one rate: that step
        alone, its loss a scalar."""
        if indices.shape.rank == 1:  # one step's indices, at rate lrs: nothing to stack
            images, labels = (tf.gather(tensor, indices) for tensor in source)
            return one_step(images, labels, lrs)
        losses = []
        for index in range(indices.shape[0]):
            images, labels = (tf.gather(tensor, indices[index]) for tensor in source)
            losses.append(one_step(images, labels, None if lrs is None else lrs[index]))
        return tf.stack(losses)

    if rates:
        return tf.function(one_step), tf.function(steps)

    @tf.function
    def train_step(images, labels):
        return one_step(images, labels, None)

    @tf.function
    def train_steps(indices):
        return steps(indices, None)

    return train_step, train_steps


class Rate:
    """Where a step's learning rate enters the optimizer. A schedule that changes it every step
    (`every_step`, onecycle) hands each call its steps' rates, assigned inside the graph. Any
    other sets the optimizer's rate from here when it changes (once a run, or an epoch): the
    compiled call then has one input and one assignment fewer, 3% of an MLP step on a CPU,
    where an eager assignment costs 0.2 ms, too much for every step (docs/performance.md)."""

    def __init__(self, optimizer, every_step: bool):
        self.optimizer, self.every_step = optimizer, every_step
        self.current: float | None = None  # the optimizer's rate, as set from here

    def arguments(self, lrs: list[float], stacked: bool) -> tuple:
        """The call's rate argument: the rates (`stacked`: one per step), or none."""
        if self.every_step:
            return (tf.constant(lrs if stacked else lrs[0], dtype=tf.float32),)
        if len(set(lrs)) > 1:
            raise ValueError(f"one call's steps at different rates {lrs}: pass them as every_step")
        if lrs[0] != self.current:
            set_learning_rate(self.optimizer, lrs[0])
            self.current = lrs[0]
        return ()

    def forget(self) -> None:
        """The optimizer's rate was restored (a checkpoint): set it again at the next step."""
        self.current = None


def make_eval_step(model: keras.Model, jit_compile: bool = False):
    @tf.function(jit_compile=jit_compile)
    def eval_step(images, labels, weights):
        logits = tf.cast(model(images, training=False), tf.float32)
        losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float32)
        return tf.stack(
            [
                tf.reduce_sum(losses * weights),
                tf.reduce_sum(correct * weights),
                tf.reduce_sum(weights),
            ]
        )

    return eval_step


def evaluate(eval_step, data: TfData, info: dist.DistInfo) -> tuple[float, float]:
    """(mean loss, accuracy) over the whole test set, summed over the workers."""
    totals = np.zeros(3)
    for images, labels, weights in data.eval_batches():
        totals += eval_step(images, labels, weights).numpy()
    totals = dist.all_reduce_sum(totals, info)
    return float(totals[0] / totals[2]), float(totals[1] / totals[2])
