"""One Keras layer per layer kind of `common.models.layers` (`apply`), and the one kind Keras
has no layer for as the models need it: batch normalization over the global batch with
PyTorch's running statistics.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from common.models import layers
from common.models.layouts import keras_name


def apply(layer: layers.Layer, x: keras.KerasTensor, prefix: str, seed: int) -> keras.KerasTensor:
    """`layer` applied to `x` in a functional model; `prefix` qualifies the names of a residual
    block's layers; `seed` seeds a dropout layer's masks."""
    name = keras_name(prefix + layer.name) if layer.name else None
    # Zeros, not Keras' random initializers: the weights are overwritten layer by layer, and
    # drawing a billion random numbers first would only cost time.
    if isinstance(layer, layers.Conv):
        if layer.padding:  # symmetric, as torch pads ("same" pads a stride-2 input on one side)
            x = keras.layers.ZeroPadding2D(layer.padding)(x)
        return keras.layers.Conv2D(
            layer.outputs,
            layer.kernel,
            strides=layer.stride,
            use_bias=layer.bias,
            name=name,
            kernel_initializer="zeros",
        )(x)
    if isinstance(layer, layers.Dense):
        return keras.layers.Dense(layer.outputs, name=name, kernel_initializer="zeros")(x)
    if isinstance(layer, layers.BatchNorm):
        return BatchNorm(momentum=layer.momentum, eps=layer.eps, name=name)(x)
    if isinstance(layer, layers.Residual):
        body, shortcut = x, x
        for inner in layer.body:
            body = apply(inner, body, f"{prefix}{layer.name}.", seed)
        for inner in layer.shortcut:
            shortcut = apply(inner, shortcut, f"{prefix}{layer.name}.", seed)
        return keras.layers.Add()([body, shortcut])
    if isinstance(layer, layers.MaxPool):
        return keras.layers.MaxPooling2D(layer.size)(x)
    if isinstance(layer, layers.Dropout):
        return keras.layers.Dropout(layer.rate, seed=seed)(x)
    simple = {
        "relu": keras.layers.ReLU,
        "flatten": keras.layers.Flatten,
        "globalavgpool": keras.layers.GlobalAveragePooling2D,
    }
    if layer.kind in simple:
        return simple[layer.kind]()(x)
    raise ValueError(f"layer kind {layer.kind!r} has no Keras counterpart")


class BatchNorm(keras.layers.Layer):
    """Batch normalization whose batch is the global batch (`common.models.layers.BatchNorm`),
    as torch_impl.layers.GlobalBatchNorm computes it: inside `strategy.run` with several
    workers the per-channel sum and the sum of squared deviations are all-reduced over the
    replicas (the replica context's all_reduce, whose gradient is all-reduced too); the
    running statistics follow torch's rule (running = (1 - momentum) x running + momentum x
    batch, the variance unbiased), not Keras' (momentum on the other side, biased variance).
    Statistics are computed in float32 whatever the compute precision, as Keras' own layer
    does. The running statistics are on-read variables: every worker computes the same
    values and keeps its own copy, so an update needs no exchange (a mirrored variable's
    would, a merge_call, which TensorFlow does not allow inside the nested tf.function of the
    step); reading them across workers averages equal values."""

    def __init__(self, *, momentum: float, eps: float, **kwargs):  # noqa: ANN003 - Keras' own
        super().__init__(**kwargs)
        self.momentum, self.eps = momentum, eps

    def build(self, input_shape: tuple[int, ...]) -> None:
        features = (input_shape[-1],)
        self.gamma = self.add_weight(features, "ones", name="gamma", autocast=False)
        self.beta = self.add_weight(features, "zeros", name="beta", autocast=False)
        kept = {"trainable": False, "autocast": False, "dtype": "float32"}
        kept |= {"aggregation": "mean", "synchronization": "on_read"}
        self.moving_mean = keras.Variable("zeros", features, name="moving_mean", **kept)
        self.moving_variance = keras.Variable("ones", features, name="moving_variance", **kept)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        compute = x.dtype
        x = ops.cast(x, "float32")
        if training:
            mean, variance, count = _global_moments(x)
            unbiased = variance * (count / (count - 1.0))
            self.moving_mean.assign(self.moving_mean + self.momentum * (mean - self.moving_mean))
            self.moving_variance.assign(
                self.moving_variance + self.momentum * (unbiased - self.moving_variance)
            )
        else:
            mean, variance = self.moving_mean, self.moving_variance
        scale = self.gamma * tf.math.rsqrt(variance + self.eps)
        return ops.cast((x - mean) * scale + self.beta, compute)


def _global_moments(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(mean, biased variance, sample count) per channel (the last axis) over every replica's
    batch: the sum first, then the squared deviations from the global mean."""
    axes = list(range(len(x.shape) - 1))
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync if context is not None else 1

    def summed(value: tf.Tensor) -> tf.Tensor:
        return context.all_reduce("sum", value) if replicas > 1 else value

    count = tf.cast(tf.size(x) // tf.shape(x)[-1], tf.float32)
    packed = summed(tf.concat([tf.reduce_sum(x, axes), tf.reshape(count, [1])], 0))
    total = packed[-1]
    mean = packed[:-1] / total
    centered = x - mean
    variance = summed(tf.reduce_sum(centered * centered, axes)) / total
    return mean, variance, total
