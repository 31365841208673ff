"""The models in PyTorch, built from their description (`common.models.zoo.Net`). No
distributed code.

A model is first made on the meta device (shapes, no storage), so that its size costs nothing
until a strategy decides where its parameters live; `load_initial_weights` then fills them one
layer at a time from `common.models.weights.layer_weights`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from common.models import weights, zoo
from torch_impl.layers import dropout, make, named

__all__ = ["Model", "build_model", "dropout", "keep_gradient_strides", "meta_model"]


class Model(nn.Module):
    """Runs a described model; every layer is a child module, named by its canonical name.

    The image stage runs channels-last (NHWC, TensorFlow's layout too), where the CPU's
    convolutions and pooling run faster (docs/performance.md). Parameters keep their usual
    layout, so DDP's buckets and FSDP's flat or sharded parameters see ordinary tensors.
    Results equal NCHW's to rounding.
    """

    def __init__(self, net: zoo.Net):
        super().__init__()
        self.net = net
        self.order: list[str] = []
        shapes = []
        shape = net.inputs
        for index, layer in enumerate(net.layers):
            name = named(layer, index)
            self.add_module(name, make(layer))
            self.order.append(name)
            shape = layer.output_shape(shape)
            shapes.append(shape)
        images = [index for index, shape in enumerate(shapes) if len(shape) == 3]
        self.last_image = images[-1] if images else None  # its output goes back to NCHW

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [N, C, H, W] (NCHW) -> logits [N, classes]."""
        x = channels_last(images) if self.last_image is not None else images
        for index, name in enumerate(self.order):
            x = self.get_submodule(name)(x)
            if index == self.last_image:
                x = _ToContiguous.apply(x)
        return x


def channels_last(images: torch.Tensor) -> torch.Tensor:
    """`images` [N, C, H, W] with channels-last strides. With one channel both layouts hold the
    same bytes and torch calls the tensor contiguous, so `.contiguous(channels_last)` keeps the
    NCHW strides and the convolution stays NCHW: the strides are then set by a view."""
    n, c, h, w = images.shape
    if c > 1:
        return images.contiguous(memory_format=torch.channels_last)
    return images.contiguous().as_strided((n, c, h, w), (h * w, 1, w, 1))


def keep_gradient_strides(model: Model) -> None:
    """A one-input-channel convolution's weight gradient comes back with channels-last strides
    ([32, 1, 3, 3]: (9, 1, 3, 1), the weight's are (9, 9, 3, 1)): the same bytes, as the size-1
    dimension's stride addresses nothing, but DDP's reducer compares strides and warns "Grad
    strides do not match bucket view strides". A hook restrides the gradient as a view."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d) and module.in_channels == 1:
            weight = module.weight
            weight.register_hook(lambda grad, w=weight: grad.as_strided(w.shape, w.stride()))


class _ToContiguous(torch.autograd.Function):
    """NCHW again after the image stage (dropout, flatten and the dense layers see the usual
    layout), with the gradient handed back channels-last: without this, the backward of
    max-pooling and ReLU ran on mixed layouts and copied (1.02-1.04x over NCHW, not 1.06x)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001 - autograd's context
        return x.contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return grad.contiguous(memory_format=torch.channels_last)


def meta_model(net: zoo.Net) -> Model:
    """The model's modules and shapes on the meta device: no storage, no initialization."""
    with torch.device("meta"):
        return Model(net)


def load_initial_weights(
    model: Model, seed: int, local_part: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> None:
    """Copy the shared initial weights of `seed` (and buffers' starting values) into `model`'s
    materialized tensors, one layer at a time. `local_part(tensor, full)` is what of the whole
    tensor this process keeps (all of it, or its shard under FSDP2)."""
    with torch.no_grad():
        for spot, arrays in weights.layer_weights(model.net, seed):
            module = model.get_submodule(spot.name)
            for part, array in arrays.items():
                tensor = getattr(module, part)
                tensor.copy_(local_part(tensor, torch.from_numpy(array)))


def build_model(net: zoo.Net, seed: int, device: torch.device | str = "cpu") -> Model:
    """The whole model on `device` in fp32, holding the shared initial weights of `seed`."""
    model = meta_model(net).to_empty(device=device)
    load_initial_weights(model, seed, lambda tensor, full: full)
    return model


def units(net: zoo.Net) -> dict[str, int]:
    """The top-level layers that hold parameters (a residual block is one, with all it holds),
    with their parameter counts: the candidate FSDP units, in forward order."""
    found: dict[str, int] = {}
    for spot in weights.parameter_layers(net):
        top = spot.name.split(".")[0]
        count = sum(math.prod(shape) for shape in spot.layer.parameters(spot.inputs).values())
        found[top] = found.get(top, 0) + count
    return found
