"""Whether the replicas still agree after an epoch: every rank's weight digest, loss scale and
skipped steps, gathered exactly, and the error when they went apart (a rank that skipped a step
the others took, weights that drifted)."""

from __future__ import annotations

from dataclasses import dataclass

from common.core.records.records import Epoch
from common.launch.exchanges import AllReduceSum, gather_rows

# Replica digests are integer sums of the weights' bit patterns, taken modulo 2**52 so that
# they travel exactly through a float64 all-reduce (common.launch.exchanges).
DIGEST_MODULUS = 2**52


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
