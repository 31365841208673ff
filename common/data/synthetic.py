"""MNIST-shaped data made from a fixed seed: `data.name=synthetic`.

Every class has a fixed random template, a 28x28 pattern of on (127) and off (0) pixels. A
sample draws its label uniformly, then its image is its class's template plus noise of 0..127
per pixel: uint8 like MNIST's, learnable like MNIST (a linear model separates the classes), so
a falling loss still means something. Everything is integer arithmetic on `common.data.rng`
streams, so torch, TensorFlow and every machine get the same bytes, and no file, download or
input pipeline is involved: model-size runs measure the model.
"""

from __future__ import annotations

import numpy as np

from common.data import datasets
from common.data.rng import random_bits, stream_key

SEED = 20_260_101  # fixed: every synthetic run of any config trains on the same data
IMAGES, LABELS, TEMPLATES = 5, 6, 7  # stream purposes
TRAIN, TEST = 0, 1
SHAPE = datasets.get("synthetic")  # MNIST's shape and classes
PIXELS, CLASSES = SHAPE.height * SHAPE.width * SHAPE.channels, SHAPE.classes


def _bytes(key: np.uint64, count: int) -> np.ndarray:
    words = random_bits(key, -(-count // 8))
    return words.astype("<u8").view(np.uint8)[:count]  # little-endian on every machine


def templates() -> np.ndarray:
    """uint8 [10, 784]: each class's pattern, pixels 0 or 127."""
    on = _bytes(stream_key(SEED, TEMPLATES), CLASSES * PIXELS) >= 128
    return (on.astype(np.uint8) * 127).reshape(CLASSES, PIXELS)


def split(which: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 images [count, 28, 28], int64 labels [count]) of the train (0) or test (1) split;
    the first `count` samples of that split, whatever `count` is."""
    labels = (_bytes(stream_key(SEED, LABELS, which), count) % CLASSES).astype(np.int64)
    noise = _bytes(stream_key(SEED, IMAGES, which), count * PIXELS).reshape(count, PIXELS) >> 1
    images = templates()[labels] + noise  # at most 127 + 127: no overflow
    return images.reshape(count, SHAPE.height, SHAPE.width), labels
