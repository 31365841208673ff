"""What each dataset is, written once: its images' shape, its classes and its sizes. The models
read their input shape and class count from here (`common.models.zoo.describe`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    channels: int
    height: int
    width: int
    classes: int
    train_samples: int
    test_samples: int

    @property
    def image_shape(self) -> tuple[int, int]:
        return (self.height, self.width)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of one sample."""
        return (self.channels, self.height, self.width)


DATASETS: dict[str, DatasetSpec] = {
    "mnist": DatasetSpec("mnist", 1, 28, 28, 10, 60_000, 10_000),
    # MNIST-shaped by design: the same models and the same data plan (common.data.synthetic).
    "synthetic": DatasetSpec("synthetic", 1, 28, 28, 10, 60_000, 10_000),
}


def get(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    return DATASETS[name]
