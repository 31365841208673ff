"""Measure the links of a launch with torch's own collectives (gloo or NCCL, as training uses
them) and write a link profile (`common.core.measure.links`). One rank of any launcher:

    python -m common.launch --nproc 2 -- python -m torch_impl.links --out results/links.json
    srun python -m torch_impl.links --out results/links.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.distributed as torch_dist

from common.core.config import config_io
from common.core.measure import collectives, links
from common.launch import environment
from torch_impl import dist
from torch_impl.parallel import resolve_strategy


def timer(info: dist.DistInfo):
    """timer(kind, payload bytes, repeats) -> mean seconds of one float32 call over the ranks."""

    def seconds(kind: str, payload: int, repeats: int) -> float:
        world = info.world_size
        count = max(2, payload // 4)
        if kind == "reduce_scatter":
            count = -(-count // world) * world
        given = torch.ones(count, dtype=torch.float32, device=info.device)
        gathered = torch.empty(count * world, dtype=torch.float32, device=info.device)
        scattered = torch.empty(count // world, dtype=torch.float32, device=info.device)
        # torch 2.13 renamed the tensor forms (the old names warn); 2.11 has only those
        gather = getattr(torch_dist, "all_gather_single", torch_dist.all_gather_into_tensor)
        scatter = getattr(torch_dist, "reduce_scatter_single", torch_dist.reduce_scatter_tensor)
        calls = {
            "all_reduce": lambda: torch_dist.all_reduce(given),
            "all_gather": lambda: gather(gathered, given),
            "reduce_scatter": lambda: scatter(scattered, given),
        }
        dist.synchronize(info)
        torch_dist.barrier()
        start = time.perf_counter()
        for _ in range(repeats):
            calls[kind]()
        dist.synchronize(info)
        return (time.perf_counter() - start) / repeats

    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_impl.links", description=__doc__)
    parser.add_argument("--out", required=True, help="the profile's JSON file (the chief's)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--max-bytes", type=int, default=links.SIZES[-1])
    args = parser.parse_args(argv)
    try:
        spec = environment.from_environment()
        if spec.world_size < 2:
            raise ValueError("a link takes 2 ranks or more: start this under a launcher")
        cfg = config_io.load_config(None, [f"dist.device={args.device}"])
        info = dist.setup_distributed(resolve_strategy(cfg, spec.world_size), spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    kinds = links.measure(timer(info), links.KIND_NAMES, info.world_size, args.max_bytes)
    hosts = collectives.gather_texts(
        spec.node,
        rank=info.rank,
        world_size=info.world_size,
        all_reduce_sum=lambda values: dist.all_reduce_sum(values, info),
    )
    if info.is_chief:
        profile = links.LinkProfile(
            time=links.stamp(),
            framework="torch",
            transport=str(info.backend),
            device_type=info.device_type,
            world_size=info.world_size,
            hosts=hosts,
            launcher=spec.launcher,
            launch_id=spec.launch_id,
            kinds=kinds,
        )
        print(f"link profile: {links.write(profile, args.out)}")
    dist.leave_together(info, cfg.dist.timeout_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
