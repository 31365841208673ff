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


def apply(
    layer: layers.Layer, x: keras.KerasTensor, prefix: str, seed: int, recompute: bool = False
) -> keras.KerasTensor:
    """`layer` applied to `x` in a functional model; `prefix` qualifies the names of a residual
    block's layers; `seed` seeds a dropout layer's masks; `recompute`: a residual block becomes
    one `Block` layer whose activations are recomputed in the backward."""
    if isinstance(layer, layers.Residual):
        if recompute:
            return Block(layer, prefix, seed, name=keras_name(prefix + layer.name))(x)
        body, shortcut = x, x
        for inner in layer.body:
            body = apply(inner, body, f"{prefix}{layer.name}.", seed)
        for inner in layer.shortcut:
            shortcut = apply(inner, shortcut, f"{prefix}{layer.name}.", seed)
        return keras.layers.Add()([body, shortcut])
    for made in make(layer, prefix, seed):
        x = made(x)
    return x


def make(layer: layers.Layer, prefix: str, seed: int) -> list[keras.layers.Layer]:
    """The Keras layers of one described layer but a residual block, applied in order."""
    name = keras_name(prefix + layer.name) if layer.name else None
    # Zeros, not Keras' random initializers: the weights are overwritten layer by layer, and
    # drawing a billion random numbers first would only cost time.
    if isinstance(layer, layers.Conv):
        # symmetric, as torch pads ("same" pads a stride-2 input on one side)
        padding = [keras.layers.ZeroPadding2D(layer.padding)] if layer.padding else []
        return [
            *padding,
            keras.layers.Conv2D(
                layer.outputs,
                layer.kernel,
                strides=layer.stride,
                use_bias=layer.bias,
                name=name,
                kernel_initializer="zeros",
            ),
        ]
    if isinstance(layer, layers.Dense):
        return [keras.layers.Dense(layer.outputs, name=name, kernel_initializer="zeros")]
    if isinstance(layer, layers.BatchNorm):
        return [BatchNorm(momentum=layer.momentum, eps=layer.eps, name=name)]
    if isinstance(layer, layers.MaxPool):
        return [keras.layers.MaxPooling2D(layer.size)]
    if isinstance(layer, layers.Dropout):
        return [keras.layers.Dropout(layer.rate, seed=seed)]
    simple = {
        "relu": keras.layers.ReLU,
        "flatten": keras.layers.Flatten,
        "globalavgpool": keras.layers.GlobalAveragePooling2D,
    }
    if layer.kind in simple:
        return [simple[layer.kind]()]
    raise ValueError(f"layer kind {layer.kind!r} has no Keras counterpart")


class Block(keras.layers.Layer):
    """A residual block as one layer whose activations are recomputed in the backward
    (`tf.recompute_grad`, model.activation_checkpointing=blocks): the forward keeps only the
    block's input. Its layers carry the names they have without it ("block1__conv1"); they are
    reached through `inner`. The recomputation must not move the running statistics a second
    time: the block's function is called first by the forward, then by each recomputation."""

    def __init__(self, block: layers.Residual, prefix: str, seed: int, **kwargs):  # noqa: ANN003
        super().__init__(**kwargs)
        inside = f"{prefix}{block.name}."
        self.body = [made for layer in block.body for made in make(layer, inside, seed)]
        self.shortcut = [made for layer in block.shortcut for made in make(layer, inside, seed)]
        self.inner = {made.name: made for made in [*self.body, *self.shortcut]}

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        if not training:
            return self._paths(x, training=False, keep_statistics=False)
        calls: list[bool] = []

        def paths(inputs: tf.Tensor) -> tf.Tensor:
            calls.append(True)
            return self._paths(inputs, training=True, keep_statistics=len(calls) > 1)

        return tf.recompute_grad(paths)(x)

    def _paths(self, x: tf.Tensor, *, training: bool, keep_statistics: bool) -> tf.Tensor:
        body, shortcut = x, x
        for made in self.body:
            body = _call(made, body, training, keep_statistics)
        for made in self.shortcut:
            shortcut = _call(made, shortcut, training, keep_statistics)
        return body + shortcut


def _call(layer: keras.layers.Layer, x: tf.Tensor, training: bool, keep: bool) -> tf.Tensor:
    if isinstance(layer, BatchNorm):
        return layer(x, training=training, keep_statistics=keep)
    if isinstance(layer, keras.layers.Dropout):
        return layer(x, training=training)
    return layer(x)


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

    def call(
        self, x: tf.Tensor, training: bool = False, keep_statistics: bool = False
    ) -> tf.Tensor:
        compute = x.dtype
        x = ops.cast(x, "float32")
        if training:
            mean, variance, count = _global_moments(x)
        else:
            mean, variance = self.moving_mean, self.moving_variance
        if training and not keep_statistics:  # kept while a checkpointed block recomputes
            unbiased = variance * (count / (count - 1.0))
            self.moving_mean.assign(self.moving_mean + self.momentum * (mean - self.moving_mean))
            self.moving_variance.assign(
                self.moving_variance + self.momentum * (unbiased - self.moving_variance)
            )
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
