"""A link model: what one collective costs on the links a launch runs on, measured with each
framework's own collectives (`torch_impl.links`, `tf_impl.links`, under any launcher) and fitted
per kind as time = alpha + beta x wire bytes (the bytes a ring algorithm makes one rank send,
`common.core.measure.traffic.wire_bytes`): alpha the fixed cost of a call (latency, launch,
synchronization), beta the cost of a byte (1 / the bandwidth one rank sees).

The profile is JSON, checked by `LinkProfile` (its schema: docs/link_profile.schema.json), and
names the hosts and the launch it was measured on, so that a projection can refuse to apply it
to runs of other hosts. The tool that measures it is `common.projection.link_bench`; the
projection that prices runs with it is the rest of `common.projection`.

    python -m common.launch --nproc 2 -- python -m torch_impl.links --out results/links.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.checks import error_lines
from common.core import whole_files

PROFILE_VERSION = 1
# 8 B to 64 MiB, a factor 8 apart: latency-bound at the bottom, bandwidth-bound at the top.
SIZES = (8, 64, 512, 4096, 32_768, 262_144, 2_097_152, 16_777_216, 67_108_864)
KIND_NAMES = ("all_reduce", "all_gather", "reduce_scatter")
TierName = Literal["intra_node", "inter_node"]


class Point(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    payload_bytes: int
    """Bytes each rank handed the collective (its shard, for an all_gather)."""
    wire_bytes: float
    """Bytes a ring algorithm makes each rank send for it."""
    seconds: float
    """Median seconds of one call, on the chief, between barriers."""
    cpu_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    """Median CPU seconds of one call in the chief's process, every thread (the backend's
    too), its share of the barriers and buffers included; None where not measured. Near
    `seconds` times the node's cores, the call is held by the CPU, not the link."""
    in_step_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    """Median seconds of one such call on the chief when a run's step of several kinds was
    issued in its own order (`--sizes-of`): a call after another kind can cost more than in a
    row of its own; None where no such step issues it."""


class KindFit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    alpha_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """Fixed seconds of one call, whatever its size (the fit's intercept)."""
    beta_s_per_byte: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    """Seconds per wire byte (the fit's slope); 1 / beta is the bandwidth one rank sees."""
    points: Annotated[list[Point], Field(min_length=2)]
    """The measurements the fit came from: two sizes at least."""

    def in_step(self, wire: float) -> float | None:
        """A point's time in a run's step, where one sends `wire` bytes a call, else None."""
        for point in self.points:
            if point.in_step_s is not None and abs(point.wire_bytes - wire) <= 1e-6 * wire:
                return point.in_step_s
        return None

    def interpolated(self, wire: float, log: bool = True) -> float:
        """Seconds of one call sending `wire` bytes, read off the points: straight between the
        two around it, on log scales (`log`: a model's points, every power of 2, which a single
        alpha and beta cannot follow where it changes protocol) or linear ones (a measurement's,
        a factor 8 apart); past the largest, its time plus beta a byte; below the smallest, its
        time (log) or its time less beta a byte (linear)."""
        known = sorted({p.wire_bytes: p.seconds for p in self.points if p.wire_bytes > 0}.items())
        if len(known) < 2:
            return self.alpha_s + wire * self.beta_s_per_byte
        if wire <= known[0][0]:
            below = known[0][1] - (known[0][0] - wire) * self.beta_s_per_byte
            return known[0][1] if log else max(below, 0.0)
        if wire >= known[-1][0]:
            return known[-1][1] + (wire - known[-1][0]) * self.beta_s_per_byte
        sizes = np.array([size for size, _ in known])
        times = np.array([max(seconds, 1e-12) for _, seconds in known])
        if not log:
            return float(np.interp(wire, sizes, times))
        return float(np.exp(np.interp(np.log(wire), np.log(sizes), np.log(times))))


class Tier(BaseModel):
    """One tier of a cluster's links, timed as a hybrid strategy uses it: every group of the
    tier at once, so that groups sharing a node's network link share it here too."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    ranks: Annotated[int, Field(ge=2)]
    """Ranks in each group: a node's ranks (intra_node), or one rank of every node
    (inter_node)."""
    groups: Annotated[int, Field(ge=1)]
    """Groups timed at once: one per node (intra_node), one per rank of a node (inter_node)."""
    kinds: Annotated[dict[str, KindFit], Field(min_length=1)]
    """Each collective's fit over one group, timed on the chief's."""
    sizes: dict[int, dict[str, KindFit]] = Field(default_factory=dict)
    """Fits of the tier's groups of other sizes, by their ranks (profiles of launches of
    several sizes merged, `common.projection.profiles.merged`); empty in a measured file."""


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
    source: str = "measured"
    """measured (the link tool timed the collectives), or the model the fits came from (e.g.
    torch's NCCL model, `torch_impl.nccl_model`): then every figure is that model's."""
    groups: dict[int, dict[str, KindFit]] = Field(default_factory=dict)
    """Fits at other group sizes than world_size, by group size: a call over one of them is
    priced by its own fit, not scaled from world_size's."""

    tiers: dict[TierName, Tier] = Field(default_factory=dict)
    """Fits within a node and across nodes (`--tiers`, on several nodes of several ranks each),
    for strategies whose groups keep to one tier (hsdp: shards within a node, replicas across
    them); empty where not measured."""

    def tier(self, name: TierName) -> LinkProfile | None:
        """The tier as a profile of its own (its fits over its group size), or None."""
        found = self.tiers.get(name)
        if found is None:
            return None
        update = {"kinds": found.kinds, "world_size": found.ranks, "groups": found.sizes}
        update["tiers"] = {}
        return self.model_copy(update=update)

    def measured(self) -> dict[int, dict[str, KindFit]]:
        """Every fit by the group size it was measured over: the launch's, and `groups`'."""
        return dict(sorted({**self.groups, self.world_size: self.kinds}.items()))

    def alpha_per_step(self) -> dict[str, dict[int, float]]:
        """Each kind's latency per step of its algorithm (`latency_steps`) at every group
        measured, by its ranks: alpha over the steps. Where the model holds, it is one figure
        for every group."""
        found: dict[str, dict[int, float]] = {}
        for ranks, fits in self.measured().items():
            for kind, own in fits.items():
                steps = max(1, latency_steps(kind, self.transport, ranks))
                found.setdefault(kind, {})[ranks] = own.alpha_s / steps
        return found

    def seconds(self, kind: str, calls: float, wire: float, group: int) -> float | None:
        """Seconds the model gives `calls` collectives of `kind` over `group` ranks sending
        `wire` bytes in all, or None where the profile has no fit for the kind.

        - A group the profile measured (the launch, or one of `groups`) is priced by its own
          points (`KindFit.interpolated`): a single line misses where the time bends; a call
          timed in a run's step, at that time (`Point.in_step_s`).
        - Any other group takes the latency per step of the largest group measured below it
          (else the smallest above): alpha over that group's `latency_steps`, times the steps
          of `group`.
        - Its bytes are read off that group's points at the same wire bytes a call, less its
          latency, not priced by the fit's beta, which leans toward the small calls and sits
          under the large points (docs/communication.md, section 3, has the figures).
        """
        measured = self.measured()
        own = measured.get(group, {}).get(kind)
        log = self.source != "measured"  # a model's curve, every power of 2
        if own is not None:
            if not calls:
                return 0.0
            in_step = own.in_step(wire / calls)
            return calls * (own.interpolated(wire / calls, log=log) if in_step is None else in_step)
        measured_ranks = [ranks for ranks, fits in measured.items() if kind in fits]
        fitted = kind  # the kind whose fit prices the call, and whose steps its alpha spans
        if not measured_ranks:  # not measured (MWMS's reduce_scatter, DDP's broadcasts)
            kind_fit, ranks, fitted = self.kinds.get("all_reduce"), self.world_size, "all_reduce"
            if kind_fit is None:
                return None
        else:
            ranks = max([r for r in measured_ranks if r < group], default=min(measured_ranks))
            kind_fit = measured[ranks][kind]
        per_step = kind_fit.alpha_s / max(1, latency_steps(fitted, self.transport, ranks))
        steps = latency_steps(kind, self.transport, group)
        if not calls:
            return 0.0
        read = kind_fit.interpolated(wire / calls, log=log) - kind_fit.alpha_s
        return calls * (steps * per_step + max(read, 0.0))


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
    modelled times; at a latency-bound size that is the one of fewer steps). gloo broadcasts
    down a binomial tree, ceil(log2 n) steps (gloo/broadcast.cc)."""
    if kind == "broadcast" and transport == "gloo":
        return max(0, ranks - 1).bit_length()
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


def writable(path: Path) -> None:
    """ValueError naming `path` and why, unless the profile can be written there."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        whole_files.write_text(path.parent / f".{path.name}.probe", "")
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
    whole_files.write_text(path, profile.model_dump_json(indent=2) + "\n")
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
        raise ValueError(
            f"link profile {path} is not one: {error_lines.file_line(error)}; measure the link "
            "again (python -m torch_impl.links or tf_impl.links, under a launcher)"
        ) from None
    except ValueError as error:
        first = str(error).splitlines()
        raise ValueError(f"link profile {path} is not one: {' '.join(first[:3])}") from None


def schema_text() -> str:
    return json.dumps(LinkProfile.model_json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
