"""The layer kinds a model is described with, each knowing its own arithmetic: the shape it
gives, the parameters and buffers it holds (canonical, PyTorch's layout), how they start, and
its forward multiply-accumulates. Both frameworks build one layer of their own per kind
(`torch_impl.layers`, `tf_impl.layers`), so a new kind is this file plus one function on each
side.

Shapes are (channels, height, width) for images and (features,) after a flatten or a pooling
to one value per channel. Canonical layouts: conv weight [out, in, kh, kw], dense weight
[out, in], batch-norm weight/bias/running_mean/running_var [features].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Layer:
    """A step of a model with no parameters of its own (ReLU and the like)."""

    kind: ClassVar[str] = "layer"
    keras_parts: ClassVar[dict[str, str]] = {}
    """Canonical part -> the Keras layer's weight, in the Keras layer's order."""
    name: str = ""

    def output_shape(self, shape: Shape) -> Shape:
        return shape

    def parameters(self, shape: Shape) -> dict[str, Shape]:
        """Trainable tensors by name, canonical shapes; {} for none."""
        return {}

    def buffers(self, shape: Shape) -> dict[str, Shape]:
        """State that is not trained but belongs to the model (running statistics)."""
        return {}

    def macs(self, shape: Shape) -> int:
        """Forward multiply-accumulates of one sample (only convolutions and dense layers
        count, as MFU conventions do)."""
        return 0

    @property
    def random_init(self) -> bool:
        """Starts from random numbers (drawn from the model's init streams)."""
        return False


@dataclass(frozen=True)
class Conv(Layer):
    kind: ClassVar[str] = "conv"
    keras_parts: ClassVar[dict[str, str]] = {"weight": "kernel", "bias": "bias"}
    inputs: int = 0
    outputs: int = 0
    kernel: int = 3
    stride: int = 1
    padding: int = 0
    """Zeros on every side (symmetric, as torch's padding=p; Keras pads explicitly)."""
    bias: bool = True

    def output_shape(self, shape: Shape) -> Shape:
        _, height, width = shape
        reach = 2 * self.padding - self.kernel
        return (
            self.outputs,
            (height + reach) // self.stride + 1,
            (width + reach) // self.stride + 1,
        )

    def parameters(self, shape: Shape) -> dict[str, Shape]:
        found = {"weight": (self.outputs, self.inputs, self.kernel, self.kernel)}
        return found | ({"bias": (self.outputs,)} if self.bias else {})

    def macs(self, shape: Shape) -> int:
        _, height, width = self.output_shape(shape)
        return height * width * self.outputs * self.inputs * self.kernel**2

    @property
    def random_init(self) -> bool:
        return True


@dataclass(frozen=True)
class Dense(Layer):
    kind: ClassVar[str] = "dense"
    keras_parts: ClassVar[dict[str, str]] = {"weight": "kernel", "bias": "bias"}
    inputs: int = 0
    outputs: int = 0

    def output_shape(self, shape: Shape) -> Shape:
        return (self.outputs,)

    def parameters(self, shape: Shape) -> dict[str, Shape]:
        return {"weight": (self.outputs, self.inputs), "bias": (self.outputs,)}

    def macs(self, shape: Shape) -> int:
        return self.inputs * self.outputs

    @property
    def random_init(self) -> bool:
        return True


@dataclass(frozen=True)
class BatchNorm(Layer):
    """Normalizes each channel over the batch (and the image) while training, by its running
    statistics while evaluating, PyTorch's way: running = (1 - momentum) x running +
    momentum x batch, the running variance unbiased. The batch is the global batch: the
    statistics are summed over every data-parallel rank, so one rank and N ranks at the same
    global batch compute the same (synchronized batch normalization)."""

    kind: ClassVar[str] = "batchnorm"
    keras_parts: ClassVar[dict[str, str]] = {
        "weight": "gamma",
        "bias": "beta",
        "running_mean": "moving_mean",
        "running_var": "moving_variance",
    }
    features: int = 0
    momentum: float = 0.1
    eps: float = 1e-5

    def parameters(self, shape: Shape) -> dict[str, Shape]:
        return {"weight": (self.features,), "bias": (self.features,)}

    def buffers(self, shape: Shape) -> dict[str, Shape]:
        return {"running_mean": (self.features,), "running_var": (self.features,)}


@dataclass(frozen=True)
class ReLU(Layer):
    kind: ClassVar[str] = "relu"


@dataclass(frozen=True)
class MaxPool(Layer):
    kind: ClassVar[str] = "maxpool"
    size: int = 2

    def output_shape(self, shape: Shape) -> Shape:
        channels, height, width = shape
        return (channels, height // self.size, width // self.size)


@dataclass(frozen=True)
class Dropout(Layer):
    kind: ClassVar[str] = "dropout"
    rate: float = 0.0


@dataclass(frozen=True)
class Flatten(Layer):
    kind: ClassVar[str] = "flatten"

    def output_shape(self, shape: Shape) -> Shape:
        return (math.prod(shape),)


@dataclass(frozen=True)
class GlobalAvgPool(Layer):
    """The mean of each channel over the image: (C, H, W) -> (C,)."""

    kind: ClassVar[str] = "globalavgpool"

    def output_shape(self, shape: Shape) -> Shape:
        return (shape[0],)


@dataclass(frozen=True)
class Residual(Layer):
    """body(x) + shortcut(x), the shortcut the identity when it is empty; the layers inside are
    named within the block ("<block>.<layer>")."""

    kind: ClassVar[str] = "residual"
    body: tuple[Layer, ...] = ()
    shortcut: tuple[Layer, ...] = ()

    def output_shape(self, shape: Shape) -> Shape:
        for layer in self.body:
            shape = layer.output_shape(shape)
        return shape

    def macs(self, shape: Shape) -> int:
        total, inner = 0, shape
        for layer in self.body:
            total, inner = total + layer.macs(inner), layer.output_shape(inner)
        inner = shape
        for layer in self.shortcut:
            total, inner = total + layer.macs(inner), layer.output_shape(inner)
        return total
