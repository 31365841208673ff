"""What a rank holds: its peak memory and the exact bytes of its parameters, gradients and
optimizer state (a shard under FSDP, the whole model under DDP)."""

from __future__ import annotations

import resource

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from common.memory import MemoryUse


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


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak(device: torch.device) -> tuple[int, str]:
    """(bytes, what they count): allocator peak on CUDA since the last reset, else the
    process's peak resident set since it started (Linux reports ru_maxrss in KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process peak RSS"


def memory_use(device: torch.device, model: nn.Module, optimizer) -> MemoryUse:
    peak_bytes, counts = peak(device)
    reserved = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None
    return MemoryUse(
        peak_bytes=peak_bytes,
        peak_counts=counts,
        reserved_peak_bytes=reserved,
        **state_bytes(model, optimizer),
    )
