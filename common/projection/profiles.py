"""Which link profiles price a projection: those named with --links, or those found among the
results, each validated as it is read; one framework's profiles of launches of several sizes
(2 nodes and 8, say) priced as one (`merged`), repeats of one launch as their medians
(`median_of`); for torch runs on GPUs without a torch profile, torch's own model of NCCL
(`torch_impl.nccl_model`, run in a process of its own)."""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.core.measure import peak
from common.projection import link_profile
from common.projection.link_profile import TierName
from common.report.runs import RecordedRun


def profiles_in(results: list[str]) -> list[Path]:
    """The link profiles (links*.json) in the result folders, sorted."""
    return sorted({p for r in results if Path(r).is_dir() for p in Path(r).glob("links*.json")})


@dataclass(frozen=True)
class Profiles:
    """The link profiles a projection prices with, by framework: each run with its own
    framework's where there is one (torch's collectives are not TensorFlow's), else with the
    one there is, and a caveat that names the tool for the missing one."""

    found: dict[str, tuple[Path, link_profile.LinkProfile]]
    also: dict[str, list[Path]] = field(default_factory=dict)  # merged into found's, by framework

    def of(self, run: RecordedRun) -> link_profile.LinkProfile:
        own = self.found.get(run.start.framework)
        return (own or next(iter(self.found.values())))[1]

    def caveats(self, runs: list[RecordedRun]) -> list[str]:
        have = ", ".join(sorted(self.found))
        return [
            f"no {framework} link profile: its runs are priced with {have}'s collectives; "
            f"measure its own (python -m {framework}_impl.links, under a launcher)"
            for framework in sorted({run.start.framework for run in runs} - set(self.found))
        ]

    def named(self) -> str:
        paths = [
            path
            for name, (path, _) in self.found.items()
            for path in [path, *self.also.get(name, [])]
        ]
        return ", ".join(str(path) for path in paths)


def merged(profiles: Sequence[link_profile.LinkProfile]) -> link_profile.LinkProfile:
    """One framework's profiles of launches of several sizes as one: the largest launch's, every
    other launch's fits a group of its size (`LinkProfile.groups`), so that a call over a size
    any of them measured is priced from that size's own points, not scaled by the algorithm's
    steps from another; their tiers likewise (`tiers`). ValueError where they differ in
    framework, transport or device, or two measured one size."""
    largest = max(profiles, key=lambda profile: profile.world_size)
    groups: dict[int, dict[str, link_profile.KindFit]] = {}
    for profile in profiles:
        seen = (profile.framework, profile.transport, profile.device_type)
        if seen != (largest.framework, largest.transport, largest.device_type):
            raise ValueError(
                f"link profiles of {' '.join(seen)} and of {largest.framework} "
                f"{largest.transport} {largest.device_type} cannot price one framework's runs "
                "together: give one framework's profiles of one transport and device"
            )
        for size, fits in profile.measured().items():
            if size in groups:
                raise ValueError(
                    f"two link profiles of {profile.framework} measured {size} ranks: give one "
                    "profile per launch size"
                )
            groups[size] = fits
    del groups[largest.world_size]
    hosts = largest.hosts + sorted({h for p in profiles for h in p.hosts} - set(largest.hosts))
    return largest.model_copy(update={"groups": groups, "hosts": hosts, "tiers": tiers(profiles)})


def median_of(profiles: Sequence[link_profile.LinkProfile]) -> link_profile.LinkProfile:
    """One launch's profile measured several times as one: each point of each kind (and tier)
    the median of its seconds (and CPU and in-step seconds, where every repeat has them), each
    kind fitted again. The first profile's other fields stay.
    ValueError where they are not measurements of one launch's sizes."""
    first = profiles[0]
    shape = _shape(first)
    for other in profiles[1:]:
        if _shape(other) != shape:
            raise ValueError(
                f"link profiles of {other.framework} x{other.world_size} and of "
                f"{first.framework} x{first.world_size} measured other collectives or sizes: "
                "a median takes repeats of one launch, measured alike"
            )
    kinds = _median_fits([profile.kinds for profile in profiles])
    tiers = {
        name: tier.model_copy(
            update={"kinds": _median_fits([profile.tiers[name].kinds for profile in profiles])}
        )
        for name, tier in first.tiers.items()
    }
    return first.model_copy(update={"kinds": kinds, "tiers": tiers})


def _shape(profile: link_profile.LinkProfile) -> tuple[object, ...]:
    """What a repeat of the same measurement shares: who, on how many, which calls of which
    sizes."""

    def sizes(fits: dict[str, link_profile.KindFit]) -> list[tuple[str, list[int]]]:
        return sorted((kind, [p.payload_bytes for p in fit.points]) for kind, fit in fits.items())

    tiers = sorted((name, tier.ranks, sizes(tier.kinds)) for name, tier in profile.tiers.items())
    seen = (profile.framework, profile.transport, profile.device_type, profile.world_size)
    return (*seen, sizes(profile.kinds), tiers)


def _median_fits(each: list[dict[str, link_profile.KindFit]]) -> dict[str, link_profile.KindFit]:
    found = {}
    for kind, fit in each[0].items():
        points = []
        for i, point in enumerate(fit.points):
            repeats = [fits[kind].points[i] for fits in each]
            median: dict[str, float | None] = {
                "seconds": statistics.median(repeat.seconds for repeat in repeats)
            }
            for name in ("cpu_s", "in_step_s"):  # where every repeat has it
                some = [getattr(repeat, name) for repeat in repeats]
                median[name] = None if None in some else statistics.median(some)
            points.append(point.model_copy(update=median))
        alpha, beta = link_profile.fit(points)
        found[kind] = link_profile.KindFit(alpha_s=alpha, beta_s_per_byte=beta, points=points)
    return found


def with_fits(
    profile: link_profile.LinkProfile,
    change: Callable[[link_profile.KindFit], link_profile.KindFit],
) -> link_profile.LinkProfile:
    """The profile with `change` made to every fit it holds: the launch's, its groups', and
    each tier's (its other sizes' too)."""

    def each(fits: dict[str, link_profile.KindFit]) -> dict[str, link_profile.KindFit]:
        return {kind: change(fit) for kind, fit in fits.items()}

    tiers = {
        name: tier.model_copy(
            update={"kinds": each(tier.kinds), "sizes": {n: each(f) for n, f in tier.sizes.items()}}
        )
        for name, tier in profile.tiers.items()
    }
    groups = {size: each(fits) for size, fits in profile.groups.items()}
    return profile.model_copy(
        update={"kinds": each(profile.kinds), "groups": groups, "tiers": tiers}
    )


def cpu_of(profile: link_profile.LinkProfile) -> link_profile.LinkProfile | None:
    """The profile as a model of CPU, not time: each point's seconds its `cpu_s` (the chief's
    CPU seconds of a call), each kind fitted again, so that it prices a step's calls' CPU as
    it prices their time; None where a point has none (measured before points kept it)."""
    every = [*profile.measured().values()]
    for tier in profile.tiers.values():
        every += [tier.kinds, *tier.sizes.values()]
    if any(p.cpu_s is None for fits in every for fit in fits.values() for p in fit.points):
        return None

    def as_cpu(fit: link_profile.KindFit) -> link_profile.KindFit:
        update = {"in_step_s": None}  # CPU, not time: the step's order times no CPU
        points = [p.model_copy(update={**update, "seconds": p.cpu_s}) for p in fit.points]
        alpha, beta = link_profile.fit(points)
        return link_profile.KindFit(alpha_s=alpha, beta_s_per_byte=beta, points=points)

    return with_fits(profile, as_cpu)


def tiers(profiles: Sequence[link_profile.LinkProfile]) -> dict[TierName, link_profile.Tier]:
    """Each tier of the profiles as one: the largest launch's, every other launch's groups of
    another size among its `sizes`. A size two launches measured keeps the larger launch's
    fits (a node's ranks at 8 nodes, timed beside 7 other nodes' as the training runs there)."""
    found: dict[TierName, link_profile.Tier] = {}
    for profile in sorted(profiles, key=lambda profile: -profile.world_size):
        for name, tier in profile.tiers.items():
            kept = found.setdefault(name, tier)
            if tier.ranks != kept.ranks and tier.ranks not in kept.sizes:
                sizes = {**kept.sizes, tier.ranks: tier.kinds}
                found[name] = kept.model_copy(update={"sizes": dict(sorted(sizes.items()))})
    return found


def find_profiles(
    given: Sequence[Path] | None,
    results: list[str],
    runs: Sequence[RecordedRun] = (),
    counts: Sequence[int] = (),
) -> Profiles:
    """The profiles named, or the link profiles found in the result folders; every one validated
    as it is read, each framework's merged (`merged`). Where torch runs on GPUs have no torch
    profile, torch's model of NCCL prices them (`nccl_model`)."""
    for path in given or []:
        if not path.is_file():
            raise ValueError(f"--links {path}: no such file (make one: python -m torch_impl.links)")
    paths = list(given) if given else profiles_in(results)
    read: dict[str, list[tuple[Path, link_profile.LinkProfile]]] = {}
    for path in paths:
        profile = link_profile.read(path)
        sizes = {size for _, seen in read.get(profile.framework, []) for size in seen.measured()}
        if given or not sizes & set(profile.measured()):  # found twice: the first by name
            read.setdefault(profile.framework, []).append((path, profile))
    found: dict[str, tuple[Path, link_profile.LinkProfile]] = {}
    also: dict[str, list[Path]] = {}
    for framework, each in read.items():
        first = max(each, key=lambda pair: pair[1].world_size)[0]
        found[framework] = (first, merged([profile for _, profile in each]))
        also[framework] = [path for path, _ in each if path != first]
    on_gpus = [r for r in runs if r.start.framework == "torch" and r.start.device_type == "gpu"]
    if "torch" not in found and on_gpus:
        sizes = {r.start.world_size for r in on_gpus} | set(counts)
        found["torch"] = nccl_model(sorted(size for size in sizes if size >= 2) or [2])
    if not found:
        raise ValueError(
            "--project needs a link profile: give --links PROFILE, or put the links.json that "
            "python -m torch_impl.links (or tf_impl.links) wrote into the results"
        )
    return Profiles(found, also)


def nccl_model(worlds: list[int]) -> tuple[Path, link_profile.LinkProfile]:
    """torch's NCCL model at `worlds` as a link profile (`python -m torch_impl.nccl_model`, in
    a process of its own: common imports no framework); ValueError when it cannot run."""
    # Beside the suite's cache, one file per set of sizes, rewritten on each call: no folder
    # left behind per compare.py run.
    out = peak.cache_path().parent / f"links-torch-nccl-model-{'-'.join(map(str, worlds))}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "torch_impl.nccl_model",
        "--worlds",
        ",".join(map(str, worlds)),
    ]
    done = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(
            f"no torch link profile for runs on GPUs, and torch's NCCL model did not run: {last}"
        )
    return out, link_profile.read(out)
