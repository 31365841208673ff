"""The optimizer of `optim.name` with the shared constants of `common.core.train.optim`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from common.core.config.config import OptimConfig
from common.core.config.strategies import Strategy
from common.core.train import optim as common_optim

# torch 2.13 has `fused` for Adam and SGD (CPU and CUDA; their docs), not for Adadelta
# (inspect.signature in the venv); DTensor, which fsdp2's parameters are, has sharding rules for
# _fused_adam_ but not for _fused_sgd_ (torch/distributed/tensor/_ops/_pointwise_ops.py).
FUSED = ("adam", "sgd")


def implementation(name: str, requested: str, *, loss_scaling: bool, strategy: Strategy) -> str:
    """The update implementation torch runs: foreach, fused, or default (no flag: torch picks
    for-loop on the CPU, foreach on CUDA); auto is foreach. Measured here (CNN, Adam, batch 64,
    CPU, one process, medians of 10 interleaved passes of 50 steps): foreach 1.033x and fused
    1.057x the samples/s of the for-loop. auto is not fused because fused Adam on fsdp2's
    shards ends 64 steps 7.7e-6 away from DDP, where foreach and the for-loop end bitwise
    equal; and under fp16 loss scaling GradScaler calls a fused optimizer's step even on
    overflow (the kernel skips inside), so the run's count of skipped steps would be wrong."""
    if requested == "fused":
        if name not in FUSED:
            raise ValueError(
                f"torch.optimizer_impl=fused: torch has no fused {name}; use foreach or auto"
            )
        if name == "sgd" and strategy.parameters == "dtensor":
            raise ValueError(
                f"torch.optimizer_impl=fused: {strategy.name}'s DTensor parameters have no fused "
                f"SGD in torch {torch.__version__.split('+')[0]}; use foreach or auto"
            )
        if loss_scaling:
            raise ValueError(
                "torch.optimizer_impl=fused with fp16 loss scaling would count skipped steps "
                "as taken; use foreach or auto"
            )
    return "foreach" if requested == "auto" else requested


def build_optimizer(
    optim: OptimConfig, parameters: Iterable, impl: str = "default"
) -> torch.optim.Optimizer:
    """`impl`: what `implementation` resolved (default: torch's own choice, as a plain script
    gets it)."""
    parameters = list(parameters)
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True}}.get(impl, {})
    if optim.name == "sgd":
        return torch.optim.SGD(
            parameters,
            lr=optim.lr,
            momentum=optim.momentum,
            weight_decay=optim.weight_decay,
            **flags,
        )
    if optim.name == "adam":
        return torch.optim.Adam(
            parameters,
            lr=optim.lr,
            betas=common_optim.ADAM_BETAS,
            eps=common_optim.ADAM_EPSILON,
            weight_decay=optim.weight_decay,
            **flags,
        )
    return torch.optim.Adadelta(
        parameters,
        lr=optim.lr,
        rho=common_optim.ADADELTA_RHO,
        eps=common_optim.ADADELTA_EPSILON,
        weight_decay=optim.weight_decay,
        **flags,
    )


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
