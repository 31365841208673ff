"""The rounding noise of float32 itself for a setup: how far float32 training follows the
float64 curve of the same model, batches and optimizer (torch, one process). Two float32
implementations of the same arithmetic may each be that far off the exact curve, so they may
differ by twice it: a tolerance derived from the arithmetic of the setup, not from one
processor's kernels. Training amplifies rounding (momentum SGD turns ulps into percent over
tens of steps), and the float64 comparison sees that amplification too."""

import numpy as np
import torch
import torch.nn.functional as F

from common.core.config import config_io
from common.data import mnist
from common.data.shard import TrainPlan
from torch_impl.model import build_model
from torch_impl.optim import build_optimizer


def _train(overrides: list[str], steps: int, dtype: torch.dtype):
    """(the loss of every step, the final weights) of `steps` steps in `dtype`, epochs in the
    suite's order (no dropout, no schedule: a deterministic curve)."""
    cfg = config_io.load_config(None, overrides)
    data = mnist.load_limited(cfg.data)
    images = torch.from_numpy(mnist.normalize(data.train_images)).unsqueeze(1).to(dtype)
    labels = torch.from_numpy(data.train_labels)
    plan = TrainPlan(
        num_samples=len(labels),
        global_batch=cfg.train.batch_size,
        world_size=1,
        rank=0,
        seed=cfg.train.seed,
    )
    model = build_model(cfg.net(), cfg.train.seed).to(dtype)
    optimizer = build_optimizer(cfg.optim, model.parameters())
    losses = []
    epoch = 0
    while len(losses) < steps:
        for indices in plan.rank_indices(epoch)[: steps - len(losses)]:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images[indices]), labels[indices])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        epoch += 1
    weights = {name: tensor.detach().double() for name, tensor in model.state_dict().items()}
    return np.array(losses), weights


def float32_drifts(overrides: list[str], steps: int) -> tuple[np.ndarray, float]:
    """From one float32 and one float64 run of the config of `overrides`: |loss32 - loss64| /
    loss64 at each of the first `steps` steps, and max |w32 - w64| over every weight and buffer
    (running statistics too) after them."""
    single, single_weights = _train(overrides, steps, torch.float32)
    double, double_weights = _train(overrides, steps, torch.float64)
    weights = max(
        (single_weights[name] - double_weights[name]).abs().max().item() for name in single_weights
    )
    return np.abs(single - double) / np.abs(double), weights


def float32_drift(overrides: list[str], steps: int) -> float:
    """Max over the first `steps` steps of |loss32 - loss64| / loss64, for the config of
    `overrides`."""
    return float(float32_drifts(overrides, steps)[0].max())


def float32_weight_drift(overrides: list[str], steps: int) -> float:
    """Max |w32 - w64| over every weight after `steps` steps, for the config of `overrides`."""
    return float32_drifts(overrides, steps)[1]
