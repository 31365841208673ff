"""A numpy forward pass of the MNIST models in either framework's layout (inference: dropout
is the identity). It pins down what `common.models.weights.to_keras` must preserve: the same logits
from PyTorch-layout weights on NCHW input and from Keras-layout weights on NHWC input.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from common.models.weights import model_spec


def _conv_nchw(x: np.ndarray, kernel_oihw: np.ndarray, bias: np.ndarray) -> np.ndarray:
    size = kernel_oihw.shape[2]
    windows = sliding_window_view(x, (size, size), axis=(2, 3))  # N C H' W' kh kw
    return np.einsum("nchwij,ocij->nohw", windows, kernel_oihw) + bias[None, :, None, None]


def _conv_nhwc(x: np.ndarray, kernel_hwio: np.ndarray, bias: np.ndarray) -> np.ndarray:
    size = kernel_hwio.shape[0]
    windows = sliding_window_view(x, (size, size), axis=(1, 2))  # N H' W' C kh kw
    return np.einsum("nhwcij,ijco->nhwo", windows, kernel_hwio) + bias


def _maxpool2(x: np.ndarray, channels_last: bool) -> np.ndarray:
    if channels_last:
        n, h, w, c = x.shape
        return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def forward(model: str, weights: dict[str, np.ndarray], images: np.ndarray, layout: str):
    """Logits for `images` [N, 28, 28] (normalized) with weights in `layout` torch|keras."""
    if layout not in ("torch", "keras"):
        raise ValueError(f"layout must be 'torch' or 'keras', got {layout!r}")
    channels_last = layout == "keras"
    x = images.astype(np.float64)
    x = x[..., None] if channels_last else x[:, None, :, :]
    for layer in model_spec(model):
        if layer.kind == "conv":
            kernel = weights[f"{layer.name}.kernel" if channels_last else f"{layer.name}.weight"]
            conv = _conv_nhwc if channels_last else _conv_nchw
            x = conv(x, kernel, weights[f"{layer.name}.bias"])
        elif layer.kind == "dense":
            if channels_last:
                x = x @ weights[f"{layer.name}.kernel"] + weights[f"{layer.name}.bias"]
            else:
                x = x @ weights[f"{layer.name}.weight"].T + weights[f"{layer.name}.bias"]
        elif layer.kind == "relu":
            x = np.maximum(x, 0.0)
        elif layer.kind == "maxpool2":
            x = _maxpool2(x, channels_last)
        elif layer.kind == "flatten":
            x = x.reshape(len(x), -1)
        elif layer.kind != "dropout":
            raise ValueError(f"reference forward does not know layer kind {layer.kind!r}")
    return x
