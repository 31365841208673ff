"""The models in Keras, built from their description (`common.models.zoo.Net`). No distributed
code.

Activations are NHWC (Keras' default); the shared initial weights come in through
`common.models.layouts`, which also reorders the first dense layer after a flattened image.
"""

from __future__ import annotations

import keras
import numpy as np

from common.models import layouts, weights, zoo
from tf_impl.layers import Block, apply


def build_model(net: zoo.Net, seed: int, checkpointing: str = "none") -> keras.Model:
    """The model in fp32 (or the global mixed-precision policy), holding the shared initial
    weights of `seed`. Call it inside `strategy.scope()` to get mirrored variables.
    `checkpointing` (model.activation_checkpointing): "blocks" recomputes each residual
    block's activations in the backward (`tf_impl.layers.Block`)."""
    channels, height, width = net.inputs
    inputs = keras.Input((height, width, channels))
    x = inputs
    for index, layer in enumerate(net.layers):
        # the seed of a dropout's masks
        x = apply(layer, x, "", seed * 1_000_003 + index, recompute=checkpointing == "blocks")
    # Logits in float32 whatever the compute dtype, so the loss is computed in float32.
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(x)
    model = keras.Model(inputs, logits, name=net.name)
    model.net = net  # what the weights' layout follows (get_weights, export)
    for spot, arrays in weights.layer_weights(net, seed):  # one layer in memory at once
        layer = find_layer(model, spot.name)
        layer.set_weights(layouts.layer_to_keras(net, spot, arrays))
    return model


def get_weights(model: keras.Model) -> dict[str, np.ndarray]:
    """The model's weights and running statistics in the canonical (torch) layout, float32."""
    net = model.net
    keras_weights = {}
    for spot in weights.parameter_layers(net):
        layer = find_layer(model, spot.name)
        parts = [
            keras_part
            for part, keras_part in spot.layer.keras_parts.items()
            if part in {**spot.layer.parameters(spot.inputs), **spot.layer.buffers(spot.inputs)}
        ]
        for keras_part, array in zip(parts, layer.get_weights(), strict=True):
            keras_weights[f"{spot.name}.{keras_part}"] = array.astype(np.float32)
    return layouts.from_keras(net, keras_weights)


def find_layer(model: keras.Model, name: str) -> keras.layers.Layer:
    """The Keras layer of a canonical layer name, inside its checkpointed `Block` too."""
    blocks = {layer.name: layer for layer in model.layers if isinstance(layer, Block)}
    block = blocks.get(layouts.keras_name(name.split(".")[0]))
    if "." in name and block is not None:
        return block.inner[layouts.keras_name(name)]
    return model.get_layer(layouts.keras_name(name))
