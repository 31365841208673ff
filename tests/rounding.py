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


def float32_drift(overrides: list[str], steps: int) -> float:
    """Max over the first `steps` steps of |loss32 - loss64| / loss64, for the config of
    `overrides`."""
    single, _ = _train(overrides, steps, torch.float32)
    double, _ = _train(overrides, steps, torch.float64)
    return float((np.abs(single - double) / np.abs(double)).max())


def float32_weight_drift(overrides: list[str], steps: int) -> float:
    """Max |w32 - w64| over every weight after `steps` steps, for the config of `overrides`."""
    _, single = _train(overrides, steps, torch.float32)
    _, double = _train(overrides, steps, torch.float64)
    return max((single[name] - double[name]).abs().max().item() for name in single)
