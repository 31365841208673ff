"""What a link tool prints of a profile beside its file: each tier's fit, and the latency per
step of each kind at every group size measured."""

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
