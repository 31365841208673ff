"""A link profile from torch's own model of NCCL, for a GPU cluster whose links were not
measured: `torch._inductor.comm_analysis.estimate_nccl_collective_runtime_impl`, which mirrors
NCCL's tuner (src/graph/tuning.cc: ring and tree, LL, LL128 and Simple, the fastest of them)
on bandwidth and latency tables for the GPU it sees, and for an A100 with 8 GPUs a node, NVLink
inside a node and InfiniBand HDR across, where it sees none. Every figure of such a profile is
that model's, not a measurement; its `source` says so, and so does compare.

    python -m torch_impl.nccl_model --worlds 8,64,512 --out results/links-torch.json

The profile holds the model's time of each kind at every world size given
(`LinkProfile.groups`), at every power of 2 from 8 B to 64 MiB, and a projection to one of them
reads it off those points (`KindFit.interpolated`): one alpha and beta cannot follow a model
that changes protocol with the size (a linear fit missed it by up to 49%).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch._inductor import comm_analysis

from common.core.measure.traffic import wire_bytes
from common.core.records import provenance
from common.projection import link_profile

SIZES = [2**power for power in range(3, 27)]  # 8 B to 64 MiB: a model's points cost nothing
COLLECTIVES = {
    "all_reduce": comm_analysis.NCCL_COLL.ALL_REDUCE,
    "all_gather": comm_analysis.NCCL_COLL.ALL_GATHER,
    "reduce_scatter": comm_analysis.NCCL_COLL.REDUCE_SCATTER,
}


def seconds(kind: str, payload: int, group: int) -> float:
    """The model's seconds for one call: `payload` as the link tool counts it (an all-gather's
    own shard; the whole buffer otherwise), NCCL's bytes the whole buffer."""
    whole = payload * group if kind == "all_gather" else payload
    return (
        comm_analysis.estimate_nccl_collective_runtime_impl(whole, group, COLLECTIVES[kind]) / 1e3
    )


def fits(group: int) -> dict[str, link_profile.KindFit]:
    found = {}
    for kind in COLLECTIVES:
        points = [
            link_profile.Point(
                payload_bytes=size,
                wire_bytes=wire_bytes(kind, size, group),
                seconds=seconds(kind, size, group),
            )
            for size in SIZES
        ]
        alpha, beta = link_profile.fit(points)
        found[kind] = link_profile.KindFit(alpha_s=alpha, beta_s_per_byte=beta, points=points)
    return found


def where() -> str:
    """What the model takes the cluster to be."""
    gpu = comm_analysis.get_gpu_type().name.lower()
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if seen:
        return f"{gpu} GPUs, {seen} a node (the ones seen here)"
    return f"{gpu} GPUs, 8 a node (assumed: no GPU seen here)"


def profile(worlds: list[int]) -> link_profile.LinkProfile:
    """A profile of torch's NCCL model at each of `worlds` (2 ranks or more)."""
    smallest = min(worlds)
    return link_profile.LinkProfile(
        time=provenance.utc_now(),
        framework="torch",
        transport="nccl",
        device_type="gpu",
        world_size=smallest,
        hosts=[],
        launcher="model",
        launch_id="",
        kinds=fits(smallest),
        source=(
            f"torch {torch.__version__.split('+')[0]}'s NCCL model "
            f"(torch._inductor.comm_analysis) for {where()}: a model, not a measurement"
        ),
        groups={world: fits(world) for world in sorted(set(worlds)) if world != smallest},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_impl.nccl_model", description=__doc__)
    parser.add_argument("--worlds", required=True, help="world sizes, e.g. 8,64,512")
    parser.add_argument("--out", required=True, help="the profile's JSON file")
    args = parser.parse_args(argv)
    try:
        worlds = [int(part) for part in args.worlds.split(",")]
        if not worlds or min(worlds) < 2:
            raise ValueError
    except ValueError:
        print(
            f"error: --worlds {args.worlds!r}: give world sizes of 2 or more, like 8,64,512",
            file=sys.stderr,
        )
        return 2
    try:
        link_profile.writable(Path(args.out))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"link profile: {link_profile.write(profile(worlds), args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
