"""The peak MFU divides by (`common.peak`): a square matmul timed on this worker's device and
threads, at the run's compute precision."""

from __future__ import annotations

import time

import tensorflow as tf

DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}
SIZE = {"CPU": 2048, "GPU": 8192}  # about 0.1 s on 2 CPU cores, milliseconds on a GPU
REPEATS = 5


def gemm_flops(device: str, precision: str) -> float:
    """FLOP/s of the fastest of REPEATS products of two SIZE x SIZE matrices (after one warm-up):
    2 n^3 FLOPs each. `device`: "CPU:0" or "GPU:0". `.numpy()` waits for the result."""
    size = SIZE.get(device.split(":")[0], SIZE["CPU"])
    with tf.device(device):
        a = tf.cast(tf.random.normal((size, size)), DTYPES[precision])
        b = tf.cast(tf.random.normal((size, size)), DTYPES[precision])
        best = float("inf")
        for _ in range(REPEATS + 1):
            start = time.perf_counter()
            tf.linalg.matmul(a, b)[0, 0].numpy()
            best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best
