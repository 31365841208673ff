"""The canonical (PyTorch) weights in Keras' layouts and back.

  conv      weight [out, in, kh, kw] -> kernel [kh, kw, in, out] (HWIO; activations NHWC)
  dense     weight [out, in] -> kernel [in, out]; the dense layer that reads a flattened image
            also has its rows reordered from (C, H, W) to Keras' (H, W, C) flatten order
  batchnorm weight, bias, running_mean, running_var -> gamma, beta, moving_mean,
            moving_variance
Each layer kind names its parts' Keras names (`common.models.layers.Layer.keras_parts`); Keras
names a layer by the canonical name with "." written "__" (`keras_name`).
"""

from __future__ import annotations

import numpy as np

from common.models.weights import Placed, flatten_input, parameter_layers
from common.models.zoo import Net


def keras_name(name: str) -> str:
    """A layer's Keras name: its canonical name with "." as "__" (Keras names take no dots)."""
    return name.replace(".", "__")


def _kernel_to_keras(net: Net, spot: Placed, weight: np.ndarray) -> np.ndarray:
    if spot.layer.kind == "conv":
        return np.ascontiguousarray(weight.transpose(2, 3, 1, 0))
    flattened = flatten_input(net)
    if flattened is not None and flattened[0] == spot.name:
        channels, height, width = flattened[1]
        outputs = weight.shape[0]
        kernel = weight.reshape(outputs, channels, height, width).transpose(2, 3, 1, 0)
        return np.ascontiguousarray(kernel.reshape(height * width * channels, outputs))
    return np.ascontiguousarray(weight.T)


def _kernel_from_keras(net: Net, spot: Placed, kernel: np.ndarray) -> np.ndarray:
    if spot.layer.kind == "conv":
        return np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))
    flattened = flatten_input(net)
    if flattened is not None and flattened[0] == spot.name:
        channels, height, width = flattened[1]
        outputs = kernel.shape[1]
        weight = kernel.reshape(height, width, channels, outputs).transpose(3, 2, 0, 1)
        return np.ascontiguousarray(weight.reshape(outputs, -1))
    return np.ascontiguousarray(kernel.T)


def layer_to_keras(net: Net, spot: Placed, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One layer's canonical arrays as its Keras layer's weights, in their order."""
    out = []
    for part, keras_part in spot.layer.keras_parts.items():
        if part not in arrays:
            continue
        array = arrays[part]
        if keras_part == "kernel":
            array = _kernel_to_keras(net, spot, array)
        out.append(np.ascontiguousarray(array))
    return out


def to_keras(net: Net, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{"conv1.kernel": HWIO, "fc1.kernel": [in, out], "bn1.gamma": ..., ...}."""
    converted = {}
    for spot in parameter_layers(net):
        for part, keras_part in spot.layer.keras_parts.items():
            if f"{spot.name}.{part}" not in weights:
                continue
            array = weights[f"{spot.name}.{part}"]
            if keras_part == "kernel":
                array = _kernel_to_keras(net, spot, array)
            converted[f"{spot.name}.{keras_part}"] = np.ascontiguousarray(array)
    return converted


def from_keras(net: Net, keras_weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of `to_keras`: Keras-layout weights back to the canonical layout."""
    canonical = {}
    for spot in parameter_layers(net):
        for part, keras_part in spot.layer.keras_parts.items():
            if f"{spot.name}.{keras_part}" not in keras_weights:
                continue
            array = keras_weights[f"{spot.name}.{keras_part}"]
            if keras_part == "kernel":
                array = _kernel_from_keras(net, spot, array)
            canonical[f"{spot.name}.{part}"] = np.ascontiguousarray(array)
    return canonical
