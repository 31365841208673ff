"""The peak MFU divides by (`common.core.measure.peak`): a square matmul timed on this rank's
device and
threads, at the run's compute precision."""

from __future__ import annotations

from collections.abc import Callable

import torch

from common.core.measure import peak

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MAX_SIZE = {"cpu": 2048, "cuda": 8192}  # about 0.1 s on 2 CPU cores, milliseconds on a GPU


def gemm_flops(device: torch.device, precision: str) -> peak.Probe:
    """The faster of torch's two GEMM routes on the CPU: `torch.matmul` (BLAS: MKL) and the same
    product as a 1x1 convolution (oneDNN, the route of the model's convolutions): MKL's sgemm
    takes a path without AVX-512 on AMD CPUs, and a matmul-only peak made the CNN's MFU read
    80% there (docs/performance.md). On CUDA: matmul (cuBLAS)."""
    dtype = DTYPES[precision]

    def matrices(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        # its own generator: a draw from the global one would shift dropout's numbers, and
        # only in runs that measured the peak (the first of a machine; later ones read the cache)
        drawn = torch.Generator(device=device).manual_seed(size)
        a = torch.randn(size, size, device=device, generator=drawn).to(dtype)
        return a, torch.randn(size, size, device=device, generator=drawn).to(dtype)

    def matmul(size: int) -> Callable[[], None]:
        a, b = matrices(size)

        def multiply() -> None:
            torch.matmul(a, b)
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        return multiply

    if device.type == "cuda":
        return peak.probe_gemm(matmul, MAX_SIZE["cuda"])

    # [16, size, 16, size/256] x [size, size, 1, 1]: size output channels at size positions,
    # each a dot product of length size: 2 size^3 FLOPs, channels_last as oneDNN prefers it. A
    # batch of 16 images, not 1: torch sends a 1x1 convolution of fewer than 16 images to its
    # native (MKL) path when it runs on one thread (ConvParams::use_mkldnn; ONEDNN_VERBOSE showed
    # no oneDNN call), so the 1-thread peak of each of 2 ranks read 95 GFLOP/s where oneDNN
    # gives 209 and TensorFlow's matmul 222, and 2-rank MFUs read 65%.
    def convolution(size: int) -> Callable[[], None]:
        a, b = matrices(size)
        images = a.reshape(16, size, 16, size // 256).contiguous(memory_format=torch.channels_last)
        kernel = b.reshape(size, size, 1, 1).contiguous(memory_format=torch.channels_last)

        def convolve() -> None:
            torch.nn.functional.conv2d(images, kernel)

        return convolve

    probes = [peak.probe_gemm(route, MAX_SIZE["cpu"]) for route in (matmul, convolution)]
    return max(probes, key=lambda probe: probe.flops)
