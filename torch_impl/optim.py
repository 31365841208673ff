"""The optimizer of `optim.name` with the shared constants of `common.optim`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from common import optim as common_optim
from common.config import OptimConfig


def build_optimizer(optim: OptimConfig, parameters: Iterable) -> torch.optim.Optimizer:
    parameters = list(parameters)
    if optim.name == "sgd":
        return torch.optim.SGD(
            parameters, lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay
        )
    if optim.name == "adam":
        return torch.optim.Adam(
            parameters,
            lr=optim.lr,
            betas=common_optim.ADAM_BETAS,
            eps=common_optim.ADAM_EPSILON,
            weight_decay=optim.weight_decay,
        )
    return torch.optim.Adadelta(
        parameters,
        lr=optim.lr,
        rho=common_optim.ADADELTA_RHO,
        eps=common_optim.ADADELTA_EPSILON,
        weight_decay=optim.weight_decay,
    )


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
