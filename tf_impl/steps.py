"""TensorFlow's compiled steps: training (one step a call, or several in one call for
train.steps_per_call), evaluation, and the evaluation pass over the test set. The training
program (`tf_impl.train`) builds them once per run."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tf_impl import dist
from tf_impl.data import TfData


def make_train_step(
    model: keras.Model,
    optimizer,
    info: dist.DistInfo,
    global_batch: int,
    fault=None,
    jit_compile: bool = False,
    source: tuple = (),
):
    """A compiled step; returns this worker's share of the global mean loss (the shares of all
    workers add up to the loss of the global batch), and `train_steps`, several steps over
    `source`, the preloaded (images, labels), in one call. `fault`, a variable, multiplies the
    scaled loss (inf forces an overflow; `common.core.measure.precision.FORCE_OVERFLOW_VARIABLE`).
    `jit_compile`:
    the forward and backward pass go through XLA in a tf.function of their own; the all-reduce
    inside apply_gradients cannot (MWMS's collective ops run outside XLA clusters), so it and the
    update stay as they are. Without XLA the forward is traced straight into the step: batch
    normalization all-reduces its statistics inside the forward, and TensorFlow refuses a
    cross-worker exchange (a merge_call) inside a nested tf.function."""

    def loss_and_gradients(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True
            )
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            scaled = optimizer.scale_loss(loss)  # loss scaling under fp16, else the loss
            if fault is not None:
                scaled = scaled * tf.cast(fault, scaled.dtype)
        return loss, tape.gradient(scaled, model.trainable_variables)

    forward_backward = tf.function(loss_and_gradients, jit_compile=True) if jit_compile else None

    def replica_step(images, labels):
        loss, gradients = (forward_backward or loss_and_gradients)(images, labels)
        # Keras sums the gradients over the workers: sum of (local sum / global batch) is the
        # gradient of the global mean, as DDP's average of local means is.
        optimizer.apply_gradients(list(zip(gradients, model.trainable_variables, strict=True)))
        return loss

    @tf.function
    def train_step(images, labels):
        per_replica = info.strategy.run(replica_step, args=(images, labels))
        return info.strategy.experimental_local_results(per_replica)[0]

    @tf.function
    def train_steps(indices, lrs, faults):
        """The steps whose samples are indices[i] of `source` (images, labels) at lrs[i],
        unrolled in one graph (one trace per call length) as Keras's steps_per_execution runs
        them: the same gathers and step as train_batches and train_step, no eager op between."""
        losses = []
        for index in range(indices.shape[0]):
            optimizer.learning_rate.assign(lrs[index])
            if fault is not None:
                fault.assign(faults[index])
            images, labels = (tf.gather(tensor, indices[index]) for tensor in source)
            per_replica = info.strategy.run(replica_step, args=(images, labels))
            losses.append(info.strategy.experimental_local_results(per_replica)[0])
        return tf.stack(losses)

    return train_step, train_steps


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
