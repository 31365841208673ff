"""Turn the shared MNIST arrays and the shared shard plan into torch batches.

Two pipelines give the same samples at every step (`data.pipeline`):
  tensor  the normalized dataset is put on the device once; a batch is an index_select with the
          plan's indices (no per-sample Python)
  loader  a Dataset that normalizes one uint8 image at a time (as the seeds' transforms do) and a
          DataLoader with workers and pinned memory, fed by a batch sampler that replays the plan.
          Its workers keep running from epoch to epoch, and each reseeds its random generators
          from (seed, epoch, rank, worker) when the first batch of an epoch reaches it
          (`common.data.shard.loader_seed`); the loader draws from a generator of its own, never
          from the training's (dropout), so a run gives the same numbers with any
          data.loader_workers and when stopped and resumed anywhere
Evaluation always reads the preloaded test tensors with the padded, weighted evaluation plan.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from common.core.config import devices
from common.core.config.config import Config
from common.core.config.strategies import ParallelDims
from common.data import mnist as common_data
from common.data.shard import TrainPlan, loader_seed, plans_for
from torch_impl.dist import DistInfo


class EpochBatch(list[int]):
    """One step's sample indices, and the epoch they belong to."""

    epoch: int


class MnistImages(Dataset):
    """uint8 images normalized one at a time by the same function as the tensor pipeline."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, *, seed: int, dp_rank: int):
        self.images = images
        self.labels = torch.from_numpy(labels)
        self.seed, self.dp_rank = seed, dp_rank
        self.seeded_epoch: int | None = None  # in a worker process: the epoch it seeded for

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        pixels = torch.from_numpy(common_data.normalize(self.images[index]))
        return pixels.unsqueeze(0), self.labels[index]

    def __getitems__(self, batch: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        worker = get_worker_info()
        epoch = getattr(batch, "epoch", None)
        if worker is not None and epoch is not None and epoch != self.seeded_epoch:
            base = loader_seed(self.seed, epoch, self.dp_rank) + worker.id
            torch.manual_seed(base)  # the worker's own generators, not the training's
            random.seed(base)
            np.random.seed(base % 2**32)
            self.seeded_epoch = epoch
        return [self[index] for index in batch]


class PlanBatchSampler(Sampler[list[int]]):
    """Yields this rank's batches of the shard plan for the epoch set by `set_epoch`."""

    def __init__(self, plan: TrainPlan):
        self.plan = plan
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """The epoch to yield next, from its step `start`."""
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        return self.plan.steps_per_epoch - self.start

    def __iter__(self) -> Iterator[list[int]]:
        for indices in self.plan.rank_indices(self.epoch)[self.start :]:
            batch = EpochBatch(indices.tolist())
            batch.epoch = self.epoch
            yield batch


class TorchData:
    def __init__(self, cfg: Config, info: DistInfo, dims: ParallelDims):
        mnist = common_data.load_limited(cfg.data)
        train_images, train_labels = mnist.train_images, mnist.train_labels
        test_images, test_labels = mnist.test_images, mnist.test_labels
        self.device = info.device
        self.pipeline = cfg.data.pipeline
        self.seed, self.dp_rank = cfg.train.seed, info.rank  # every rank is data-parallel
        self.plan, eval_plan = plans_for(
            num_train=len(train_labels),
            num_test=len(test_labels),
            global_batch=cfg.train.global_batch_size(dims.dp_size),
            eval_batch=cfg.train.eval_batch_size,
            seed=cfg.train.seed,
            dp_size=dims.dp_size,
            dp_rank=info.rank,
        )
        self.eval_indices, self.eval_weights = eval_plan.rank_indices()
        self.test_images = self._to_device(common_data.normalize(test_images))
        self.test_labels = torch.from_numpy(test_labels).to(self.device)
        if self.pipeline == "tensor":
            self.train_images = self._to_device(common_data.normalize(train_images))
            self.train_labels = torch.from_numpy(train_labels).to(self.device)
        else:
            self.sampler = PlanBatchSampler(self.plan)
            # torch draws its workers' base seed from `generator`, else from the global
            # generator that dropout uses (once per launch with persistent workers: a resumed
            # run then drew at another epoch than an uninterrupted one, and lost bitwise resume)
            generator = torch.Generator().manual_seed(loader_seed(self.seed, 0, self.dp_rank))
            workers = cfg.data.loader_workers
            self.loader = DataLoader(
                MnistImages(train_images, train_labels, seed=self.seed, dp_rank=self.dp_rank),
                batch_sampler=self.sampler,
                num_workers=workers,
                pin_memory=cfg.torch.pin_memory and self.device.type == "cuda",
                generator=generator,
                persistent_workers=workers > 0,
            )

    def _to_device(self, images: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(images).unsqueeze(1).to(self.device)  # NCHW

    @property
    def steps_per_epoch(self) -> int:
        return self.plan.steps_per_epoch

    def train_batches(
        self, epoch: int, start: int = 0
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's (images, labels) for every step of `epoch` from step `start`, on the
        device; the tensor pipeline draws the epoch's order when called, the loader when first
        asked for a batch."""
        if self.pipeline == "tensor":
            indices = torch.from_numpy(self.plan.rank_indices(epoch)[start:]).to(self.device)
            return ((self.train_images[step], self.train_labels[step]) for step in indices)
        return self._loaded(epoch, start)

    def _loaded(self, epoch: int, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(epoch, start)
        for images, labels in self.loader:
            yield (
                images.to(self.device, non_blocking=True),
                labels.to(self.device, non_blocking=True),
            )

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(images, labels, weights) of this rank's share of the test set; weight 0 = padding."""
        indices = torch.from_numpy(self.eval_indices).to(self.device)
        weights = torch.from_numpy(self.eval_weights).to(self.device)
        for step_indices, step_weights in zip(indices, weights, strict=True):
            yield self.test_images[step_indices], self.test_labels[step_indices], step_weights


def build_dataset(cfg: Config, info: DistInfo, dims: ParallelDims) -> TorchData:
    """This rank's data; train.eval_batch_size=0 takes the device's choice (the training
    program resolves it first, so that its records name it)."""
    return TorchData(devices.resolve_eval_batch(cfg, "torch", info.device_type), info, dims)
