"""compare's projection (`--project 2,8,64 --links PROFILE`): every run priced at more workers
by `common.projection.step_model`, as a table, a few sentences on where the order between runs
changes, and one plot of the measured points over the projected bands."""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from typing_extensions import NotRequired, TypedDict

from common.projection import crossover, link_profile, reasons, step_model
from common.projection.levers import Lever
from common.projection.memory_at_n import LargestFit, MemoryRow
from common.projection.profiles import Profiles, find_profiles
from common.report.runs import RecordedRun


class ProjectionData(TypedDict):
    """`compare.py --format json`'s last line, {"projection": ...}: every projected row, the
    sentences and caveats, and with --device-memory the memory per rank at each N."""

    profiles: str
    rows: list[step_model.Projected]
    sentences: list[str]
    caveats: list[str]
    memory: NotRequired[list[MemoryRow]]
    largest_fitting: NotRequired[list[LargestFit]]
    levers: NotRequired[list[Lever]]


def schema_text() -> str:
    """The JSON Schema of ProjectionData (docs/projection.schema.json)."""
    return json.dumps(TypeAdapter(ProjectionData).json_schema(), indent=2) + "\n"


METHOD = (
    "a model's numbers (common.projection.step_model): each run's own step less its "
    "communication, split by its profiled step into compute, optimizer and overhead; "
    "communication from its counted collectives at the profile's alpha and beta; no "
    "contention or congestion"
)


@dataclass
class Report:
    """The projection as data; `text` prints it, and the HTML page takes its parts."""

    table: list[str] = field(default_factory=list)
    """The profiles it used, then the table's header and rows, as printed."""
    rows: list[step_model.Projected] = field(default_factory=list)
    measured: list[tuple[str, int, float]] = field(default_factory=list)
    """Each run's label, workers and measured samples/s."""
    profile: str = ""
    sentences: list[str] = field(default_factory=list)
    """Why, and where runs trade places."""
    caveats: list[str] = field(default_factory=list)
    profiles: Profiles | None = None
    """The link profile that priced each run (the memory levers price with it too)."""

    def of(self, run: RecordedRun) -> link_profile.LinkProfile:
        """The link profile that priced `run`; ValueError for a report made without one."""
        if self.profiles is None:
            raise ValueError("the projection holds no link profile")
        return self.profiles.of(run)

    @property
    def text(self) -> str:
        """The terminal's form: the table, each sentence, each caveat, and the method."""
        lines = [*self.table, *(f"  > {sentence}" for sentence in self.sentences)]
        lines += [f"  * caveat: {caveat}" for caveat in self.caveats]
        return "\n".join([*lines, f"  * {METHOD}"])

    def as_dict(self) -> dict[str, Any]:
        """The projection as data (compare --format json): every row's figures, the sentences
        and the caveats."""
        return {
            "profiles": self.profile,
            "rows": [dataclasses.asdict(row) for row in self.rows],
            "sentences": self.sentences,
            "caveats": self.caveats,
        }


def worlds(text: str) -> list[int]:
    """'2,8,64' -> [2, 8, 64]; ValueError naming the bad part."""
    try:
        found = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--project takes worker counts like 2,8,64, got {text!r}") from None
    if not found or found[0] < 1:
        raise ValueError(f"--project takes worker counts of 1 or more, got {text!r}")
    return found


DEFAULT_WORKERS = "8,64,512"  # compare's projection when the results hold a profile


def report(
    runs: list[RecordedRun],
    project: str,
    given: list[Path] | None,
    results: list[str],
    scaling: str | None = None,
) -> Report:
    """The projection's text and numbers; ValueError for a bad list or a missing profile.
    `scaling`: strong, weak, or None for each run's own (`step_model.project`)."""
    counts = worlds(project)
    profiles = find_profiles(given, results, runs, counts)
    lines = []
    caveats = []
    for path, profile in profiles.found.values():
        hosts = ", ".join(sorted(set(profile.hosts)))
        if profile.source != "measured":
            lines.append(f"== projection with {profile.source} ({path})")
            caveats.append(
                f"{profile.framework} runs are priced with {profile.source}; measure your "
                f"cluster's links for figures of its own (srun python -m "
                f"{profile.framework}_impl.links --out links-{profile.framework}.json)"
            )
            continue
        sizes = sorted(profile.measured())
        tiered = ", ".join(  # hsdp's groups: the sizes each tier measured
            f"{name.replace('_', '-')} {' or '.join(map(str, sorted({t.ranks, *t.sizes})))}"
            for name, t in profile.tiers.items()
        )
        tiered = f"; its tiers' groups of {tiered} ranks from their own" if tiered else ""
        fits = [fit for each in profile.measured().values() for fit in each.values()]
        if any(p.in_step_s is not None for fit in fits for p in fit.points):
            tiered += "; the calls of a run's step timed in its order priced so (--sizes-of)"
        also = "".join(f", {other}" for other in profiles.also.get(profile.framework, []))
        lines.append(
            f"== projection with the link profile {path}{also} ({profile.framework} "
            f"{profile.transport}, {profile.world_size} ranks on {hosts}): a group of "
            f"{' or '.join(map(str, sizes))} ranks priced from its own points, any other "
            f"from the largest measured below it, its latency by its algorithm's steps{tiered}"
        )
        priced = [run for run in runs if profiles.of(run) is profile]
        caveats += [c for c in [step_model.host_caveat(priced, profile)] if c]
    caveats += profiles.caveats(runs)
    found = Report(profile=profiles.named(), profiles=profiles)
    header = ("run", "workers", "samples/s (no overlap .. full)", "scaling eff %", "comm ms/step")
    lines.append("{:>34}  {:>7}  {:>32}  {:>14}  {:>12}".format(*header))
    for run in runs:
        rows, said = step_model.project(run, profiles.of(run), counts, scaling)
        caveats += said
        if rows and (held := reasons.held_by_cpu(run)):
            caveats.append(held)
        timed = run.epochs[1:] if len(run.epochs) > 1 else run.epochs
        if rows and timed:
            measured = sorted(e.samples_per_s for e in timed)[len(timed) // 2]
            found.measured.append((rows[0].label, run.start.world_size, measured))
        for row in rows:
            found.rows.append(row)
            speeds = f"{row.samples_s_low:>14,.0f} .. {row.samples_s_high:<15,.0f}"
            efficiency = f"{100 * row.efficiency_low:>5.0f} .. {100 * row.efficiency_high:<4.0f}"
            comm = f"{1000 * row.communication_s:>12.2f}"
            lines.append(f"{row.label:>34}  {row.world:>7}  {speeds}  {efficiency}  {comm}")
    found.sentences = [
        *reasons.shares(runs, profiles.of),
        *reasons.calls_cpu(runs, profiles.of, counts),
        *reasons.sharded_against_replicated(runs, profiles.of, counts),
        *_flips(runs, profiles, counts),
        *_size_flips(runs, profiles, counts),
    ]
    found.caveats = list(dict.fromkeys(caveats))
    found.table = lines
    return found


def _flips(runs: list[RecordedRun], profiles: Profiles, counts: list[int]) -> list[str]:
    """Where two runs of one worker count trade places as the link's bandwidth changes."""
    said = []
    by_world: dict[int, list[RecordedRun]] = {}
    for run in runs:
        by_world.setdefault(run.start.world_size, []).append(run)
    for world in counts:
        for own, group in by_world.items():
            if own > world or len(group) < 2:
                continue
            first, second = group[0], group[1]
            pair = (profiles.of(first), profiles.of(second))
            at = crossover.crossover(first, second, pair, world)
            if at:
                said.append(
                    f"At {world} workers, {_name(first)} and {_name(second)} trade places at "
                    f"{at} (no overlap assumed)"
                )
    return said


def _size_flips(runs: list[RecordedRun], profiles: Profiles, counts: list[int]) -> list[str]:
    """Where two series of runs measured at the same model sizes (the size axis) trade places
    as the model grows, at each projected worker count: the crossing interpolated on a log
    scale of parameters between the two measured sizes around it."""
    series: dict[str, dict[int, RecordedRun]] = {}
    for run in runs:
        if run.start.model_params and run.epochs:
            key = _name(run) + (f" ({run.row_variant()})" if run.row_variant() else "")
            series.setdefault(key, {})[run.start.model_params] = run
    said = []
    for world in counts:
        for (first, ones), (second, twos) in itertools.combinations(series.items(), 2):
            sizes = sorted(set(ones) & set(twos))
            gaps = []
            for size in sizes:
                steps = [
                    _projected_step(group[size], profiles.of(group[size]), world)
                    for group in (ones, twos)
                ]
                if None not in steps:
                    gaps.append((size, steps[0] - steps[1]))  # type: ignore[operator]
            for (small, below), (large, above) in zip(gaps, gaps[1:], strict=False):
                if below * above >= 0:
                    continue
                at = small * (large / small) ** (below / (below - above))
                faster = first if below < 0 else second
                said.append(
                    f"At {world} workers, {first} and {second} trade places near "
                    f"{at / 1e6:.3g}M parameters (measured at {small / 1e6:.3g}M and "
                    f"{large / 1e6:.3g}M): below it {faster} is faster (no overlap assumed)"
                )
    return said


def _projected_step(
    run: RecordedRun, profile: link_profile.LinkProfile, world: int
) -> float | None:
    """The run's projected step at `world` workers without overlap; None where it has none."""
    if world < run.start.world_size:
        return None
    rows, _ = step_model.project(run, profile, [world])
    return rows[0].step_slow_s if rows else None


def _name(run: RecordedRun) -> str:
    return reasons.name(run)
