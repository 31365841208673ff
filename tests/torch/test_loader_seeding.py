"""What a DataLoader worker draws depends on (seed, epoch, rank, worker) only: not on the
epochs it ran before (a resumed run starts its workers at a later epoch) and never on the
training's own generator."""

import numpy as np
import torch
from torch.utils.data import DataLoader

from common.data.shard import TrainPlan
from torch_impl.data import MnistImages, PlanBatchSampler


class Noisy(MnistImages):
    """Each sample carries one number from the worker's generator, as an augmentation would."""

    def __getitem__(self, index):
        return torch.rand(1), self.labels[index]


def drawn(start_epoch: int, epochs: int, workers: int) -> list[list[float]]:
    labels = np.arange(64, dtype=np.int64)
    images = np.zeros((64, 28, 28), dtype=np.uint8)
    plan = TrainPlan(num_samples=64, global_batch=8, world_size=1, rank=0, seed=3)
    sampler = PlanBatchSampler(plan)
    loader = DataLoader(
        Noisy(images, labels, seed=3, dp_rank=0),
        batch_sampler=sampler,
        num_workers=workers,
        persistent_workers=True,
        generator=torch.Generator().manual_seed(0),
    )
    found = []
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        found.append([float(x) for noise, _ in loader for x in noise.flatten()])
    return found


def test_a_worker_draws_the_same_numbers_for_an_epoch_whatever_ran_before():
    before = torch.get_rng_state()
    uninterrupted = drawn(0, 3, workers=2)
    resumed = drawn(2, 3, workers=2)
    assert resumed[0] == uninterrupted[2]
    assert uninterrupted[1] != uninterrupted[2]  # epochs differ
    assert torch.equal(torch.get_rng_state(), before)  # the training's generator untouched
