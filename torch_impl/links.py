"""Measure the links of a launch with torch's own collectives (gloo or NCCL, as training uses
them) and write a link profile (`common.projection.link_profile`). One rank of any launcher:

    python -m common.launch --nproc 2 -- python -m torch_impl.links --out results/links.json
    srun python -m torch_impl.links --out results/links.json

`--groups 2,4` also times groups of the first 2 and 4 ranks (torch process groups of their own),
so that the profile holds a fit at each size and the latency's growth with the group is
measured, not assumed. `--tiers`, on several nodes of several ranks each, also times every
node's ranks together (all nodes at once) and one rank of each node together (all such groups
at once): the links within a node and across nodes, as hsdp uses them.
"""

from __future__ import annotations

from common.projection import link_bench

if __name__ == "__main__":  # --help, and a refusal, in a second: before the framework's import
    link_bench.refuse_early("python -m torch_impl.links", __doc__, "torch", sub_groups=True)

import statistics
import time

import torch
import torch.distributed as torch_dist

from common.projection import link_profile
from torch_impl import dist
from torch_impl.parallel import resolve_strategy


def timer(info: dist.DistInfo, size: int | None = None):
    """timer(kind, payload bytes, repeats) -> mean seconds of one float32 call over the ranks,
    or over the first `size` of them (a group of their own: every rank makes it, and the others
    only keep to the barriers, returning 0)."""
    return partition_timer(info, [list(range(size))] if size else None)


def partition_timer(info: dist.DistInfo, partition: list[list[int]] | None):
    """The timer of groups of ranks (None: the whole launch) that run at once, each rank over
    its own group; every rank makes every group, in one order, as torch requires, and a rank
    in none only keeps to the barriers, returning 0. Each rank times its own group."""
    group, world = None, info.world_size
    if partition is not None:
        made = [torch_dist.new_group(ranks=ranks) for ranks in partition]
        mine = [index for index, ranks in enumerate(partition) if info.rank in ranks]
        group = made[mine[0]] if mine else None
        world = len(partition[mine[0]]) if mine else 1
    member = partition is None or group is not None

    def seconds(kind: str, payload: int, repeats: int) -> float:
        call = _call(info, kind, payload, group, world)
        dist.synchronize(info)
        torch_dist.barrier()
        if not member:
            return 0.0
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        dist.synchronize(info)
        return (time.perf_counter() - start) / repeats

    return seconds


def sequence_timer(info: dist.DistInfo):
    """timer(calls, rounds) -> each of `calls` ((kind, payload bytes), over every rank, in that
    order) its median seconds on the chief over `rounds` rounds of them all, one after another
    as a step issues them, after a round to warm up."""

    def seconds(calls: list[tuple[str, int]], rounds: int) -> list[float]:
        made = [_call(info, kind, payload, None, info.world_size) for kind, payload in calls]
        for call in made:
            call()
        dist.synchronize(info)
        torch_dist.barrier()
        times: list[list[float]] = [[] for _ in made]
        for _ in range(rounds):
            for call, each in zip(made, times, strict=True):
                start = time.perf_counter()
                call()
                dist.synchronize(info)
                each.append(time.perf_counter() - start)
        return [statistics.median(each) for each in times]

    return seconds


def _call(info: dist.DistInfo, kind: str, payload: int, group, world: int):
    """One float32 collective of `kind` handing `payload` bytes over `group`, its buffers made."""
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
        "all_reduce": lambda: torch_dist.all_reduce(given, group=group),
        "all_gather": lambda: gather(gathered, given, group=group),
        "reduce_scatter": lambda: scatter(scattered, given, group=group),
    }
    return calls[kind]


def _setup(cfg, spec) -> dist.DistInfo:
    return dist.setup_distributed(resolve_strategy(cfg, spec.world_size), spec)


SIDE = link_bench.Side(
    framework="torch",
    kinds=link_profile.KIND_NAMES,
    setup=_setup,
    timer=timer,
    group_timer=timer,
    partition_timer=partition_timer,
    sequence_timer=sequence_timer,
    transport=lambda info, cfg: str(info.backend),
    all_reduce_sum=dist.all_reduce_sum,
    leave=dist.leave_together,
)


def main(argv: list[str] | None = None) -> int:
    return link_bench.main(SIDE, "python -m torch_impl.links", __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
