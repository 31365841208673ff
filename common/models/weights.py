"""The two MNIST models as data, at any size, and their deterministic initial weights.

Both frameworks build their layers from `model_spec(model)` and load `layer_weights(model,
seed)`, so a torch model and a Keras model start as the same function. `model` is a
`ModelConfig` (name plus size: `hidden` widths of the MLP, `width` multiplier of the CNN) or a
name alone for the seed sizes: MLP 784-128-64-10, the PyTorch example's CNN.

Canonical layout (identical to PyTorch's, so `to_torch` is a copy):
  conv kernel  [out, in, kh, kw]   (OIHW; activations NCHW)
  dense kernel [out, in]           (y = x @ W.T + b)
  the dense layer after a flatten reads features in (C, H, W) order.

`to_keras` converts: conv kernel -> [kh, kw, in, out] (HWIO; activations NHWC), dense kernel ->
[in, out], and the rows of the first dense kernel after a flatten are reordered from
(C, H, W) to Keras' (H, W, C) flatten order.

Initialization follows PyTorch's defaults for Linear and Conv2d: weights and biases uniform in
[-1/sqrt(fan_in), 1/sqrt(fan_in)], drawn from `common.data.rng` streams keyed by (seed, layer).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from common.data.rng import stream_key, uniform
from common.models.config import ModelConfig

INIT_STREAM = 2
CHUNK = 1 << 20  # values drawn at once: a big layer is filled in pieces of 8 MiB of float64


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


def _mlp(hidden: tuple[int, ...]) -> tuple[Layer, ...]:
    """flatten, then per hidden width dense-relu-dropout(0.2), then a dense of 10 logits."""
    layers, inputs = [Layer("flatten")], IMAGE_PIXELS
    for index, width in enumerate(hidden, start=1):
        layers += [Layer("dense", f"fc{index}", inputs, width), Layer("relu")]
        layers.append(Layer("dropout", rate=0.2))
        inputs = width
    return (*layers, Layer("dense", f"fc{len(hidden) + 1}", inputs, CLASSES))


def _cnn(width: int) -> tuple[Layer, ...]:
    """The PyTorch example's CNN with every hidden channel and unit count times `width`."""
    conv1, conv2, dense = 32 * width, 64 * width, 128 * width
    return (
        Layer("conv", "conv1", 1, conv1, kernel=3),
        Layer("relu"),
        Layer("conv", "conv2", conv1, conv2, kernel=3),
        Layer("relu"),
        Layer("maxpool2"),
        Layer("dropout", rate=0.25),
        Layer("flatten"),
        Layer("dense", "fc1", conv2 * 12 * 12, dense),
        Layer("relu"),
        Layer("dropout", rate=0.5),
        Layer("dense", "fc2", dense, CLASSES),
    )


IMAGE_PIXELS, CLASSES = 28 * 28, 10
MODELS = ("mlp", "cnn")
Model = str | ModelConfig
"""A model named alone ("mlp") is its seed size; a ModelConfig also carries hidden/width."""


def model_spec(model: Model) -> tuple[Layer, ...]:
    cfg = ModelConfig(name=model) if isinstance(model, str) else model
    if cfg.name not in MODELS:
        raise ValueError(f"unknown model {cfg.name!r}; allowed: {', '.join(MODELS)}")
    return _mlp(cfg.hidden) if cfg.name == "mlp" else _cnn(cfg.width)


def parameter_layers(model: Model) -> list[Layer]:
    return [layer for layer in model_spec(model) if layer.kind in ("conv", "dense")]


def _canonical_shape(layer: Layer) -> tuple[int, ...]:
    if layer.kind == "conv":
        return (layer.outputs, layer.inputs, layer.kernel, layer.kernel)
    return (layer.outputs, layer.inputs)


def parameter_count_of(layer: Layer) -> int:
    return math.prod(_canonical_shape(layer)) + layer.outputs


def parameter_count(model: Model) -> int:
    """Weights and biases of the whole model (what every rank holds without sharding)."""
    return sum(parameter_count_of(layer) for layer in parameter_layers(model))


def forward_macs(model: Model) -> int:
    """Multiply-accumulates of one sample's forward pass through the conv and dense layers
    (activations, pooling and dropout are not counted, as MFU conventions do)."""
    macs, height, width = 0, 28, 28
    for layer in model_spec(model):
        if layer.kind == "conv":
            height, width = height - layer.kernel + 1, width - layer.kernel + 1
            macs += height * width * layer.outputs * layer.inputs * layer.kernel**2
        elif layer.kind == "maxpool2":
            height, width = height // 2, width // 2
        elif layer.kind == "dense":
            macs += layer.inputs * layer.outputs
    return macs


def train_flops_per_sample(model: Model) -> int:
    """FLOPs of one training sample: 2 per MAC forward, twice that backward (gradients of the
    inputs and of the weights), so 6 x forward MACs, the convention MFU figures use."""
    return 6 * forward_macs(model)


def flatten_chw(model: Model) -> tuple[int, int, int]:
    """(channels, height, width) of the activations entering the model's flatten."""
    channels, height, width = 1, 28, 28
    for layer in model_spec(model):
        if layer.kind == "conv":
            channels = layer.outputs
            height, width = height - layer.kernel + 1, width - layer.kernel + 1
        elif layer.kind == "maxpool2":
            height, width = height // 2, width // 2
        elif layer.kind == "flatten":
            break
    return channels, height, width


def _uniform_float32(key: np.uint64, shape: tuple[int, ...], bound: float) -> np.ndarray:
    """Uniform in [-bound, bound), drawn in pieces: the float64 scratch stays CHUNK values."""
    out = np.empty(math.prod(shape), dtype=np.float32)
    for start in range(0, out.size, CHUNK):
        count = min(CHUNK, out.size - start)
        out[start : start + count] = (uniform(key, count, start) * 2.0 - 1.0) * bound
    return out.reshape(shape)


def layer_weights(model: Model, seed: int) -> Iterator[tuple[Layer, dict[str, np.ndarray]]]:
    """(layer, {"weight": ..., "bias": ...}) per parameter layer, in the canonical layout,
    float32, generated one layer at a time: a caller that copies each into its model and drops
    it never holds a second copy of the whole model."""
    for index, layer in enumerate(parameter_layers(model)):
        shape = _canonical_shape(layer)
        bound = 1.0 / np.sqrt(math.prod(shape[1:]))  # 1/sqrt(fan_in), as torch's defaults
        yield (
            layer,
            {
                "weight": _uniform_float32(stream_key(seed, INIT_STREAM, index, 0), shape, bound),
                "bias": _uniform_float32(stream_key(seed, INIT_STREAM, index, 1), shape[:1], bound),
            },
        )


def initial_weights(model: Model, seed: int) -> dict[str, np.ndarray]:
    """{"fc1.weight": ..., "fc1.bias": ...} in the canonical layout, float32 (the whole model
    at once: for tests and small models; builders use `layer_weights`)."""
    return {
        f"{layer.name}.{part}": array
        for layer, arrays in layer_weights(model, seed)
        for part, array in arrays.items()
    }


def to_torch(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The canonical layout is PyTorch's: a copy with the same names."""
    return {name: array.copy() for name, array in weights.items()}


def _dense_after_flatten(model: Model) -> str | None:
    """The dense layer that reads a spatial flatten (its rows need reordering), if any."""
    spec = model_spec(model)
    for position, layer in enumerate(spec):
        if layer.kind == "flatten" and any(prev.kind == "conv" for prev in spec[:position]):
            return next(after.name for after in spec[position:] if after.kind == "dense")
    return None


def kernel_to_keras(model: Model, layer: Layer, weight: np.ndarray) -> np.ndarray:
    """One layer's canonical weight in Keras' kernel layout: conv HWIO, dense [in, out], the
    dense layer after a spatial flatten with its rows in Keras' (H, W, C) order."""
    if layer.kind == "conv":
        return np.ascontiguousarray(weight.transpose(2, 3, 1, 0))
    if layer.name == _dense_after_flatten(model):
        channels, height, width = flatten_chw(model)
        kernel = weight.reshape(layer.outputs, channels, height, width).transpose(2, 3, 1, 0)
        return np.ascontiguousarray(kernel.reshape(height * width * channels, layer.outputs))
    return np.ascontiguousarray(weight.T)


def kernel_from_keras(model: Model, layer: Layer, kernel: np.ndarray) -> np.ndarray:
    """The inverse of `kernel_to_keras`."""
    if layer.kind == "conv":
        return np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))
    if layer.name == _dense_after_flatten(model):
        channels, height, width = flatten_chw(model)
        weight = kernel.reshape(height, width, channels, layer.outputs).transpose(3, 2, 0, 1)
        return np.ascontiguousarray(weight.reshape(layer.outputs, -1))
    return np.ascontiguousarray(kernel.T)


def to_keras(model: Model, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Keras layout: {"conv1.kernel": HWIO, "fc1.kernel": [in, out], "<layer>.bias": [out]}."""
    converted = {}
    for layer in parameter_layers(model):
        weight = weights[f"{layer.name}.weight"]
        converted[f"{layer.name}.kernel"] = kernel_to_keras(model, layer, weight)
        converted[f"{layer.name}.bias"] = weights[f"{layer.name}.bias"].copy()
    return converted


def from_keras(model: Model, keras_weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of `to_keras`: Keras-layout weights back to the canonical layout."""
    canonical = {}
    for layer in parameter_layers(model):
        kernel = keras_weights[f"{layer.name}.kernel"]
        canonical[f"{layer.name}.weight"] = kernel_from_keras(model, layer, kernel)
        canonical[f"{layer.name}.bias"] = keras_weights[f"{layer.name}.bias"].copy()
    return canonical
