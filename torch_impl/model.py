"""The MNIST models in PyTorch, built from `common.weights.model_spec`. No distributed code.

A model is first made on the meta device (shapes, no storage), so that its size costs nothing
until a strategy decides where its parameters live; `load_initial_weights` then fills them one
layer at a time from `common.weights.layer_weights`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from common import weights
from common.config import ModelConfig


class MnistNet(nn.Module):
    """Runs a `common.weights` layer list; conv and dense layers are child modules by name."""

    def __init__(self, model_cfg: ModelConfig):
        super().__init__()
        self.model_cfg = model_cfg
        self.spec = weights.model_spec(model_cfg)
        self.dropout = model_cfg.dropout
        for layer in self.spec:
            if layer.kind == "conv":
                self.add_module(layer.name, nn.Conv2d(layer.inputs, layer.outputs, layer.kernel))
            elif layer.kind == "dense":
                self.add_module(layer.name, nn.Linear(layer.inputs, layer.outputs))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [N, 1, 28, 28] (NCHW) -> logits [N, 10]."""
        x = images
        for layer in self.spec:
            if layer.kind in ("conv", "dense"):
                x = getattr(self, layer.name)(x)
            elif layer.kind == "relu":
                x = F.relu(x)
            elif layer.kind == "maxpool2":
                x = F.max_pool2d(x, 2)
            elif layer.kind == "flatten":
                x = torch.flatten(x, 1)
            elif layer.kind == "dropout":
                x = F.dropout(x, layer.rate, training=self.training and self.dropout)
        return x


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
