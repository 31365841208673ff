"""The models, each one description both frameworks build from: MLP, the PyTorch example's CNN
and a small ResNet (ResNet-8), at any size. A new model is a function here and one registry
entry; a new layer kind is a class in `common.models.layers` and one builder per framework.

`describe(model_cfg, dataset)` gives the `Net`: the model's layers for the dataset's input shape
and class count (`common.data.datasets`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from common.data.datasets import DATASETS, DatasetSpec
from common.models.layers import (
    BatchNorm,
    Conv,
    Dense,
    Dropout,
    Flatten,
    GlobalAvgPool,
    Layer,
    MaxPool,
    ReLU,
    Residual,
    Shape,
)


class Sizes(Protocol):
    """What the builders read of a model's config (`common.models.config.ModelConfig` has
    them): the zoo needs no config class, so the config can import the registry."""

    @property
    def hidden(self) -> tuple[int, ...]: ...
    @property
    def width(self) -> int: ...
    @property
    def dropout(self) -> bool: ...


class Chosen(Sizes, Protocol):
    """A model of the registry by name, with its sizes (what `describe` reads)."""

    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class Net:
    """A model's description: its name, what one sample looks like, and its layers."""

    name: str
    inputs: Shape
    """(channels, height, width) of one sample."""
    classes: int
    layers: tuple[Layer, ...]


def mlp(cfg: Sizes, inputs: Shape, classes: int) -> tuple[Layer, ...]:
    """flatten, then per hidden width dense-relu-dropout(0.2), then a dense of the logits."""
    layers: list[Layer] = [Flatten()]
    features = inputs[0] * inputs[1] * inputs[2]
    for index, width in enumerate(cfg.hidden, start=1):
        layers += [Dense(f"fc{index}", features, width), ReLU()]
        layers += [Dropout(rate=0.2)] if cfg.dropout else []
        features = width
    return (*layers, Dense(f"fc{len(cfg.hidden) + 1}", features, classes))


def cnn(cfg: Sizes, inputs: Shape, classes: int) -> tuple[Layer, ...]:
    """The PyTorch example's CNN with every hidden channel and unit count times model.width."""
    conv1, conv2, dense = 32 * cfg.width, 64 * cfg.width, 128 * cfg.width
    pooled = ((inputs[1] - 4) // 2) * ((inputs[2] - 4) // 2)
    return (
        Conv("conv1", inputs[0], conv1, kernel=3),
        ReLU(),
        Conv("conv2", conv1, conv2, kernel=3),
        ReLU(),
        MaxPool(size=2),
        *([Dropout(rate=0.25)] if cfg.dropout else []),
        Flatten(),
        Dense("fc1", conv2 * pooled, dense),
        ReLU(),
        *([Dropout(rate=0.5)] if cfg.dropout else []),
        Dense("fc2", dense, classes),
    )


def _basic_block(name: str, inputs: int, outputs: int, stride: int) -> Residual:
    """Two 3x3 convolutions with batch normalization; a 1x1 convolution on the shortcut when
    the shape changes (He et al. 2016, option B)."""
    body: tuple[Layer, ...] = (
        Conv("conv1", inputs, outputs, kernel=3, stride=stride, padding=1, bias=False),
        BatchNorm("bn1", features=outputs),
        ReLU(),
        Conv("conv2", outputs, outputs, kernel=3, padding=1, bias=False),
        BatchNorm("bn2", features=outputs),
    )
    shortcut: tuple[Layer, ...] = ()
    if stride != 1 or inputs != outputs:
        shortcut = (
            Conv("shortcut", inputs, outputs, kernel=1, stride=stride, bias=False),
            BatchNorm("shortcut_bn", features=outputs),
        )
    return Residual(name, body=body, shortcut=shortcut)


def resnet8(cfg: Sizes, inputs: Shape, classes: int) -> tuple[Layer, ...]:
    """A 3x3 stem, three stages of one basic block (16, 32, 64 channels x model.width, the
    later two halving the image), global average pooling and a dense layer: 8 layers with
    weights on the main path."""
    widths = [16 * cfg.width, 32 * cfg.width, 64 * cfg.width]
    return (
        Conv("conv1", inputs[0], widths[0], kernel=3, padding=1, bias=False),
        BatchNorm("bn1", features=widths[0]),
        ReLU(),
        _basic_block("block1", widths[0], widths[0], stride=1),
        ReLU(),
        _basic_block("block2", widths[0], widths[1], stride=2),
        ReLU(),
        _basic_block("block3", widths[1], widths[2], stride=2),
        ReLU(),
        GlobalAvgPool(),
        Dense("fc", widths[2], classes),
    )


@dataclass(frozen=True)
class ModelEntry:
    name: str
    summary: str
    size_key: str
    """The model.* key that sizes it (a field of `common.models.config.ModelConfig` whose
    default is the unsized model); every other model's size key stays at its default. An
    integer key N is written `<model>:<its first letter>N` on the size axis (`resnet8:w4`)."""
    layers: Callable[[Sizes, Shape, int], tuple[Layer, ...]]


MODELS: dict[str, ModelEntry] = {
    entry.name: entry
    for entry in (
        ModelEntry("mlp", "784-128-64-10 (model.hidden sets the widths)", "hidden", mlp),
        ModelEntry("cnn", "conv32-conv64-maxpool-fc128-fc10 (x model.width)", "width", cnn),
        ModelEntry(
            "resnet8",
            "stem, 3 residual stages of 16/32/64 channels (x model.width) with batch "
            "normalization, global average pooling",
            "width",
            resnet8,
        ),
    )
}


def blocks(net: Net) -> list[str]:
    """The names of the model's residual blocks, in forward order: what activation
    checkpointing recomputes (`model.activation_checkpointing`)."""
    return [layer.name for layer in net.layers if isinstance(layer, Residual)]


def describe(cfg: Chosen, dataset: DatasetSpec | str = "mnist") -> Net:
    """The model `cfg` describes, for `dataset`'s samples and classes."""
    data = DATASETS[dataset] if isinstance(dataset, str) else dataset
    layers = MODELS[cfg.name].layers(cfg, data.input_shape, data.classes)
    return Net(cfg.name, data.input_shape, data.classes, layers)
