"""The two MNIST models as data, and their deterministic initial weights.

Both frameworks build their layers from `MODEL_SPECS` and load `initial_weights(name, seed)`,
so a torch model and a Keras model start as the same function.

Canonical layout (identical to PyTorch's, so `to_torch` is a copy):
  conv kernel  [out, in, kh, kw]   (OIHW; activations NCHW)
  dense kernel [out, in]           (y = x @ W.T + b)
  the dense layer after a flatten reads features in (C, H, W) order.

`to_keras` converts: conv kernel -> [kh, kw, in, out] (HWIO; activations NHWC), dense kernel ->
[in, out], and the rows of the first dense kernel after a flatten are reordered from
(C, H, W) to Keras' (H, W, C) flatten order.

Initialization follows PyTorch's defaults for Linear and Conv2d: weights and biases uniform in
[-1/sqrt(fan_in), 1/sqrt(fan_in)], drawn from `common.rng` streams keyed by (seed, layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.rng import stream_key, uniform

INIT_STREAM = 2


@dataclass(frozen=True)
class Layer:
    """One step of a model: conv (3x3, stride 1, no padding), relu, maxpool2, dropout, flatten,
    or dense. Only conv and dense hold parameters."""

    kind: str
    name: str = ""
    inputs: int = 0
    outputs: int = 0
    kernel: int = 0
    rate: float = 0.0


MODEL_SPECS: dict[str, tuple[Layer, ...]] = {
    "mlp": (
        Layer("flatten"),
        Layer("dense", "fc1", 784, 128),
        Layer("relu"),
        Layer("dropout", rate=0.2),
        Layer("dense", "fc2", 128, 64),
        Layer("relu"),
        Layer("dropout", rate=0.2),
        Layer("dense", "fc3", 64, 10),
    ),
    "cnn": (
        Layer("conv", "conv1", 1, 32, kernel=3),
        Layer("relu"),
        Layer("conv", "conv2", 32, 64, kernel=3),
        Layer("relu"),
        Layer("maxpool2"),
        Layer("dropout", rate=0.25),
        Layer("flatten"),
        Layer("dense", "fc1", 9216, 128),
        Layer("relu"),
        Layer("dropout", rate=0.5),
        Layer("dense", "fc2", 128, 10),
    ),
}

# Shape of the CNN's activations entering its flatten: (channels, height, width).
CNN_FLATTEN_CHW = (64, 12, 12)


def model_spec(name: str) -> tuple[Layer, ...]:
    if name not in MODEL_SPECS:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODEL_SPECS)}")
    return MODEL_SPECS[name]


def parameter_layers(name: str) -> list[Layer]:
    return [layer for layer in model_spec(name) if layer.kind in ("conv", "dense")]


def _canonical_shape(layer: Layer) -> tuple[int, ...]:
    if layer.kind == "conv":
        return (layer.outputs, layer.inputs, layer.kernel, layer.kernel)
    return (layer.outputs, layer.inputs)


def initial_weights(name: str, seed: int) -> dict[str, np.ndarray]:
    """{"fc1.weight": ..., "fc1.bias": ...} in the canonical layout, float32."""
    weights = {}
    for index, layer in enumerate(parameter_layers(name)):
        shape = _canonical_shape(layer)
        fan_in = int(np.prod(shape[1:]))
        bound = 1.0 / np.sqrt(fan_in)
        for part, part_shape in (("weight", shape), ("bias", (layer.outputs,))):
            key = stream_key(seed, INIT_STREAM, index, 0 if part == "weight" else 1)
            values = (uniform(key, int(np.prod(part_shape))) * 2.0 - 1.0) * bound
            weights[f"{layer.name}.{part}"] = values.reshape(part_shape).astype(np.float32)
    return weights


def to_torch(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The canonical layout is PyTorch's: a copy with the same names."""
    return {name: array.copy() for name, array in weights.items()}


def _dense_after_flatten(name: str) -> str | None:
    """The dense layer that reads a spatial flatten (its rows need reordering), if any."""
    spec = model_spec(name)
    for position, layer in enumerate(spec):
        if layer.kind == "flatten" and any(prev.kind == "conv" for prev in spec[:position]):
            return next(after.name for after in spec[position:] if after.kind == "dense")
    return None


def to_keras(name: str, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Keras layout: {"conv1.kernel": HWIO, "fc1.kernel": [in, out], "<layer>.bias": [out]}."""
    reorder = _dense_after_flatten(name)
    converted = {}
    for layer in parameter_layers(name):
        kernel = weights[f"{layer.name}.weight"]
        if layer.kind == "conv":
            kernel = kernel.transpose(2, 3, 1, 0)
        elif layer.name == reorder:
            channels, height, width = CNN_FLATTEN_CHW
            kernel = kernel.reshape(layer.outputs, channels, height, width)
            kernel = kernel.transpose(2, 3, 1, 0).reshape(height * width * channels, layer.outputs)
        else:
            kernel = kernel.T
        converted[f"{layer.name}.kernel"] = np.ascontiguousarray(kernel)
        converted[f"{layer.name}.bias"] = weights[f"{layer.name}.bias"].copy()
    return converted


def from_keras(name: str, keras_weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of `to_keras`: Keras-layout weights back to the canonical layout."""
    reorder = _dense_after_flatten(name)
    canonical = {}
    for layer in parameter_layers(name):
        kernel = keras_weights[f"{layer.name}.kernel"]
        if layer.kind == "conv":
            kernel = kernel.transpose(3, 2, 0, 1)
        elif layer.name == reorder:
            channels, height, width = CNN_FLATTEN_CHW
            kernel = kernel.reshape(height, width, channels, layer.outputs)
            kernel = kernel.transpose(3, 2, 0, 1).reshape(layer.outputs, -1)
        else:
            kernel = kernel.T
        canonical[f"{layer.name}.weight"] = np.ascontiguousarray(kernel)
        canonical[f"{layer.name}.bias"] = keras_weights[f"{layer.name}.bias"].copy()
    return canonical
