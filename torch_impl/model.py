"""The MNIST models in PyTorch, built from `common.weights.MODEL_SPECS`. No distributed code."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from common import weights
from common.config import ModelConfig


class MnistNet(nn.Module):
    """Runs a `common.weights` layer list; conv and dense layers are child modules by name."""

    def __init__(self, name: str, dropout: bool):
        super().__init__()
        self.spec_name = name
        self.spec = weights.model_spec(name)
        self.dropout = dropout
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


def build_model(model_cfg: ModelConfig, seed: int) -> MnistNet:
    """The model on the CPU in fp32, holding the shared initial weights of `seed`."""
    model = MnistNet(model_cfg.name, model_cfg.dropout)
    state = {
        name: torch.from_numpy(array)
        for name, array in weights.to_torch(weights.initial_weights(model_cfg.name, seed)).items()
    }
    model.load_state_dict(state, strict=True)
    return model


def parameter_layers(model: MnistNet) -> list[nn.Module]:
    """The modules that hold parameters, in forward order (the FSDP wrapping units)."""
    return [getattr(model, layer.name) for layer in weights.parameter_layers(model.spec_name)]
