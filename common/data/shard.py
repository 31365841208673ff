"""The shard plan: which samples each rank sees at each step, the same for every framework.

Training: for (seed, epoch) a permutation of the training set is cut into global batches;
global batch `s` is split into `world_size` contiguous slices, slice `r` goes to rank `r`.
So the samples of a global step do not depend on the world size: a 1-process run and a
4-process run at the same global batch see the same samples at the same step, and the
per-rank slices are disjoint. The remainder (num_samples mod global_batch samples, a different
set each epoch because the permutation changes) is dropped, so every step averages exactly
one global batch and the loss of every step means the same thing.

Evaluation: the test set in file order, padded to equal per-rank batches; padded slots carry
weight 0, so every test sample counts exactly once and every rank runs the same number of
steps (no rank waits in a collective that another never enters).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.data.rng import random_bits, stream_key

SHUFFLE_STREAM = 1
LOADER_STREAM = 3  # (2 is the initial weights', common.models.weights.INIT_STREAM)


def epoch_permutation(seed: int, epoch: int, num_samples: int) -> np.ndarray:
    """A permutation of range(num_samples) fixed by (seed, epoch)."""
    keys = random_bits(stream_key(seed, SHUFFLE_STREAM, epoch), num_samples)
    return np.argsort(keys, kind="stable").astype(np.int64)


def loader_seed(seed: int, epoch: int, dp_rank: int) -> int:
    """The seed of a data loader's helpers (torch's DataLoader workers) for one epoch of one
    data-parallel rank: fixed by (seed, epoch, rank), so that what they draw does not depend on
    where a run was stopped and resumed, and never comes from the training's own generator."""
    return int(random_bits(stream_key(seed, LOADER_STREAM, epoch, dp_rank), 1)[0] >> np.uint64(1))


def _check_rank(world_size: int, rank: int) -> None:
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")


@dataclass(frozen=True)
class TrainPlan:
    num_samples: int
    global_batch: int
    world_size: int
    rank: int
    seed: int

    def __post_init__(self) -> None:
        _check_rank(self.world_size, self.rank)
        if self.global_batch % self.world_size:
            raise ValueError(
                f"global batch {self.global_batch} does not split over {self.world_size} ranks"
            )
        if self.steps_per_epoch < 1:
            raise ValueError(
                f"global batch {self.global_batch} is larger than the {self.num_samples} "
                "training samples: lower train.batch_size or raise data.train_limit"
            )

    @property
    def per_rank_batch(self) -> int:
        return self.global_batch // self.world_size

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.global_batch

    @property
    def dropped_per_epoch(self) -> int:
        return self.num_samples % self.global_batch

    def global_indices(self, epoch: int) -> np.ndarray:
        """[steps, global_batch] sample indices of every step of `epoch`."""
        used = self.steps_per_epoch * self.global_batch
        order = epoch_permutation(self.seed, epoch, self.num_samples)[:used]
        return order.reshape(self.steps_per_epoch, self.global_batch)

    def rank_indices(self, epoch: int) -> np.ndarray:
        """[steps, per_rank_batch] sample indices this rank takes at every step of `epoch`."""
        start = self.rank * self.per_rank_batch
        return self.global_indices(epoch)[:, start : start + self.per_rank_batch]


@dataclass(frozen=True)
class EvalPlan:
    num_samples: int
    eval_batch: int
    world_size: int
    rank: int

    def __post_init__(self) -> None:
        _check_rank(self.world_size, self.rank)
        if self.eval_batch < 1:
            raise ValueError(f"eval batch must be >= 1, got {self.eval_batch}")

    @property
    def per_rank_batch(self) -> int:
        """The rank's share of the eval batch, at most its share of the test set: a batch
        larger than the test set would only add padding (and memory), never samples."""
        whole = max(1, min(self.eval_batch, self.num_samples))
        return -(-whole // self.world_size)

    @property
    def steps(self) -> int:
        return max(1, -(-self.num_samples // (self.per_rank_batch * self.world_size)))

    def rank_indices(self) -> tuple[np.ndarray, np.ndarray]:
        """([steps, per_rank_batch] indices, same-shape float32 weights: 1 real, 0 padding)."""
        slots = self.steps * self.per_rank_batch * self.world_size
        positions = np.arange(slots, dtype=np.int64).reshape(
            self.steps, self.world_size, self.per_rank_batch
        )[:, self.rank, :]
        real = positions < self.num_samples
        indices = np.where(real, positions, 0)
        return indices, real.astype(np.float32)


def plans_for(
    *,
    num_train: int,
    num_test: int,
    global_batch: int,
    eval_batch: int,
    seed: int,
    dp_size: int,
    dp_rank: int,
) -> tuple[TrainPlan, EvalPlan]:
    """(TrainPlan, EvalPlan) of data-parallel rank `dp_rank` of `dp_size`."""
    train = TrainPlan(
        num_samples=num_train,
        global_batch=global_batch,
        world_size=dp_size,
        rank=dp_rank,
        seed=seed,
    )
    return train, EvalPlan(num_test, eval_batch, dp_size, dp_rank)
