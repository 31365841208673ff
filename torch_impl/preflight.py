"""The preflight's torch probe: one rank of `python -m common.tools.preflight` (see there).

    python -m common.launch --nproc 2 -- python -m torch_impl.preflight [--device auto]

Every rank joins the process group as a training run would (same device and thread
decisions); the chief prints one line `PREFLIGHT {json}`: versions, what every rank sees, the
TF32 settings, the precisions this hardware runs, and all-reduce bandwidth over sizes.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.distributed as torch_dist

from common.core.config import config_io, strategies
from common.launch import environment
from common.tools import preflight
from torch_impl import dist
from torch_impl.parallel import resolve_strategy
from torch_impl.precision import apply_tf32


def precisions(device: torch.device) -> list[str]:
    """What this hardware computes well: on a CPU bf16 where it has the instructions (else
    torch emulates it, many times slower than fp32), never fp16 (torch's CPU fp16 is slow
    everywhere); on a GPU bf16 where supported, and fp16."""
    if device.type != "cuda":
        return preflight.cpu_precisions()
    return ["none", "bf16", "fp16"] if torch.cuda.is_bf16_supported() else ["none", "fp16"]


def all_reduce_seconds(size_bytes: int, iterations: int, info: dist.DistInfo) -> float:
    """Mean seconds of one float32 sum over the ranks of `size_bytes`, after 2 warm-ups."""
    tensor = torch.ones(max(1, size_bytes // 4), dtype=torch.float32, device=info.device)
    for _ in range(2):
        torch_dist.all_reduce(tensor)
    dist.synchronize(info)
    torch_dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        torch_dist.all_reduce(tensor)
    dist.synchronize(info)
    return (time.perf_counter() - start) / iterations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_impl.preflight", description=__doc__)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--tf32", action="store_true", help="dist.tf32=true")
    args = parser.parse_args(argv)
    overrides = [f"dist.device={args.device}", f"dist.tf32={str(args.tf32).lower()}"]
    try:
        spec = environment.from_environment()
        cfg = resolve_strategy(config_io.load_config(None, overrides), spec.world_size)
        info = dist.setup_distributed(cfg, spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    preflight.report_probe(
        info,
        framework="torch",
        backend=info.backend or "none",
        versions=dist.versions(info),
        visible_gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        tf32=apply_tf32(cfg.dist.tf32),
        precisions=precisions(info.device),
        strategies=strategies.runnable("torch", info.world_size),
        all_reduce_seconds=lambda size, repetitions: all_reduce_seconds(size, repetitions, info),
        all_reduce_sum=lambda values: dist.all_reduce_sum(values, info),
    )
    dist.leave_together(info, cfg.dist.timeout_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
