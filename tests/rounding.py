"""The rounding noise of float32 itself for a setup: how far float32 training follows the
float64 curve of the same model, batches and optimizer (torch, one process). Two float32
implementations of the same arithmetic may each be that far off the exact curve, so they may
differ by twice it: a tolerance derived from the arithmetic of the setup, not from one
processor's kernels."""

import numpy as np
import torch
import torch.nn.functional as F

from common.core import config_io
from common.data import mnist
from common.data.shard import TrainPlan
from torch_impl.model import build_model
from torch_impl.optim import build_optimizer


def float32_drift(overrides: list[str], steps: int) -> float:
    """Max over the first `steps` steps of |loss32 - loss64| / loss64, for the config of
    `overrides` (no dropout, no schedule: a deterministic curve)."""
    cfg = config_io.load_config(None, overrides)
    data = mnist.load_limited(cfg.data)
    images = torch.from_numpy(mnist.normalize(data.train_images)).unsqueeze(1)
    labels = torch.from_numpy(data.train_labels)
    plan = TrainPlan(
        num_samples=len(labels),
        global_batch=cfg.train.batch_size,
        world_size=1,
        rank=0,
        seed=cfg.train.seed,
    )
    curves = []
    for dtype in (torch.float32, torch.float64):
        model = build_model(cfg.net(), cfg.train.seed).to(dtype)
        optimizer = build_optimizer(cfg.optim, model.parameters())
        losses = []
        for indices in plan.rank_indices(0)[:steps]:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images[indices].to(dtype)), labels[indices])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        curves.append(np.array(losses))
    return float((np.abs(curves[0] - curves[1]) / np.abs(curves[1])).max())
