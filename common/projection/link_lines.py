"""What a link tool prints of a profile beside its file: each tier's fit, the latency per step
of each kind at every group size measured, the CPU each kind's largest call took, and what a
run's calls cost in its step's order against alone."""

from __future__ import annotations

from common.projection.link_profile import LinkProfile


def tier_lines(profile: LinkProfile) -> list[str]:
    """Each tier's fit per kind: latency and the bandwidth one rank sees."""
    lines = []
    for name, tier in profile.tiers.items():
        for kind, kind_fit in tier.kinds.items():
            rate = 1 / kind_fit.beta_s_per_byte / 1e6 if kind_fit.beta_s_per_byte else float("inf")
            lines.append(
                f"  {name:<10} {kind:<15} {tier.ranks} ranks x {tier.groups} groups: alpha "
                f"{kind_fit.alpha_s * 1e6:,.1f} us, {rate:,.1f} MB/s"
            )
    return lines


def latency_lines(profile: LinkProfile) -> list[str]:
    """Where a profile holds several group sizes, each kind's latency per step of its algorithm
    at each: the figure the projection carries to other sizes, shown so that its constancy is
    seen, not assumed."""
    found = profile.alpha_per_step()
    if not any(len(by_size) > 1 for by_size in found.values()):
        return []
    return [
        f"  {kind:<15} alpha a latency step: "
        + ", ".join(f"{seconds * 1e6:,.1f} us at {size} ranks" for size, seconds in by_size.items())
        for kind, by_size in found.items()
    ]


def cpu_lines(profile: LinkProfile, node_cores: float | None) -> list[str]:
    """Each kind's largest call: the chief's CPU seconds of it, as a share of one core over the
    call and of `node_cores` (the cores a CPU quota holds this process to; None: none). Near
    all of the node's, the call is held by the CPU, not the link: on a slower or busier node,
    inside a step that computes between calls, it costs more than the link says."""
    lines = []
    for kind, fit in profile.kinds.items():
        point = fit.points[-1]
        if point.cpu_s is None:
            continue
        share = point.cpu_s / point.seconds
        held = (
            f", {share / node_cores:.0%} of the node's {node_cores:g} cores" if node_cores else ""
        )
        lines.append(
            f"  {kind:<15} CPU a call of {point.payload_bytes:,} B: {point.cpu_s * 1e3:,.2f} ms "
            f"in {point.seconds * 1e3:,.2f} ms, {share:.0%} of a core{held}"
        )
    return lines


def in_step_lines(profile: LinkProfile) -> list[str]:
    """Each kind's sizes timed in a run's step (`Point.in_step_s`): a call's time there, on
    the mean over those sizes, against alone; the projection prices the step's calls so."""
    lines = []
    for kind, fit in profile.kinds.items():
        timed = [point for point in fit.points if point.in_step_s is not None]
        if not timed:
            continue
        there = sum(point.in_step_s or 0.0 for point in timed) / len(timed)
        alone = sum(point.seconds for point in timed) / len(timed)
        lines.append(
            f"  {kind:<15} in a run's step, in its order: {there * 1e3:,.2f} ms a call against "
            f"{alone * 1e3:,.2f} ms alone ({there / alone - 1:+.0%}), over {len(timed)} sizes"
        )
    return lines
