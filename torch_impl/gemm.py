"""The peak MFU divides by (`common.peak`): a square matmul timed on this rank's device and
threads, at the run's compute precision."""

from __future__ import annotations

import torch

from common import peak

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SIZE = {"cpu": 2048, "cuda": 8192}  # about 0.1 s on 2 CPU cores, milliseconds on a GPU


def gemm_flops(device: torch.device, precision: str) -> float:
    size = SIZE.get(device.type, SIZE["cpu"])
    a = torch.randn(size, size, device=device).to(DTYPES[precision])
    b = torch.randn(size, size, device=device).to(DTYPES[precision])

    def multiply() -> None:
        torch.matmul(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return peak.gemm_flops(size, multiply)
