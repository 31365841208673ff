"""The peak MFU divides by (`common.peak`): a square matmul timed on this rank's device and
threads, at the run's compute precision."""

from __future__ import annotations

import time

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SIZE = {"cpu": 2048, "cuda": 8192}  # about 0.1 s on 2 CPU cores, milliseconds on a GPU
REPEATS = 5


def gemm_flops(device: torch.device, precision: str) -> float:
    """FLOP/s of the fastest of REPEATS products of two SIZE x SIZE matrices (after one warm-up):
    2 n^3 FLOPs each."""
    size = SIZE.get(device.type, SIZE["cpu"])
    a = torch.randn(size, size, device=device).to(DTYPES[precision])
    b = torch.randn(size, size, device=device).to(DTYPES[precision])
    best = float("inf")
    for _ in range(REPEATS + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        torch.matmul(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best
