"""Where two runs trade places as the links' bandwidth changes: each run's projected step at a
world size split into what the bandwidth moves (its calls' bytes) and what it does not (their
latency, and the rest of the step), as `common.projection.step_model` prices them."""

from __future__ import annotations

from common.projection.link_profile import KindFit, LinkProfile
from common.projection.profiles import with_fits
from common.projection.step_model import communication_s, rest_at, step_parts
from common.report.runs import RecordedRun


def crossover(
    a: RecordedRun, b: RecordedRun, profiles: tuple[LinkProfile, LinkProfile], world: int
) -> str | None:
    """At which link speed (a factor on the profiles' bandwidth, each run's own) two runs'
    projected steps at `world` ranks trade places, when they do (no overlap assumed)."""

    def parts(run: RecordedRun, profile: LinkProfile) -> tuple[float, float] | None:
        fixed = communication_s(run, _latency_only(profile), world)
        every = communication_s(run, profile, world)
        timed = run.epochs[1:] if len(run.epochs) > 1 else run.epochs
        if fixed is None or every is None or not timed:
            return None
        own = communication_s(run, profile, run.start.world_size) or 0.0
        step = run.start.global_batch_size / sorted(e.samples_per_s for e in timed)[len(timed) // 2]
        compute = rest_at(run, step_parts(run, step, own), world, weak=False)
        return compute + fixed, every - fixed  # step = first + second / speed

    one, two = parts(a, profiles[0]), parts(b, profiles[1])
    if one is None or two is None or one[1] == two[1]:
        return None
    speed = (two[1] - one[1]) / (one[0] - two[0]) if one[0] != two[0] else None
    if speed is None or speed <= 0:
        return None
    return f"{speed:.2g}x the profile's bandwidth"


def _latency_only(profile: LinkProfile) -> LinkProfile:
    """The profile with no cost per byte: each fit's alpha alone, its points flattened to it too
    (a group the profile measured is priced from its points)."""

    def flat(fit: KindFit) -> KindFit:
        points = [point.model_copy(update={"seconds": fit.alpha_s}) for point in fit.points]
        return fit.model_copy(update={"beta_s_per_byte": 0.0, "points": points})

    return with_fits(profile, flat)
