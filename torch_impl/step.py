"""One optimizer step on this rank's batch: the whole of its maths, in one function.

`optimizer_step` is called once per step by `torch_impl.train.TorchTrainer.train_step`; its twin
is `tf_impl.step.optimizer_step`. The forward runs under autocast where the strategy casts so;
the loss is the cross-entropy mean over this rank's batch in fp32, and DDP and FSDP average the
gradients over the data-parallel ranks, so the update follows the global-batch mean; under fp16
the scaler scales the loss and skips an update whose gradients hold inf or NaN (every rank the
same). With train.accumulation_steps k the batch is split into k micro-batches, each one's loss
divided by k, and the gradients cross the network on the last one only (`no_sync()`, or
fully_shard's `set_requires_gradient_sync(False)`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.distributed.fsdp import FSDPModule

from torch_impl.optim import set_learning_rate
from torch_impl.precision import Amp


def gradient_sync(model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """Where the backward inside it exchanges the gradients (`sync`) or keeps them on this rank
    to be added to: fully_shard's switch, set for the backward that follows; DDP's and FSDP1's
    `no_sync()`; nothing for one process."""
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    no_sync = getattr(model, "no_sync", None)  # DistributedDataParallel, FSDP1
    return no_sync() if no_sync is not None and not sync else contextlib.nullcontext()


def optimizer_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    amp: Amp,
    images: torch.Tensor,
    labels: torch.Tensor,
    lr: float,
    dp_size: int,
    micro_batches: int = 1,
    between_parts: Callable[[], None] | None = None,
) -> torch.Tensor:
    """One step on this rank's batch, in `micro_batches` parts; returns its share of the global
    mean loss. `between_parts`: called before each micro-batch after the first (the memory
    plan's tracker starts each one's module statistics afresh there)."""
    set_learning_rate(optimizer, lr)
    optimizer.zero_grad(set_to_none=True)
    if micro_batches == 1:
        with amp.forward_context():
            logits = model(images)
        loss = F.cross_entropy(logits.float(), labels)
        amp.scale(loss).backward()  # the loss itself without fp16 loss scaling
    else:
        loss = torch.zeros((), device=images.device)
        parts = zip(images.chunk(micro_batches), labels.chunk(micro_batches), strict=True)
        for index, (part_images, part_labels) in enumerate(parts):
            if index and between_parts is not None:
                between_parts()
            with gradient_sync(model, sync=index == micro_batches - 1):
                with amp.forward_context():
                    logits = model(part_images)
                part = F.cross_entropy(logits.float(), part_labels) / micro_batches
                amp.scale(part).backward()
            loss += part.detach()
    amp.step(optimizer)  # the optimizer's step, or the scaler's (which may skip it)
    # x / 1 is x: one process skips the division, an op of its own (8 us of a 0.5 ms step)
    return loss.detach() / dp_size if dp_size > 1 else loss.detach()
