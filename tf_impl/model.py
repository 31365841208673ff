"""The MNIST models in Keras, built from `common.weights.MODEL_SPECS`. No distributed code.

Activations are NHWC (Keras' default); the shared initial weights come in through
`common.weights.to_keras`, which also reorders the first dense layer after the CNN's flatten.
"""

from __future__ import annotations

import keras
import numpy as np

from common import weights
from common.config import ModelConfig

INPUT_SHAPE = (28, 28, 1)


def _keras_layer(layer: weights.Layer, dropout: bool, seed: int) -> keras.layers.Layer | None:
    if layer.kind == "conv":
        return keras.layers.Conv2D(layer.outputs, layer.kernel, name=layer.name)
    if layer.kind == "dense":
        return keras.layers.Dense(layer.outputs, name=layer.name)
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
    for index, layer in enumerate(weights.model_spec(model_cfg.name)):
        built = _keras_layer(layer, model_cfg.dropout, seed * 1_000_003 + index)
        if built is not None:
            layers.append(built)
    # Logits in float32 whatever the compute dtype, so the loss is computed in float32.
    layers.append(keras.layers.Activation("linear", dtype="float32", name="logits"))
    model = keras.Sequential(layers, name=model_cfg.name)
    set_weights(model, model_cfg.name, weights.initial_weights(model_cfg.name, seed))
    return model


def set_weights(model: keras.Model, name: str, canonical: dict[str, np.ndarray]) -> None:
    """Load canonical (torch-layout) weights into the Keras model."""
    keras_weights = weights.to_keras(name, canonical)
    for layer in weights.parameter_layers(name):
        model.get_layer(layer.name).set_weights(
            [keras_weights[f"{layer.name}.kernel"], keras_weights[f"{layer.name}.bias"]]
        )


def get_weights(model: keras.Model, name: str) -> dict[str, np.ndarray]:
    """The model's weights in the canonical (torch) layout, float32."""
    keras_weights = {}
    for layer in weights.parameter_layers(name):
        kernel, bias = model.get_layer(layer.name).get_weights()
        keras_weights[f"{layer.name}.kernel"] = kernel.astype(np.float32)
        keras_weights[f"{layer.name}.bias"] = bias.astype(np.float32)
    return weights.from_keras(name, keras_weights)
