"""The peak MFU divides by (`common.core.measure.peak`): a square matmul timed on this worker's
device and
threads, at the run's compute precision."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from common.core.measure import peak

DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}
MAX_SIZE = {"CPU": 2048, "GPU": 8192}  # about 0.1 s on 2 CPU cores, milliseconds on a GPU


def gemm_flops(device: str, precision: str) -> peak.Probe:
    """`device`: "CPU:0" or "GPU:0"; `.numpy()` of one element waits for the product."""

    def matmul(size: int) -> Callable[[], None]:
        with tf.device(device):
            # stateless: the draw leaves the run's random state as it was, cache or no cache
            a = tf.random.stateless_normal((size, size), seed=(size, 1))
            b = tf.random.stateless_normal((size, size), seed=(size, 2))
            a, b = tf.cast(a, DTYPES[precision]), tf.cast(b, DTYPES[precision])

        def multiply() -> None:
            with tf.device(device):
                tf.linalg.matmul(a, b)[0, 0].numpy()

        return multiply

    return peak.probe_gemm(matmul, MAX_SIZE.get(device.split(":")[0], MAX_SIZE["CPU"]))
