"""What one rank holds, in the words of the metrics schema (`metrics.MEMORY_SCHEMA`).

Each framework's `memory.memory_use` measures its rank; `gather_memory` turns every rank's
numbers into the epoch record's `memory` list, the same way on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import collectives

NUMBERS = ("peak_bytes", "param_bytes", "grad_bytes", "optim_bytes")


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryUse:
    peak_bytes: int
    """The rank's peak, as `peak_counts` measures it."""
    peak_counts: str
    """What `peak_bytes` counts, e.g. "process peak RSS" or the allocator call."""
    param_bytes: int
    """Parameters this rank holds: a shard under FSDP, the whole model under DDP and MWMS."""
    grad_bytes: int
    optim_bytes: int
    """Optimizer state this rank holds (moments, momentum), not scalar step counters."""
    reserved_peak_bytes: int | None = None
    """The caching allocator's peak reservation on a GPU (torch.cuda.max_memory_reserved):
    what the device had to give, above what tensors used; None where not measured."""


def gather_memory(
    local: MemoryUse, *, rank: int, world_size: int, all_reduce_sum: collectives.AllReduceSum
) -> list[dict]:
    """Every rank's MemoryUse as the metrics' memory entries, in rank order (collective)."""
    reserved = local.reserved_peak_bytes
    row = [*(getattr(local, name) for name in NUMBERS), -1 if reserved is None else reserved]
    table = collectives.gather_rows(
        row, rank=rank, world_size=world_size, all_reduce_sum=all_reduce_sum
    )
    return [
        {
            "rank": index,
            "peak_counts": local.peak_counts,  # every rank measures the same kind of device
            **{name: int(value) for name, value in zip(NUMBERS, values[:-1], strict=True)},
            "reserved_peak_bytes": None if values[-1] < 0 else int(values[-1]),
        }
        for index, values in enumerate(table)
    ]
