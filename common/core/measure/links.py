"""A link model: what one collective costs on the links a launch runs on, measured with each
framework's own collectives (`torch_impl.links`, `tf_impl.links`, under any launcher) and fitted
per kind as time = alpha + beta x wire bytes (the bytes a ring algorithm makes one rank send,
`common.core.measure.traffic.wire_bytes`): alpha the fixed cost of a call (latency, launch,
synchronization), beta the cost of a byte (1 / the bandwidth one rank sees).

The profile is JSON, checked by `LinkProfile` (its schema: docs/link_profile.schema.json), and
names the hosts and the launch it was measured on, so that a projection can refuse to apply it
to runs of other hosts.

    python -m common.launch --nproc 2 -- python -m torch_impl.links --out results/links.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.core.config import config_io
from common.core.measure import collectives
from common.core.measure.traffic import wire_bytes
from common.core.records import provenance
from common.launch import environment
from common.launch.cluster import ClusterSpec
from common.storage import whole

PROFILE_VERSION = 1
# 8 B to 64 MiB, a factor 8 apart: latency-bound at the bottom, bandwidth-bound at the top.
SIZES = (8, 64, 512, 4096, 32_768, 262_144, 2_097_152, 16_777_216, 67_108_864)
KIND_NAMES = ("all_reduce", "all_gather", "reduce_scatter")


class Point(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    payload_bytes: int
    """Bytes each rank handed the collective (its shard, for an all_gather)."""
    wire_bytes: float
    """Bytes a ring algorithm makes each rank send for it."""
    seconds: float
    """Median seconds of one call, on the chief, between barriers."""


class KindFit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    alpha_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """Fixed seconds of one call, whatever its size (the fit's intercept)."""
    beta_s_per_byte: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """Seconds per wire byte (the fit's slope); 1 / beta is the bandwidth one rank sees."""
    points: Annotated[list[Point], Field(min_length=2)]
    """The measurements the fit came from: two sizes at least."""


class LinkProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    profile_version: int = PROFILE_VERSION
    """Version of this format."""
    time: str
    """UTC time of the measurement, ISO 8601."""
    framework: str
    """torch or tf: whose collectives were timed."""
    transport: str
    """The backend: gloo or nccl (torch), ring or nccl (TensorFlow)."""
    device_type: str
    """cpu or gpu."""
    world_size: int
    """Ranks that took part."""
    hosts: list[str]
    """Every rank's host, in rank order."""
    launcher: str
    """How the ranks were started: local, torchrun, slurm, tf_config."""
    launch_id: str
    """The launch's id (SLURM job, launcher's run id); empty when it had none."""
    kinds: Annotated[dict[str, KindFit], Field(min_length=1)]
    """Each collective measured, with its fit."""
    not_measured: dict[str, str] = Field(default_factory=dict)
    """Collectives the framework does not offer here, with why."""

    def seconds(self, kind: str, calls: float, wire: float, group: int) -> float | None:
        """Seconds the model gives `calls` collectives of `kind` over `group` ranks sending
        `wire` bytes: each call pays the link's latency once per step of its algorithm
        (`latency_steps`), and every wire byte beta. The fit's alpha holds the steps of the
        group it was measured on; per step it is alpha over their number."""
        fit = self.kinds.get(kind) or self.kinds.get("all_reduce")
        if fit is None:
            return None
        measured = latency_steps(kind, self.transport, self.world_size)
        per_step = fit.alpha_s / max(1, measured)
        steps = latency_steps(kind, self.transport, group)
        return calls * steps * per_step + wire * fit.beta_s_per_byte


def ring_steps(kind: str, ranks: int) -> int:
    """Latency steps of a ring collective over `ranks`: an all-reduce is a reduce-scatter then an
    all-gather, each n-1 steps (NCCL src/graph/tuning.cc: nsteps 2(n-1) for Ring AllReduce)."""
    return (2 if kind == "all_reduce" else 1) * max(0, ranks - 1)


def tree_steps(kind: str, ranks: int) -> int:
    """Latency steps of a tree all-reduce: up the tree and down again, 2 x ceil(log2 n); other
    kinds have no tree (NCCL runs them as rings)."""
    if kind != "all_reduce":
        return ring_steps(kind, ranks)
    return 2 * max(0, ranks - 1).bit_length() if ranks > 1 else 0


def latency_steps(kind: str, transport: str, ranks: int) -> int:
    """The steps whose latency one call pays, by the algorithm the transport runs: gloo and
    TensorFlow's RING a ring; NCCL picks the faster of ring and tree (its tuner compares their
    modelled times; at a latency-bound size that is the one of fewer steps)."""
    ring = ring_steps(kind, ranks)
    return min(ring, tree_steps(kind, ranks)) if transport == "nccl" else ring


def fit(points: list[Point]) -> tuple[float, float]:
    """(alpha, beta) of time = alpha + beta x wire bytes, least squares weighted by 1/time (each
    point's relative error counts alike, the 8 B calls as much as the 64 MiB ones); both kept
    at 0 or above."""
    wire = np.array([p.wire_bytes for p in points], dtype=np.float64)
    seconds = np.array([p.seconds for p in points], dtype=np.float64)
    weight = 1.0 / np.maximum(seconds, 1e-9)
    design = np.stack([np.ones_like(wire), wire], axis=1) * weight[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, seconds * weight, rcond=None)
    if alpha < 0:  # a negative latency fits noise: bandwidth alone
        alpha, beta = 0.0, float(np.sum(wire * seconds * weight**2) / np.sum((wire * weight) ** 2))
    if beta < 0:
        alpha, beta = float(np.median(seconds)), 0.0
    return float(alpha), float(beta)


def repeats(size: int) -> int:
    """Calls timed at `size`, the same on every rank (they must issue the same collectives):
    many small ones, where a call is microseconds, few large ones."""
    return 20 if size <= 262_144 else 10 if size <= 2_097_152 else 5 if size <= 16_777_216 else 3


def measure(
    timer: Callable[[str, int, int], float], kinds: tuple[str, ...], ranks: int, max_bytes: int
) -> dict[str, KindFit]:
    """Time every kind at every size up to `max_bytes` with `timer(kind, payload, calls)` (the
    mean seconds of one call over `calls`), after one call to warm up, and fit each. Every
    rank calls it alike."""
    sizes = [size for size in SIZES if size <= max_bytes]
    found = {}
    for kind in kinds:
        points = []
        for size in sizes:
            timer(kind, size, 1)  # warm-up: buffers, connections, compiled functions
            seconds = statistics.median(timer(kind, size, repeats(size)) for _ in range(3))
            wire = wire_bytes(kind, size, ranks)
            points.append(Point(payload_bytes=size, wire_bytes=wire, seconds=seconds))
        alpha, beta = fit(points)
        found[kind] = KindFit(alpha_s=alpha, beta_s_per_byte=beta, points=points)
    return found


@dataclass(frozen=True, kw_only=True)
class Side:
    """What one framework's link tool hands `main`: its collectives and how it starts."""

    framework: str
    kinds: tuple[str, ...]
    setup: Callable[[Any, ClusterSpec], Any]
    """(config, spec) -> the framework's DistInfo, joined with its peers."""
    timer: Callable[[Any], Callable[[str, int, int], float]]
    """DistInfo -> timer(kind, payload bytes, calls) -> mean seconds of one call."""
    transport: Callable[[Any, Any], str]
    """(DistInfo, config) -> gloo, nccl, ring..."""
    all_reduce_sum: Callable[[np.ndarray, Any], np.ndarray]
    leave: Callable[[Any, float], None]
    not_measured: dict[str, str] = field(default_factory=dict)


def main(side: Side, prog: str, description: str | None, argv: list[str] | None) -> int:
    """One rank of a link tool (`torch_impl.links`, `tf_impl.links`): join the peers as training
    does, time, fit, and the chief writes the profile. Exit 2 for a launch that cannot work."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--out", required=True, help="the profile's JSON file (the chief's)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1])
    args = parser.parse_args(argv)
    try:
        if args.max_bytes < SIZES[1]:
            raise ValueError(
                f"--max-bytes {args.max_bytes}: a fit takes two sizes at least, and the "
                f"smallest are {SIZES[0]} and {SIZES[1]} bytes; give {SIZES[1]} or more"
            )
        spec = environment.from_environment()
        if spec.world_size < 2:
            raise ValueError("a link takes 2 ranks or more: start this under a launcher")
        if spec.is_chief:  # before minutes of measuring: the profile must have a place
            writable(Path(args.out))
        cfg = config_io.load_config(None, [f"dist.device={args.device}"])
        info = side.setup(cfg, spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    kinds = measure(side.timer(info), side.kinds, spec.world_size, args.max_bytes)
    hosts = collectives.gather_texts(
        spec.node,
        rank=spec.rank,
        world_size=spec.world_size,
        all_reduce_sum=lambda values: side.all_reduce_sum(values, info),
    )
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
        )
        print(f"link profile: {write(profile, args.out)}")
    side.leave(info, cfg.dist.timeout_s)
    return 0


def writable(path: Path) -> None:
    """ValueError naming `path` and why, unless the profile can be written there."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        whole.write_text(path.parent / f".{path.name}.probe", "")
        (path.parent / f".{path.name}.probe").unlink()
    except OSError as error:
        raise ValueError(
            f"--out {path}: the profile cannot be written there ({error.strerror or error}); "
            "give a file in a writable folder"
        ) from None
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder: give the profile's file name")


def write(profile: LinkProfile, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    whole.write_text(path, profile.model_dump_json(indent=2) + "\n")
    return path


def read(path: str | Path) -> LinkProfile:
    """A profile from its file; ValueError naming the file and the problem."""
    try:
        return LinkProfile.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(
            f"link profile {path}: cannot be read ({error.strerror or error})"
        ) from None
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in problem["loc"]) or "the file"
        raise ValueError(
            f"link profile {path} is not one: {field}: {problem['msg']}; measure the link "
            "again (python -m torch_impl.links or tf_impl.links, under a launcher)"
        ) from None
    except ValueError as error:
        first = str(error).splitlines()
        raise ValueError(f"link profile {path} is not one: {' '.join(first[:3])}") from None


def schema_text() -> str:
    return json.dumps(LinkProfile.model_json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
