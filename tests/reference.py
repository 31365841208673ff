"""A numpy forward pass of the models in either framework's layout (inference: dropout is the
identity, batch normalization uses its running statistics). It pins down what
`common.models.layouts` must preserve: the same logits from PyTorch-layout weights on NCHW input
and from Keras-layout weights on NHWC input.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from common.models import layers, weights, zoo
from common.models.config import ModelConfig


def net(name: str = "mlp", dataset: str = "mnist", **sizes) -> zoo.Net:
    """The description of model `name` (at `sizes`: hidden=, width=, dropout=)."""
    return zoo.describe(ModelConfig(name=name, **sizes), dataset)


def _conv(x: np.ndarray, kernel: np.ndarray, layer: layers.Conv, channels_last: bool):
    pad = layer.padding
    if channels_last:
        x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        windows = sliding_window_view(x, (layer.kernel,) * 2, axis=(1, 2))  # N H W C kh kw
        windows = windows[:, :: layer.stride, :: layer.stride]
        return np.einsum("nhwcij,ijco->nhwo", windows, kernel)
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = sliding_window_view(x, (layer.kernel,) * 2, axis=(2, 3))  # N C H W kh kw
    windows = windows[:, :, :: layer.stride, :: layer.stride]
    return np.einsum("nchwij,ocij->nohw", windows, kernel)


def _channel(values: np.ndarray, channels_last: bool) -> np.ndarray:
    """A per-channel vector broadcast over an activation of either layout."""
    return values if channels_last else values[None, :, None, None]


def _apply(layer, name, x, weights, channels_last):
    def get(torch_part, keras_part):
        return weights[f"{name}.{keras_part if channels_last else torch_part}"]

    if isinstance(layer, layers.Conv):
        y = _conv(x, get("weight", "kernel"), layer, channels_last)
        return y + _channel(get("bias", "bias"), channels_last) if layer.bias else y
    if isinstance(layer, layers.Dense):
        kernel = get("weight", "kernel")
        return x @ (kernel if channels_last else kernel.T) + get("bias", "bias")
    if isinstance(layer, layers.BatchNorm):
        scale = get("weight", "gamma") / np.sqrt(get("running_var", "moving_variance") + layer.eps)
        shift = get("bias", "beta") - get("running_mean", "moving_mean") * scale
        if x.ndim == 2:
            return x * scale + shift
        return x * _channel(scale, channels_last) + _channel(shift, channels_last)
    if isinstance(layer, layers.Residual):
        body, shortcut = x, x
        for inner in layer.body:
            body = _apply(inner, f"{name}.{inner.name}", body, weights, channels_last)
        for inner in layer.shortcut:
            shortcut = _apply(inner, f"{name}.{inner.name}", shortcut, weights, channels_last)
        return body + shortcut
    if isinstance(layer, layers.ReLU):
        return np.maximum(x, 0.0)
    if isinstance(layer, layers.MaxPool):
        size = layer.size
        if channels_last:
            n, h, w, c = x.shape
            return x.reshape(n, h // size, size, w // size, size, c).max(axis=(2, 4))
        n, c, h, w = x.shape
        return x.reshape(n, c, h // size, size, w // size, size).max(axis=(3, 5))
    if isinstance(layer, layers.Flatten):
        return x.reshape(len(x), -1)
    if isinstance(layer, layers.GlobalAvgPool):
        return x.mean(axis=(1, 2) if channels_last else (2, 3))
    if isinstance(layer, layers.Dropout):
        return x
    raise ValueError(f"reference forward does not know layer kind {layer.kind!r}")


def forward(model: zoo.Net, weights: dict[str, np.ndarray], images: np.ndarray, layout: str):
    """Logits for `images` [N, 28, 28] (normalized) with weights in `layout` torch|keras."""
    if layout not in ("torch", "keras"):
        raise ValueError(f"layout must be 'torch' or 'keras', got {layout!r}")
    channels_last = layout == "keras"
    x = images.astype(np.float64)
    x = x[..., None] if channels_last else x[:, None, :, :]
    for layer in model.layers:
        x = _apply(layer, layer.name, x, weights, channels_last)
    return x


def initial_weights(described: zoo.Net, seed: int) -> dict[str, np.ndarray]:
    """{"fc1.weight": ..., "bn1.running_mean": ...}: the whole model at once, in the canonical
    layout, float32 (the builders take `weights.layer_weights` a layer at a time)."""
    return {
        f"{spot.name}.{part}": array
        for spot, arrays in weights.layer_weights(described, seed)
        for part, array in arrays.items()
    }


def to_torch(canonical: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The canonical layout is PyTorch's: a copy with the same names."""
    return {name: array.copy() for name, array in canonical.items()}
