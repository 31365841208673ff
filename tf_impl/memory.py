"""What a worker holds: its peak memory and the exact bytes of its variables, gradients and
optimizer slots. MultiWorkerMirroredStrategy replicates everything, so every worker holds the
whole model (the DDP picture)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from common.core.measure.memory import RSS_PEAK, MemoryUse, rss_bytes


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


def baseline(device: str) -> int:
    """What the worker holds before the model is built, in the measure `peak` uses.
    `device`: TensorFlow's name of the worker's device, "GPU:0" or "CPU:0"."""
    if device.startswith("GPU"):
        return int(tf.config.experimental.get_memory_info(device)["current"])
    return rss_bytes()


def reset_peak(device: str) -> None:
    if device.startswith("GPU"):
        tf.config.experimental.reset_memory_stats(device)
    else:
        RSS_PEAK.reset()


def peak(device: str) -> tuple[int, str]:
    """(bytes, what they count): TensorFlow's allocator peak on the GPU since the last reset,
    else the process's peak resident set (`common.core.measure.memory.RssPeak`)."""
    if device.startswith("GPU"):
        used = tf.config.experimental.get_memory_info(device)["peak"]
        return int(used), "tf.config.experimental.get_memory_info peak"
    return RSS_PEAK.read()


def memory_use(device: str, model, optimizer, baseline_bytes: int) -> MemoryUse:
    peak_bytes, counts = peak(device)
    return MemoryUse(
        peak_bytes=peak_bytes,
        peak_counts=counts,
        baseline_bytes=baseline_bytes,
        **state_bytes(model, optimizer),
    )
