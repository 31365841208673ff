"""What a precision setting means on each side, the loss scaling both sides share, and the
forced-overflow fault that tests the scaling on the CPU.

`torch.mixed_precision` and `tf.mixed_precision` take the same values (none, bf16, fp16) and
mean the same arithmetic on every strategy: parameters and optimizer state kept in fp32, the
forward and backward computed in the low precision, gradients reduced in fp32. `numerics`
writes that down for run_start, with TF32 and the loss scaling, so a reader need not trust it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.core.measure.collectives import AllReduceSum, gather_rows
from common.core.records.records import Epoch
from common.models import weights, zoo

# Dynamic loss scaling under fp16, the same on both sides (torch's GradScaler starts at 2**16,
# Keras' LossScaleOptimizer at 2**15; both halve on overflow and double after 2,000 clean steps).
LOSS_SCALE_INIT = 2.0**15
LOSS_SCALE_GROWTH_INTERVAL = 2000

LOW = {"none": "fp32", "bf16": "bf16", "fp16": "fp16"}
# Replica digests are integer sums of the weights' bit patterns, taken modulo 2**52 so that
# they travel exactly through a float64 all-reduce (common.core.measure.collectives).
DIGEST_MODULUS = 2**52

# "<rank>:<step>[,<rank>:<step>...]": that rank's gradients become infinite at the step-th
# step its process takes (from 1), as an fp16 overflow would make them. For tests on the CPU,
# where fp16 rarely overflows; an unset variable costs one lookup at start-up.
FORCE_OVERFLOW_VARIABLE = "SUITE_FORCE_OVERFLOW"


def numerics(*, precision: str, tf32: bool, loss_scaling: bool, device_type: str) -> dict[str, Any]:
    """The run_start description of what `precision` computes in, on this run's device."""
    return {
        "param_dtype": "fp32",
        "compute_dtype": LOW[precision],
        "grad_reduce_dtype": "fp32",
        "optimizer_state_dtype": "fp32",
        "loss_scaling": (
            f"dynamic, from {LOSS_SCALE_INIT:g}, x0.5 on overflow, x2 after "
            f"{LOSS_SCALE_GROWTH_INTERVAL} clean steps; every rank skips the same steps"
            if loss_scaling
            else "none"
        ),
        # TF32 only exists on NVIDIA GPUs from Ampere on; elsewhere the flag changes nothing.
        "tf32": bool(tf32),
        "tf32_effective": bool(tf32) and device_type == "gpu",
    }


def batch_norm(net: zoo.Net) -> str:
    """How the model's batch normalization computes, the same on both sides (what numerics
    records); "none" for a model without it."""
    if not any(spot.layer.kind == "batchnorm" for spot in weights.placed(net)):
        return "none"
    return (
        "global-batch statistics: the per-channel sums are all-reduced over every data-parallel "
        "rank in the forward and their gradients in the backward (synchronized), fp32; running "
        "statistics as torch (momentum on the batch's, unbiased variance)"
    )


def forced_overflow_steps(rank: int, env: Mapping[str, str] | None = None) -> frozenset[int]:
    """The steps (the n-th of this process, from 1) at which this rank must overflow."""
    text = (os.environ if env is None else env).get(FORCE_OVERFLOW_VARIABLE, "").strip()
    steps = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            at_rank, step = (int(value) for value in item.split(":"))
        except ValueError:
            raise ValueError(
                f"{FORCE_OVERFLOW_VARIABLE}={text!r}: each item is <rank>:<step>, e.g. '1:3'"
            ) from None
        if step < 1:
            raise ValueError(f"{FORCE_OVERFLOW_VARIABLE}: steps count from 1, got {step}")
        if at_rank == rank:
            steps.add(step)
    return frozenset(steps)


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplicaState:
    """What the epoch record says of the replicas (`common.core.records.records.Epoch`)."""

    in_sync: bool | None
    """Every rank holds the same weights; None where ranks hold shards."""
    loss_scale: list[float] | None
    """Every rank's loss scale; None without loss scaling."""
    skipped_steps: list[int] | None
    """Every rank's steps skipped on overflow in the epoch; None without loss scaling."""


def gather_replica_state(
    digest: float | None,
    scaling: tuple[float, int] | None,
    *,
    rank: int,
    world_size: int,
    all_reduce_sum: AllReduceSum,
) -> ReplicaState:
    """Collective. Whether every rank holds the same weights (`digest`, see
    Trainer.replica_digest; None where ranks hold shards), and every rank's loss scale and
    skipped steps (`scaling`; None without loss scaling). A digest is an exact integer below
    DIGEST_MODULUS: a float sum of the weights would depend on its reduction order, and so on
    the rank's thread count."""
    scale, skipped = scaling if scaling is not None else (0.0, 0)
    row = [digest or 0.0, digest is not None, scale, skipped, scaling is not None]
    table = gather_rows(row, rank=rank, world_size=world_size, all_reduce_sum=all_reduce_sum)
    digests, has_digest = table[:, 0], table[:, 1].all()
    scaled = table[:, 4].all()
    return ReplicaState(
        in_sync=bool((digests == digests[0]).all()) if has_digest else None,
        loss_scale=[float(value) for value in table[:, 2]] if scaled else None,
        skipped_steps=[int(value) for value in table[:, 3]] if scaled else None,
    )


def check_agreement(record: Epoch) -> None:
    """Raise RuntimeError when the epoch record shows ranks that went apart: different weights
    on replicas, or different loss scales (some rank skipped a step the others took)."""
    if record.replicas_in_sync is False:
        raise RuntimeError(f"the ranks hold different weights after epoch {record.epoch}")
    scales = record.loss_scale
    if scales and len(set(scales)) > 1:
        raise RuntimeError(
            f"the ranks' loss scales differ after epoch {record.epoch} ({scales}): they skipped "
            f"different steps (skipped_steps {record.skipped_steps})"
        )
