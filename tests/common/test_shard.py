import subprocess
import sys

import numpy as np
import pytest

from common.data.shard import EvalPlan, TrainPlan, epoch_permutation


@pytest.mark.parametrize(
    "num_samples, global_batch, world",
    [
        (60000, 64, 1),
        (60000, 64, 2),
        (60000, 64, 4),
        (1000, 96, 3),
        (10, 10, 5),
    ],
)
def test_train_plan_is_disjoint_complete_and_world_independent(num_samples, global_batch, world):
    plans = [TrainPlan(num_samples, global_batch, world, rank, seed=3) for rank in range(world)]
    per_rank = [plan.rank_indices(epoch=2) for plan in plans]
    steps = num_samples // global_batch
    assert all(indices.shape == (steps, global_batch // world) for indices in per_rank)
    # at every step the ranks' slices are disjoint and together form that step's global batch
    together = np.concatenate(per_rank, axis=1)
    assert np.array_equal(together, plans[0].global_indices(epoch=2))
    flat = together.ravel()
    assert len(np.unique(flat)) == len(flat) == num_samples - num_samples % global_batch
    # the same global batches as a 1-process run with the same global batch
    single = TrainPlan(num_samples, global_batch, 1, 0, seed=3).rank_indices(epoch=2)
    assert np.array_equal(together, single)


def test_remainder_is_dropped_and_changes_every_epoch():
    plan = TrainPlan(1000, 96, 2, 0, seed=0)
    assert (plan.steps_per_epoch, plan.dropped_per_epoch) == (10, 40)
    left_out = [set(range(1000)) - set(plan.global_indices(e).ravel()) for e in range(3)]
    assert all(len(s) == 40 for s in left_out) and left_out[0] != left_out[1]


def test_permutation_depends_on_seed_and_epoch_only():
    a = epoch_permutation(seed=1, epoch=0, num_samples=60000)
    assert np.array_equal(a, epoch_permutation(1, 0, 60000))
    assert np.array_equal(np.sort(a), np.arange(60000))
    assert not np.array_equal(a, epoch_permutation(1, 1, 60000))
    assert not np.array_equal(a, epoch_permutation(2, 0, 60000))


def test_permutation_is_the_same_in_any_process():
    """Any caller, any process: a framework-free function of (seed, epoch, n)."""
    probe = (
        "from common.data.shard import epoch_permutation as p; "
        "print(p(7, 3, 60000)[:8].tolist(), int(p(7, 3, 60000).sum()))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    here = epoch_permutation(7, 3, 60000)
    assert out.stdout.strip() == f"{here[:8].tolist()} {int(here.sum())}"


def test_plan_errors_name_the_fix():
    with pytest.raises(ValueError, match="does not split over 3 ranks"):
        TrainPlan(1000, 64, 3, 0, seed=0)
    with pytest.raises(ValueError, match="raise data.train_limit"):
        TrainPlan(50, 64, 1, 0, seed=0)
    with pytest.raises(ValueError, match=r"rank 2 is outside 0..1"):
        TrainPlan(1000, 64, 2, 2, seed=0)


@pytest.mark.parametrize(
    "num_samples, eval_batch, world",
    [
        (10000, 1000, 1),
        (10000, 1000, 3),
        (10000, 512, 4),
        (7, 4, 3),
        (2, 1000, 4),
    ],
)
def test_eval_plan_counts_every_sample_once_with_equal_steps(num_samples, eval_batch, world):
    plans = [EvalPlan(num_samples, eval_batch, world, rank) for rank in range(world)]
    results = [plan.rank_indices() for plan in plans]
    assert len({indices.shape for indices, _ in results}) == 1  # same steps on every rank
    real = np.concatenate([indices[weights > 0] for indices, weights in results])
    assert sorted(real.tolist()) == list(range(num_samples))
    assert all(indices.min() >= 0 and indices.max() < num_samples for indices, _ in results)
