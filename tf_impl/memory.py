"""What a worker holds: its peak memory and the exact bytes of its variables, gradients and
optimizer slots. MultiWorkerMirroredStrategy replicates everything, so every worker holds the
whole model (the DDP picture)."""

from __future__ import annotations

import resource

import numpy as np
import tensorflow as tf


def _bytes(variables) -> int:
    return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)


def state_bytes(model, optimizer) -> dict[str, int]:
    trainable = model.trainable_variables
    slots = [v for v in optimizer.variables if len(v.shape) > 0]  # not iterations / lr scalars
    return {
        "param_bytes": _bytes(trainable),
        # One gradient per trainable variable, materialized every step (then all-reduced).
        "grad_bytes": _bytes(trainable),
        "optim_bytes": _bytes(slots),
    }


def reset_peak(device: str) -> None:
    if device == "gpu":
        tf.config.experimental.reset_memory_stats("GPU:0")


def peak(device: str) -> tuple[int, str]:
    """(bytes, what they count): TensorFlow's allocator peak on the GPU since the last reset,
    else the process's peak resident set since it started (Linux reports ru_maxrss in KiB)."""
    if device == "gpu":
        used = tf.config.experimental.get_memory_info("GPU:0")["peak"]
        return int(used), "tf.config.experimental.get_memory_info peak"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process peak RSS"


MEMORY_FIELDS = ("peak_bytes", "param_bytes", "grad_bytes", "optim_bytes")


def memory_row(device: str, model, optimizer) -> list[float]:
    """This worker's numbers in MEMORY_FIELDS order, for `dist.gather_rows`."""
    peak_bytes, _ = peak(device)
    held = state_bytes(model, optimizer)
    return [peak_bytes, held["param_bytes"], held["grad_bytes"], held["optim_bytes"]]


def memory_entries(table: np.ndarray, device: str) -> list[dict]:
    """The gathered rows as the metrics' memory entries, one per rank."""
    counts = peak(device)[1]
    return [
        {"rank": rank, "peak_counts": counts,
         **{name: int(value) for name, value in zip(MEMORY_FIELDS, row, strict=True)}}
        for rank, row in enumerate(table)
    ]  # fmt: skip
