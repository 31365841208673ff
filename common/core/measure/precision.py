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

from common.models import weights, zoo

# Dynamic loss scaling under fp16, the same on both sides (torch's GradScaler starts at 2**16,
# Keras' LossScaleOptimizer at 2**15; both halve on overflow and double after 2,000 clean steps).
LOSS_SCALE_INIT = 2.0**15
LOSS_SCALE_GROWTH_INTERVAL = 2000

LOW = {"none": "fp32", "bf16": "bf16", "fp16": "fp16"}

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


@dataclass
class SkippedSteps:
    """Steps skipped on an fp16 overflow, counted the same way on both sides: the steps this
    launch took against the updates the optimizer applied (the loss scaler skips the update of
    a step whose gradients overflowed)."""

    taken: int = 0
    applied: int = 0
    reported: int = 0

    def new_since_last(self) -> int:
        """Skips since the last call (an epoch record reports its own)."""
        skipped = self.taken - self.applied
        new, self.reported = skipped - self.reported, skipped
        return new
