"""The MNIST models in PyTorch, built from `common.models.weights.model_spec`. No distributed code.

A model is first made on the meta device (shapes, no storage), so that its size costs nothing
until a strategy decides where its parameters live; `load_initial_weights` then fills them one
layer at a time from `common.models.weights.layer_weights`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from common.models import weights
from common.models.config import ModelConfig


class MnistNet(nn.Module):
    """Runs a `common.models.weights` layer list; conv and dense layers are child modules by name.

    The convolutional stage runs channels-last (NHWC, TensorFlow's layout too): on this 2-core
    CPU the CNN's conv2 ran 3.5x faster forward and 1.5x forward and backward in it, max-pooling
    8x (5.1 ms of a 33 ms step in NCHW). Parameters keep their usual layout, so DDP's buckets
    and FSDP's flat or sharded parameters see ordinary tensors. Results equal NCHW's to
    rounding.
    """

    def __init__(self, model_cfg: ModelConfig):
        super().__init__()
        self.model_cfg = model_cfg
        self.spec = weights.model_spec(model_cfg)
        self.dropout = model_cfg.dropout
        spatial = [i for i, layer in enumerate(self.spec) if layer.kind in ("conv", "maxpool2")]
        self.last_spatial = spatial[-1] if spatial else None
        for layer in self.spec:
            if layer.kind == "conv":
                self.add_module(layer.name, nn.Conv2d(layer.inputs, layer.outputs, layer.kernel))
            elif layer.kind == "dense":
                self.add_module(layer.name, nn.Linear(layer.inputs, layer.outputs))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [N, 1, 28, 28] (NCHW) -> logits [N, 10]."""
        x = channels_last(images) if self.last_spatial is not None else images
        for index, layer in enumerate(self.spec):
            if layer.kind in ("conv", "dense"):
                x = getattr(self, layer.name)(x)
            elif layer.kind == "relu":
                x = F.relu(x)
            elif layer.kind == "maxpool2":
                x = F.max_pool2d(x, 2)
            elif layer.kind == "flatten":
                x = torch.flatten(x, 1)
            elif layer.kind == "dropout":
                x = dropout(x, layer.rate, training=self.training and self.dropout)
            if index == self.last_spatial:
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


def keep_gradient_strides(model: MnistNet) -> None:
    """A one-input-channel convolution's weight gradient comes back with channels-last strides
    ([32, 1, 3, 3]: (9, 1, 3, 1), the weight's are (9, 9, 3, 1)): the same bytes, as the size-1
    dimension's stride addresses nothing, but DDP's reducer compares strides and warns "Grad
    strides do not match bucket view strides". A hook restrides the gradient as a view."""
    for layer in model.spec:
        if layer.kind == "conv" and layer.inputs == 1:
            weight = getattr(model, layer.name).weight
            weight.register_hook(lambda grad, w=weight: grad.as_strided(w.shape, w.stride()))


class _ToContiguous(torch.autograd.Function):
    """NCHW again after the convolutional stage (dropout, flatten and the dense layers see the
    usual layout), with the gradient handed back channels-last: without this, the backward of
    max-pooling and ReLU ran on mixed layouts and copied (1.02-1.04x over NCHW, not 1.06x)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous(memory_format=torch.channels_last)


def dropout(x: torch.Tensor, rate: float, training: bool) -> torch.Tensor:
    """`F.dropout` (inverted: kept values scaled by 1 / (1 - rate)), with the mask drawn as TF's
    Dropout draws it on CPU: a uniform number per element compared with the rate. torch's CPU
    `bernoulli_` fills element by element unless MKL runs on an Intel CPU; on this AMD machine
    it took 4.1 ms for the CNN's [64, 64, 12, 12] mask where `torch.rand` takes 1.4. The same
    generator is drawn from, so seeding and checkpointed RNG state still decide the masks. On
    GPUs `F.dropout` is one fused kernel: kept."""
    if not training or rate == 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, rate, training=True)
    noise = (torch.rand(x.shape, device=x.device) >= rate).to(x.dtype).div_(1 - rate)
    return x * noise


def meta_model(model_cfg: ModelConfig) -> MnistNet:
    """The model's modules and shapes on the meta device: no storage, no initialization."""
    with torch.device("meta"):
        return MnistNet(model_cfg)


def load_initial_weights(
    model: MnistNet, seed: int, local_part: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> None:
    """Copy the shared initial weights of `seed` into `model`'s materialized parameters, one
    layer at a time. `local_part(param, full)` is what of the whole tensor this process keeps
    (all of it, or its shard under FSDP2)."""
    with torch.no_grad():
        for layer, arrays in weights.layer_weights(model.model_cfg, seed):
            module = getattr(model, layer.name)
            for part, array in arrays.items():
                param = getattr(module, part)
                param.copy_(local_part(param, torch.from_numpy(array)))


def build_model(model_cfg: ModelConfig, seed: int, device: torch.device | str = "cpu") -> MnistNet:
    """The whole model on `device` in fp32, holding the shared initial weights of `seed`."""
    model = meta_model(model_cfg).to_empty(device=device)
    load_initial_weights(model, seed, lambda param, full: full)
    return model


def parameter_layers(model: MnistNet) -> list[nn.Module]:
    """The modules that hold parameters, in forward order (the candidate FSDP units)."""
    return [getattr(model, layer.name) for layer in weights.parameter_layers(model.model_cfg)]
