"""The link tool's driver, shared by `torch_impl.links` and `tf_impl.links`: join the peers as
training does, time each collective at every size (`time_collectives`), fit each, and the chief
writes the link profile (`common.projection.link_profile`)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from common.core.config import config_io, devices
from common.core.measure.traffic import wire_bytes
from common.core.records import provenance
from common.launch import environment, exchanges
from common.launch.cluster import ClusterSpec
from common.projection import call_sizes, link_lines
from common.projection.link_groups import group_sizes, tier_partitions, tiers_offered
from common.projection.link_profile import (
    SIZES,
    KindFit,
    LinkProfile,
    Point,
    Tier,
    TierName,
    fit,
    writable,
    write,
)


def repeats(size: int) -> int:
    """Calls timed at `size`, the same on every rank (they must issue the same collectives):
    many small ones, where a call is microseconds, few large ones."""
    return 20 if size <= 262_144 else 10 if size <= 2_097_152 else 5 if size <= 16_777_216 else 3


def time_collectives(
    timer: Callable[[str, int, int], float],
    kinds: tuple[str, ...],
    ranks: int,
    max_bytes: int,
    extra: dict[str, list[int]] | None = None,
) -> dict[str, KindFit]:
    """Time every kind at every size up to `max_bytes`, and at its `extra` sizes (a run's own
    calls, `--sizes-of`), with `timer(kind, payload, calls)` (the mean seconds of one call over
    `calls`), after one call to warm up, and fit each. Every rank calls it alike."""
    found = {}
    for kind in kinds:
        sizes = sorted(
            {size for size in SIZES if size <= max_bytes} | set((extra or {}).get(kind, []))
        )
        points = []
        for size in sizes:
            timer(kind, size, 1)  # warm-up: buffers, connections, compiled functions
            timed = [_timed(timer, kind, size) for _ in range(3)]
            seconds, cpu = (statistics.median(each) for each in zip(*timed, strict=True))
            wire = wire_bytes(kind, size, ranks)
            points.append(Point(payload_bytes=size, wire_bytes=wire, seconds=seconds, cpu_s=cpu))
        alpha, beta = fit(points)
        found[kind] = KindFit(alpha_s=alpha, beta_s_per_byte=beta, points=points)
    return found


def _timed(timer: Callable[[str, int, int], float], kind: str, size: int) -> tuple[float, float]:
    """(the timer's seconds of one call, this process's CPU seconds a call meanwhile)."""
    calls = repeats(size)
    start = time.process_time()  # every thread of the process: the backend's too
    seconds = timer(kind, size, calls)
    return seconds, (time.process_time() - start) / calls


@dataclass(frozen=True, kw_only=True)
class Side:
    """What one framework's link tool hands `main`: its collectives and how it starts."""

    framework: str
    kinds: tuple[str, ...]
    setup: Callable[[Any, ClusterSpec], Any]
    """(config, spec) -> the framework's DistInfo, joined with its peers."""
    timer: Callable[[Any], Callable[[str, int, int], float]]
    """DistInfo -> timer(kind, payload bytes, calls) -> mean seconds of one call."""
    group_timer: Callable[[Any, int], Callable[[str, int, int], float]] | None = None
    """(DistInfo, size) -> the timer of a group of the first `size` ranks, made by every rank
    (the others keep to its barriers); None where the framework has no such groups."""
    partition_timer: Callable[[Any, list[list[int]]], Callable[[str, int, int], float]] | None = (
        None
    )
    """(DistInfo, groups of ranks) -> the timer of those groups running at once, each rank over
    its own (every rank makes every group); None where the framework has no such groups."""
    sequence_timer: Callable[[Any], Callable[[list[tuple[str, int]], int], list[float]]] | None = (
        None
    )
    """DistInfo -> timer(calls, rounds) -> each call's median seconds, the calls issued in
    their order as a step issues them (`call_sizes.in_step`); None: not offered."""
    transport: Callable[[Any, Any], str]
    """(DistInfo, config) -> gloo, nccl, ring..."""
    all_reduce_sum: Callable[[np.ndarray, Any], np.ndarray]
    leave: Callable[[Any, float], None]
    not_measured: dict[str, str] = field(default_factory=dict)


def _arguments(prog: str, description: str | None, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--out", required=True, help="the profile's JSON file (the chief's)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1])
    parser.add_argument(
        "--groups",
        default="",
        help="comma-separated sizes of groups of the first ranks to time as well, e.g. 2,4: "
        "the profile then holds a fit at each size",
    )
    parser.add_argument(
        "--tiers",
        action="store_true",
        help="on several nodes of several ranks each: also time each node's ranks together and "
        "one rank of each node together, every such group at once (the links within a node "
        "and across nodes, as hsdp uses them)",
    )
    parser.add_argument(
        "--sizes-of",
        default="",
        help="comma-separated runs (folders or metrics.jsonl): also time each collective at "
        "the sizes they issue at this launch's size, which a projection then reads off its own "
        "points (common.projection.call_sizes)",
    )
    return parser.parse_args(argv)


def _checked(
    args: argparse.Namespace, framework: str, sub_groups: bool
) -> tuple[ClusterSpec, list[int]]:
    """(this rank's spec, the --groups sizes) once every refusal that needs no framework has
    passed; ValueError naming the problem and the fix."""
    if args.max_bytes < SIZES[1]:
        raise ValueError(
            f"--max-bytes {args.max_bytes}: a fit takes two sizes at least, and the "
            f"smallest are {SIZES[0]} and {SIZES[1]} bytes; give {SIZES[1]} or more"
        )
    spec = environment.from_environment()
    if spec.world_size < 2:
        raise ValueError("a link takes 2 ranks or more: start this under a launcher")
    groups = group_sizes(args.groups, spec.world_size, framework, sub_groups)
    if args.tiers:
        tiers_offered(framework, sub_groups)
    if args.sizes_of:  # a run that cannot say is refused before any measuring
        call_sizes.payloads(args.sizes_of.split(","), spec.world_size)
    if spec.is_chief:  # before minutes of measuring: the profile must have a place
        writable(Path(args.out))
    return spec, groups


def refuse_early(prog: str, description: str | None, framework: str, sub_groups: bool) -> None:
    """From a link tool's `__main__`, before its framework's import: --help, and a refusal
    (exit 2), in a second on every rank rather than after the import. Returns when the
    arguments pass."""
    try:
        _checked(_arguments(prog, description, None), framework, sub_groups)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def main(side: Side, prog: str, description: str | None, argv: list[str] | None) -> int:
    """One rank of a link tool (`torch_impl.links`, `tf_impl.links`): join the peers as training
    does, time, fit, and the chief writes the profile. Exit 2 for a launch that cannot work."""
    args = _arguments(prog, description, argv)
    try:
        spec, groups = _checked(args, side.framework, side.group_timer is not None)
        cfg = config_io.load_config(None, [f"dist.device={args.device}"])
        info = side.setup(cfg, spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    hosts = exchanges.gather_texts(
        spec.node,
        rank=spec.rank,
        world_size=spec.world_size,
        all_reduce_sum=lambda values: side.all_reduce_sum(values, info),
    )
    try:  # every rank sees the same hosts, so every rank refuses alike
        partitions = tier_partitions(hosts, side) if args.tiers else {}
    except ValueError as error:
        if spec.is_chief:
            print(f"error: {error}", file=sys.stderr)
        side.leave(info, cfg.dist.timeout_s)
        return 2

    def extra(world: int) -> dict[str, list[int]]:  # the runs' calls at `world` ranks
        return call_sizes.payloads(args.sizes_of.split(","), world) if args.sizes_of else {}

    world = spec.world_size
    kinds = time_collectives(side.timer(info), side.kinds, world, args.max_bytes, extra(world))
    if side.sequence_timer is not None and args.sizes_of:  # each run's step in its own order
        steps = call_sizes.sequences(args.sizes_of.split(","), world, side.kinds)
        kinds = call_sizes.in_step(side.sequence_timer(info), kinds, steps)
    by_group: dict[int, dict[str, KindFit]] = {}
    group_timer = side.group_timer
    if group_timer is not None:  # None: group_sizes refused any --groups
        for size in groups:
            by_group[size] = time_collectives(
                group_timer(info, size), side.kinds, size, args.max_bytes, extra(size)
            )
    tiers: dict[TierName, Tier] = {}
    partition_timer = side.partition_timer
    if partition_timer is not None:  # None: tier_partitions refused --tiers
        for name, partition in partitions.items():
            size = len(partition[0])
            fits = time_collectives(
                partition_timer(info, partition), side.kinds, size, args.max_bytes, extra(world)
            )
            tiers[name] = Tier(ranks=size, groups=len(partition), kinds=fits)
    if spec.is_chief:
        profile = LinkProfile(
            time=provenance.utc_now(),
            framework=side.framework,
            transport=side.transport(info, cfg),
            device_type=info.device_type,
            world_size=spec.world_size,
            hosts=hosts,
            launcher=spec.launcher,
            launch_id=spec.launch_id,
            kinds=kinds,
            not_measured=side.not_measured,
            groups=by_group,
            tiers=tiers,
        )
        print(f"link profile: {write(profile, args.out)}")
        lines = link_lines.latency_lines(profile) + link_lines.tier_lines(profile)
        lines += link_lines.cpu_lines(profile, devices.cpu_quota())
        for line in lines + link_lines.in_step_lines(profile):
            print(line)
    side.leave(info, cfg.dist.timeout_s)
    return 0
