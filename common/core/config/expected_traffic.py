"""What each strategy is expected to send per optimizer step, from its definition and the
model's parameter shapes: the collectives, how many, and their payload per rank (the bytes of
the tensors a rank hands them). The strategy registry (`strategies.Strategy.traffic`) names one
of these per strategy; the runs count what the framework really issued beside it
(`common.core.measure.traffic`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FLOAT32 = 4
DDP_FIRST_BUCKET = 1024 * 1024  # torch's _DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET = 25 * 1024 * 1024  # bucket_cap_mb=25, DDP's default


@dataclass(frozen=True)
class Unit:
    """A group of parameters a wrapper gathers and reduces together (an FSDP unit; the whole
    model for DDP and MWMS), in registration order; `root`: the model's own unit."""

    shapes: tuple[tuple[int, ...], ...]
    root: bool = False

    @property
    def numel(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)

    def dim0_shard(self, ranks: int) -> int:
        """Elements of one rank's shard when every parameter is split on dim 0, padded
        (fully_shard's DTensor shards)."""
        return sum(-(-shape[0] // ranks) * math.prod(shape[1:]) for shape in self.shapes if shape)

    def flat_shard(self, ranks: int) -> int:
        """Elements of one rank's shard of the unit's flattened parameters, padded (FSDP1)."""
        return -(-self.numel // ranks)


@dataclass(frozen=True)
class Expected:
    kind: str  # all_reduce, all_gather, reduce_scatter, broadcast
    calls: float
    payload_bytes: float


def _ddp_buckets(units: list[Unit]) -> int:
    """DDP's gradient buckets: parameters in reverse order, the first bucket up to 1 MiB and
    the others up to 25 MiB (a parameter larger than the cap is a bucket of its own)."""
    sizes = [math.prod(shape) * FLOAT32 for unit in units for shape in unit.shapes][::-1]
    buckets, filled = 0, None
    for size in sizes:
        cap = DDP_FIRST_BUCKET if buckets <= 1 else DDP_BUCKET
        if filled is None or filled + size > cap:
            buckets, filled = buckets + 1, 0
        filled += size
    return buckets


def replicated(units: list[Unit], replicate: int, shard: int, cfg: Any) -> list[Expected]:
    """DDP: the whole gradient all-reduced, in buckets."""
    total = sum(unit.numel for unit in units) * FLOAT32
    return [Expected("all_reduce", _ddp_buckets(units), total)]


def packed(units: list[Unit], replicate: int, shard: int, cfg: Any) -> list[Expected]:
    """MultiWorkerMirroredStrategy: every gradient in one all-reduce (one pack)."""
    return [Expected("all_reduce", 1, sum(unit.numel for unit in units) * FLOAT32)]


def _sharded(units: list[Unit], shard: int, cfg: Any, flat: bool) -> list[Expected]:
    """An FSDP unit is all-gathered before its forward, and again before its backward unless
    it stayed whole (shard_grad_op; FSDP1's root, which never reshards after forward; fully_shard's
    root reshards like the others under torch 2.13, as counted); its gradients are
    reduce-scattered. With train.accumulation_steps k, the all-gathers come once per
    micro-batch, the reduce-scatter once per optimizer step."""
    again = cfg.torch.sharding == "full_shard"
    micro: int = cfg.train.accumulation_steps

    def times(unit: Unit) -> int:
        return micro * (1 + (again and not (flat and unit.root)))

    gathers = sum(times(unit) for unit in units if unit.numel)
    pieces = [unit.flat_shard(shard) if flat else unit.dim0_shard(shard) for unit in units]
    gathered = sum(
        piece * FLOAT32 * times(unit)
        for unit, piece in zip(units, pieces, strict=True)
        if unit.numel
    )
    scattered = sum(piece * shard * FLOAT32 for piece in pieces if piece)
    calls = sum(1 for unit in units if unit.numel)
    return [
        Expected("all_gather", gathers, gathered),
        Expected("reduce_scatter", calls, scattered),
    ]


def fully_sharded(units: list[Unit], replicate: int, shard: int, cfg: Any) -> list[Expected]:
    """fully_shard (fsdp2): every parameter split on dim 0 over the shard group; per unit an
    all-gather before its forward, another before its backward under full_shard, and a
    reduce-scatter of its gradients."""
    return _sharded(units, shard, cfg, flat=False)


def flat_sharded(units: list[Unit], replicate: int, shard: int, cfg: Any) -> list[Expected]:
    """FSDP1: each unit's parameters flattened, then split over the ranks; per unit an
    all-gather before its forward, another before its backward under full_shard (not the
    root's), and a reduce-scatter of its gradients."""
    return _sharded(units, shard, cfg, flat=True)


def hybrid(units: list[Unit], replicate: int, shard: int, cfg: Any) -> list[Expected]:
    """hsdp: fully_shard within a shard group, then each rank's gradient shard all-reduced
    across the replicas."""
    found = _sharded(units, shard, cfg, flat=False)
    shards = [unit.dim0_shard(shard) * FLOAT32 for unit in units if unit.numel]
    if replicate > 1:
        found.append(Expected("all_reduce", len(shards), sum(shards)))
    return found


def nothing(units: list[Unit], replicate: int, shard: int, cfg: Any) -> list[Expected]:
    """One process: no collective."""
    return []
