"""The MNIST models in Keras, built from `common.models.weights.model_spec`. No distributed code.

Activations are NHWC (Keras' default); the shared initial weights come in through
`common.models.weights.to_keras`, which also reorders the first dense layer after the CNN's flatten.
"""

from __future__ import annotations

import keras
import numpy as np

from common.models import weights
from common.models.config import ModelConfig

INPUT_SHAPE = (28, 28, 1)


def _keras_layer(layer: weights.Layer, dropout: bool, seed: int) -> keras.layers.Layer | None:
    # Zeros, not Keras' random initializers: the weights are overwritten layer by layer, and
    # drawing a billion random numbers first would only cost time.
    if layer.kind == "conv":
        return keras.layers.Conv2D(
            layer.outputs, layer.kernel, name=layer.name, kernel_initializer="zeros"
        )
    if layer.kind == "dense":
        return keras.layers.Dense(layer.outputs, name=layer.name, kernel_initializer="zeros")
    if layer.kind == "relu":
        return keras.layers.ReLU()
    if layer.kind == "maxpool2":
        return keras.layers.MaxPooling2D(2)
    if layer.kind == "flatten":
        return keras.layers.Flatten()
    if layer.kind == "dropout":
        return keras.layers.Dropout(layer.rate, seed=seed) if dropout else None
    raise ValueError(f"layer kind {layer.kind!r} has no Keras counterpart")


def build_model(model_cfg: ModelConfig, seed: int) -> keras.Model:
    """The model in fp32 (or the global mixed-precision policy), holding the shared initial
    weights of `seed`. Call it inside `strategy.scope()` to get mirrored variables."""
    layers = [keras.Input(INPUT_SHAPE)]
    for index, layer in enumerate(weights.model_spec(model_cfg)):
        built = _keras_layer(layer, model_cfg.dropout, seed * 1_000_003 + index)
        if built is not None:
            layers.append(built)
    # Logits in float32 whatever the compute dtype, so the loss is computed in float32.
    layers.append(keras.layers.Activation("linear", dtype="float32", name="logits"))
    model = keras.Sequential(layers, name=model_cfg.name)
    model.model_cfg = model_cfg  # what the weights' layout follows (get_weights, export)
    for layer, arrays in weights.layer_weights(model_cfg, seed):  # one layer in memory at once
        kernel = weights.kernel_to_keras(model_cfg, layer, arrays["weight"])
        model.get_layer(layer.name).set_weights([kernel, arrays["bias"]])
    return model


def get_weights(model: keras.Model) -> dict[str, np.ndarray]:
    """The model's weights in the canonical (torch) layout, float32."""
    keras_weights = {}
    for layer in weights.parameter_layers(model.model_cfg):
        kernel, bias = model.get_layer(layer.name).get_weights()
        keras_weights[f"{layer.name}.kernel"] = kernel.astype(np.float32)
        keras_weights[f"{layer.name}.bias"] = bias.astype(np.float32)
    return weights.from_keras(model.model_cfg, keras_weights)
