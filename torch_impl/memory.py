"""What a rank holds: its peak memory and the exact bytes of its parameters, gradients and
optimizer state (a shard under FSDP, the whole model under DDP)."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from common.core.measure.memory import RSS_PEAK, MemoryUse, rss_bytes


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    params = list(model.parameters())
    optim_bytes = sum(
        _local_bytes(value)
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor) and value.dim() > 0  # not scalar step counters
    )
    return {
        "param_bytes": sum(_local_bytes(p) for p in params),
        "grad_bytes": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "optim_bytes": optim_bytes,
    }


def baseline(device: torch.device) -> int:
    """What the rank holds before the model is built, in the measure `peak` uses."""
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else rss_bytes()


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        RSS_PEAK.reset()


def peak(device: torch.device) -> tuple[int, str]:
    """(bytes, what they count): the allocator's peak on CUDA since the last reset (tensors
    only), else the process's peak resident set (`common.core.measure.memory.RssPeak`)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
    return RSS_PEAK.read()


def memory_use(device: torch.device, model: nn.Module, optimizer, baseline_bytes: int) -> MemoryUse:
    peak_bytes, counts = peak(device)
    reserved = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None
    return MemoryUse(
        peak_bytes=peak_bytes,
        peak_counts=counts,
        baseline_bytes=baseline_bytes,
        reserved_peak_bytes=reserved,
        **state_bytes(model, optimizer),
    )
