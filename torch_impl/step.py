"""One optimizer step on this rank's batch: the whole of its maths, in one function.

The trainer (`torch_impl.train.TorchTrainer.train_step`) calls `optimizer_step` once per step;
its twin is `tf_impl.step.optimizer_step`. What each line means on every strategy:
  forward     under `torch.autocast` where the strategy casts by autocast (single, ddp); the
              FSDP wrappers cast by their own policy (`torch_impl.precision`)
  loss        cross-entropy, the mean over this rank's batch, in fp32
  backward    DDP and FSDP average the gradients over the data-parallel ranks, so the update
              follows the mean over the global batch
  fp16        the loss is multiplied by the scaler's scale before backward; the scaler unscales
              the gradients and skips the update when one is inf or NaN (every rank the same)
  update      the optimizer's step at the learning rate of this step (no gradient clipping)
The loss returned is this rank's share of the global-batch mean: the ranks' shares add up to it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_impl.optim import set_learning_rate
from torch_impl.precision import Amp


def optimizer_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    amp: Amp,
    images: torch.Tensor,
    labels: torch.Tensor,
    lr: float,
    dp_size: int,
) -> torch.Tensor:
    """One step on this rank's batch; returns its share of the global mean loss."""
    set_learning_rate(optimizer, lr)
    optimizer.zero_grad(set_to_none=True)
    with amp.forward_context():
        logits = model(images)
    loss = F.cross_entropy(logits.float(), labels)
    amp.scale(loss).backward()  # the loss itself without fp16 loss scaling
    amp.step(optimizer)  # the optimizer's step, or the scaler's (which may skip it)
    return loss.detach() / dp_size
