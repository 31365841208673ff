"""Where in the training a launch starts, and what of a part-trained epoch a checkpoint carries.

A checkpoint is taken after `epoch` whole epochs and `step` steps of the next one (0 at an
epoch's end). Inside an epoch it also carries each rank's running float64 sum of its loss
shares, so that the epoch's mean loss, summed once over the ranks at the epoch's end, is the
same number it would have been had the run never stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Position:
    """Where this launch starts (all zeros for a new run)."""

    epoch: int = 0
    """Whole epochs trained before."""
    step: int = 0
    """Steps of epoch `epoch` (0-based) trained before: the first one this launch takes."""
    elapsed_s: float = 0.0
    """The training loop's seconds of the earlier launches."""
    loss_sum: float = 0.0
    """This rank's share of the partial epoch's loss sum (`carried_sum`)."""
    world_size_before: int | None = None
    """The world size of the launch that saved the checkpoint (None: a new run)."""


def carried_sum(saved: list[float], rank: int, world_size: int) -> float:
    """This rank's part of the loss sum of the steps trained before the checkpoint: its own at
    the same world size (the same float64 additions as a run that never stopped); at another,
    rank 0 carries the sum over the saved ranks (in rank order) and the others nothing, so the
    epoch's total differs only by the order of its additions."""
    if len(saved) == world_size:
        return saved[rank]
    return sum(saved) if rank == 0 else 0.0


def from_manifest(manifest: dict[str, Any], rank: int, world_size: int) -> Position:
    """The position a checkpoint's manifest describes, for `rank` of this launch."""
    saved = [float(value) for value in manifest.get("loss_sums", [])]
    return Position(
        epoch=int(manifest["epoch"]),
        step=int(manifest.get("step", 0)),
        elapsed_s=float(manifest["elapsed_s"]),
        loss_sum=carried_sum(saved, rank, world_size) if saved else 0.0,
        world_size_before=int(manifest.get("world_size", world_size)),
    )
