"""A model description (`common.models.zoo.Net`) as numbers: every layer with the shape it
sees, parameter counts, FLOPs per sample, and the deterministic initial weights both frameworks
load, so that a torch model and a Keras model start as the same function.

Canonical names and layouts are PyTorch's state-dict names and layouts ("fc1.weight",
"block2.conv1.weight" [out, in, kh, kw], "bn1.running_var"); `common.models.layouts` turns them
into Keras' and back.

Initialization follows PyTorch's defaults: convolution and dense weights and biases uniform in
[-1/sqrt(fan_in), 1/sqrt(fan_in)], drawn from `common.data.rng` streams keyed by (seed, the
layer's index among the randomly initialized layers, part); batch normalization starts at
weight 1, bias 0, running mean 0, running variance 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from common.data.rng import stream_key, uniform
from common.models.layers import Flatten, Layer, Residual, Shape
from common.models.zoo import Net

INIT_STREAM = 2
CHUNK = 1 << 20  # values drawn at once: a big layer is filled in pieces of 8 MiB of float64
ONES = ("running_var",)  # parts that start at 1; weight of a batch norm too (see `_start`)


@dataclass(frozen=True)
class Placed:
    """One layer where it stands in its model: its qualified name and the shape entering it."""

    name: str
    layer: Layer
    inputs: Shape


def placed(net: Net) -> list[Placed]:
    """Every layer in forward order, with the shape entering it; a residual block's layers
    follow it (its body, then its shortcut), named "<block>.<layer>"."""
    found: list[Placed] = []

    def visit(layers: tuple[Layer, ...], shape: Shape, prefix: str) -> Shape:
        for layer in layers:
            found.append(Placed(prefix + layer.name, layer, shape))
            if isinstance(layer, Residual):
                visit(layer.body, shape, f"{prefix}{layer.name}.")
                visit(layer.shortcut, shape, f"{prefix}{layer.name}.")
            shape = layer.output_shape(shape)
        return shape

    visit(net.layers, net.inputs, "")
    return found


def parameter_layers(net: Net) -> list[Placed]:
    """The layers that hold parameters or buffers, in forward order."""
    return [p for p in placed(net) if p.layer.parameters(p.inputs) or p.layer.buffers(p.inputs)]


def parameter_shapes(net: Net) -> dict[str, list[tuple[int, ...]]]:
    """Every top-level layer's parameter shapes (a residual block is one layer with all it
    holds), in forward order: what a wrapper gathers and reduces."""
    found: dict[str, list[tuple[int, ...]]] = {}
    for spot in parameter_layers(net):
        shapes = spot.layer.parameters(spot.inputs).values()
        found.setdefault(spot.name.split(".")[0], []).extend(tuple(shape) for shape in shapes)
    return found


def parameter_count(net: Net) -> int:
    """Trained numbers of the whole model (what every rank holds without sharding)."""
    return sum(
        math.prod(shape)
        for p in parameter_layers(net)
        for shape in p.layer.parameters(p.inputs).values()
    )


def forward_macs(net: Net) -> int:
    """Multiply-accumulates of one sample's forward pass through the convolutions and dense
    layers (normalization, activations, pooling and dropout are not counted, as MFU
    conventions do)."""
    shape, total = net.inputs, 0
    for layer in net.layers:
        total, shape = total + layer.macs(shape), layer.output_shape(shape)
    return total


def train_flops_per_sample(net: Net) -> int:
    """FLOPs of one training sample: 2 per MAC forward, twice that backward (gradients of the
    inputs and of the weights), so 6 x forward MACs, the convention MFU figures use."""
    return 6 * forward_macs(net)


def flatten_input(net: Net) -> tuple[str, Shape] | None:
    """(the dense layer that reads a spatial flatten, the (C, H, W) shape flattened); None when
    no dense layer reads an image flattened (its rows then need no reordering for Keras)."""
    spots = placed(net)
    for position, spot in enumerate(spots):
        if isinstance(spot.layer, Flatten) and len(spot.inputs) == 3:
            dense = next(after for after in spots[position:] if after.layer.kind == "dense")
            return dense.name, spot.inputs
    return None


def _uniform_float32(key: np.uint64, shape: Shape, bound: float) -> np.ndarray:
    """Uniform in [-bound, bound), drawn in pieces: the float64 scratch stays CHUNK values."""
    out = np.empty(math.prod(shape), dtype=np.float32)
    for start in range(0, out.size, CHUNK):
        count = min(CHUNK, out.size - start)
        out[start : start + count] = (uniform(key, count, start) * 2.0 - 1.0) * bound
    return out.reshape(shape)


def _start(layer: Layer, part: str, shape: Shape) -> np.ndarray:
    """A part that does not start random: batch norm's weight and running variance 1, the
    rest 0."""
    one = part in ONES or (layer.kind == "batchnorm" and part == "weight")
    return np.full(shape, 1.0 if one else 0.0, dtype=np.float32)


def layer_weights(net: Net, seed: int) -> Iterator[tuple[Placed, dict[str, np.ndarray]]]:
    """(layer, {part: array}) for every layer with parameters or buffers, canonical layout,
    float32, generated one layer at a time: a caller that copies each into its model and drops
    it never holds a second copy of the whole model."""
    drawn = 0
    for spot in parameter_layers(net):
        parts = spot.layer.parameters(spot.inputs)
        arrays = {}
        if spot.layer.random_init:
            fan_in = math.prod(parts["weight"][1:])  # 1/sqrt(fan_in), as torch's defaults
            for number, (part, shape) in enumerate(parts.items()):
                key = stream_key(seed, INIT_STREAM, drawn, number)
                arrays[part] = _uniform_float32(key, shape, 1.0 / np.sqrt(fan_in))
            drawn += 1
        else:
            arrays = {part: _start(spot.layer, part, shape) for part, shape in parts.items()}
        for part, shape in spot.layer.buffers(spot.inputs).items():
            arrays[part] = _start(spot.layer, part, shape)
        yield spot, arrays
