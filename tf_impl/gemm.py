"""The peak MFU divides by (`common.core.peak`): a square matmul timed on this worker's device and
threads, at the run's compute precision."""

from __future__ import annotations

import tensorflow as tf

from common.core import peak

DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}
SIZE = {"CPU": 2048, "GPU": 8192}  # about 0.1 s on 2 CPU cores, milliseconds on a GPU


def gemm_flops(device: str, precision: str) -> float:
    """`device`: "CPU:0" or "GPU:0"; `.numpy()` of one element waits for the product."""
    size = SIZE.get(device.split(":")[0], SIZE["CPU"])
    with tf.device(device):
        # stateless: the draw leaves the run's random state as it was, cache or no cache
        a = tf.cast(tf.random.stateless_normal((size, size), seed=(0, 1)), DTYPES[precision])
        b = tf.cast(tf.random.stateless_normal((size, size), seed=(0, 2)), DTYPES[precision])

        def multiply() -> None:
            tf.linalg.matmul(a, b)[0, 0].numpy()

        return peak.gemm_flops(size, multiply)
