"""One torch module per layer kind of `common.models.layers` (`make`), and the two kinds torch
has no module for as the models need them: batch normalization over the global batch, and
dropout with Keras' mask.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as torch_dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from common.models import layers


def make(layer: layers.Layer) -> nn.Module:
    """The module of one described layer (its children too, for a residual block)."""
    if isinstance(layer, layers.Conv):
        return nn.Conv2d(
            layer.inputs,
            layer.outputs,
            layer.kernel,
            stride=layer.stride,
            padding=layer.padding,
            bias=layer.bias,
        )
    if isinstance(layer, layers.Dense):
        return nn.Linear(layer.inputs, layer.outputs)
    if isinstance(layer, layers.BatchNorm):
        return GlobalBatchNorm(layer.features, momentum=layer.momentum, eps=layer.eps)
    if isinstance(layer, layers.Residual):
        return Residual(layer)
    if isinstance(layer, layers.Dropout):
        return Dropout(layer.rate)
    simple = {
        "relu": nn.ReLU,
        "flatten": nn.Flatten,
        "globalavgpool": GlobalAvgPool,
    }
    if isinstance(layer, layers.MaxPool):
        return nn.MaxPool2d(layer.size)
    if layer.kind in simple:
        return simple[layer.kind]()
    raise ValueError(f"layer kind {layer.kind!r} has no torch module")


def named(layer: layers.Layer, index: int) -> str:
    """The module's name: the layer's (state-dict names are canonical names), else one made of
    its kind and position for the layers that hold nothing."""
    return layer.name or f"{layer.kind}_{index}"


class Residual(nn.Module):
    """body(x) + shortcut(x); the shortcut is the identity when the description has none. The
    layers of both paths are children of the block, so their state-dict names are the
    canonical "<block>.<layer>"."""

    def __init__(self, block: layers.Residual):
        super().__init__()
        self.paths: tuple[list[str], list[str]] = ([], [])
        for names, described, prefix in (
            (self.paths[0], block.body, ""),
            (self.paths[1], block.shortcut, "shortcut_"),
        ):
            for index, layer in enumerate(described):
                name = layer.name or f"{prefix}{named(layer, index)}"
                self.add_module(name, make(layer))
                names.append(name)

        self.checkpointed = False  # model.activation_checkpointing=blocks (`checkpoint_blocks`)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.checkpointed and torch.is_grad_enabled()):
            return self._paths(x)
        # Non-reentrant: DDP, FSDP and compile support it, and the block's parameters get
        # their gradients through the recomputed graph. The recomputation must not move the
        # running statistics a second time: its context keeps them.
        return checkpoint(
            self._paths,
            x,
            use_reentrant=False,
            context_fn=lambda: (contextlib.nullcontext(), self._statistics_kept()),
        )

    @contextlib.contextmanager
    def _statistics_kept(self) -> Iterator[None]:
        norms = [module for module in self.modules() if isinstance(module, GlobalBatchNorm)]
        for norm in norms:
            norm.keep_statistics = True
        try:
            yield
        finally:
            for norm in norms:
                norm.keep_statistics = False

    def _paths(self, x: torch.Tensor) -> torch.Tensor:
        body, shortcut = x, x
        for name in self.paths[0]:
            body = self.get_submodule(name)(body)
        for name in self.paths[1]:
            shortcut = self.get_submodule(name)(shortcut)
        return body + shortcut


class GlobalAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class GlobalBatchNorm(nn.Module):
    """Batch normalization whose batch is the global batch (`common.models.layers.BatchNorm`):
    with one process `F.batch_norm`; with several the per-channel sum and the sum of squared
    deviations are all-reduced (`_all_reduce`), whose backward all-reduces the gradients too, so
    every rank's inputs get the gradient of the global loss. torch's SyncBatchNorm does the
    same on GPUs only ("SyncBatchNorm expected input tensor to be on GPU", torch 2.13).
    Parameters and buffers carry BatchNorm2d's names; the running variance is unbiased, as
    torch's."""

    def __init__(self, features: int, *, momentum: float, eps: float):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.running_mean: torch.Tensor
        self.running_var: torch.Tensor
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))
        self.keep_statistics = False  # while a checkpointed block recomputes its forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        distributed = torch_dist.is_initialized() and torch_dist.get_world_size() > 1
        if not (self.training and distributed):
            # a recomputation updates copies: what it saves for the backward stays the same
            kept = self.training and self.keep_statistics
            return F.batch_norm(
                x,
                self.running_mean.clone() if kept else self.running_mean,
                self.running_var.clone() if kept else self.running_var,
                self.weight,
                self.bias,
                self.training,
                self.momentum,
                self.eps,
            )
        return self._global(x)

    def _global(self, x: torch.Tensor) -> torch.Tensor:
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype, device=x.device)
        sums = _all_reduce(torch.cat([x.sum(dims), count]))
        total = sums[-1]
        mean = sums[:-1] / total
        centered = x - mean.view(shape)
        variance = _all_reduce((centered * centered).sum(dims)) / total
        if not self.keep_statistics:
            with torch.no_grad():
                unbiased = variance * (total / (total - 1))
                self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), self.momentum)
        scale = self.weight * torch.rsqrt(variance + self.eps)
        return centered * scale.view(shape) + self.bias.view(shape)


def _all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """The sum over every rank, differentiable: the backward sums the gradients over the ranks
    too (torch's functional collectives register that autograd rule; the older
    torch.distributed.nn.functional.all_reduce does the same and is deprecated in torch 2.13)."""
    world = torch_dist.group.WORLD
    if world is None:
        raise RuntimeError("batch statistics over several ranks need a process group")
    return funcol.wait_tensor(funcol.all_reduce(tensor, "sum", world))


class Dropout(nn.Module):
    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.rate, self.training)


def dropout(x: torch.Tensor, rate: float, training: bool) -> torch.Tensor:
    """`F.dropout` (inverted: kept values scaled by 1 / (1 - rate)), with the mask drawn as TF's
    Dropout draws it on CPU: a uniform number per element compared with the rate, since torch's
    CPU `bernoulli_` fills element by element unless MKL runs on an Intel CPU
    (docs/frameworks.md). The same generator is drawn from, so seeding and checkpointed RNG
    state still decide the masks. On GPUs `F.dropout` is one fused kernel: kept."""
    if not training or rate == 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, rate, training=True)
    noise = (torch.rand(x.shape, device=x.device) >= rate).to(x.dtype).div_(1 - rate)
    return x * noise


def checkpoint_blocks(model: nn.Module) -> int:
    """model.activation_checkpointing=blocks: every residual block of `model` (through DDP's,
    FSDP's or compile's wrapping) recomputes its activations in the backward; how many."""
    found = [module for module in model.modules() if isinstance(module, Residual)]
    for block in found:
        block.checkpointed = True
    return len(found)
