"""The projection benchmark's verdict and table (`common.tools.projection_check`): each row's
error against the nearer end of its projected range, and whether it holds: within TOLERANCE,
the range at most MAX_WIDTH wide."""

from __future__ import annotations

from dataclasses import dataclass

TOLERANCE = 0.05  # measured samples/s against the projection's nearer end
MAX_WIDTH = 0.10  # the range's high end over its low one, less 1


@dataclass(frozen=True, slots=True)
class Row:
    strategy: str
    rate: str
    nodes: int
    profiles: str  # the node counts its link profiles were measured on, e.g. "2" or "2,8"
    measured: float  # samples/s
    low: float  # the projection without overlap
    high: float  # with full overlap
    error: float  # measured against the range's nearer end (0 inside it)
    width: float  # high / low - 1
    ok: bool


def judged(
    strategy: str,
    rate: str,
    nodes: int,
    measured: float,
    low: float,
    high: float,
    profiles: str = "2",
) -> Row:
    """The row of one projection: its error against the nearer end of [low, high] and whether
    it holds (within TOLERANCE, the range at most MAX_WIDTH wide)."""
    nearer = min(max(measured, low), high)
    error = measured / nearer - 1
    width = high / low - 1
    ok = abs(error) <= TOLERANCE and width <= MAX_WIDTH
    return Row(strategy, rate, nodes, profiles, measured, low, high, error, width, ok)


def table(rows: list[Row]) -> str:
    """The benchmark's table, markdown."""
    lines = [
        "| strategy | rate | nodes | profiles at | measured | projected | error | range | ok |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        projected = f"{row.low:,.0f}" if row.width < 0.005 else f"{row.low:,.0f}-{row.high:,.0f}"
        lines.append(
            f"| {row.strategy} | {row.rate} | {row.nodes} | {row.profiles} | {row.measured:,.0f} "
            f"| {projected} "
            f"| {row.error:+.1%} | {row.width:.1%} | {'yes' if row.ok else 'no'} |"
        )
    return "\n".join(lines)
